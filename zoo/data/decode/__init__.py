"""Video readers: one file per reader (``pyav``, ``opencv``, ``decord``, ``torchcodec``,
``frames``), ``auto`` (the fastest exact reader for the file's container, ``containers``), the
contract and errors they share (``base``), and the table ``CONFIG.DATA.DECODER`` names
(``registry``: ``DECODERS``, ``register_decoder``, ``open_video``, ``decode_frames``).

Nothing here imports torch until a tensor is asked for.
"""
