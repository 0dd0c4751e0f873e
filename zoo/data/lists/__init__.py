"""Annotation lists: what one video of a list is (``records``, a leaf), the list files zoo and
other projects write (``annotations``, ``formats``), the other sources (``sources``: Kinetics CSVs,
UCF101/HMDB51 splits, class folders) and the records providers datasets are built from
(``providers``).
"""
