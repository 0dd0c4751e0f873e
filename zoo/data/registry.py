"""``DATASET_REGISTRY``, on its own so that the dataset modules can register in it while
:mod:`zoo.data.build` imports them.

Use it through ``zoo.data`` or ``zoo.data.build``: importing either registers the built-in
datasets (this module alone holds only the ones whose modules were already imported).
"""

from ..utils.registry import Registry

DATASET_REGISTRY = Registry("DATASET")
# Call contract: ``DATASET_REGISTRY.get(name)(**dataset_kwargs(cfg, split)) -> Dataset``
# (see zoo.data.build's docstring for the keyword arguments and the item format).
