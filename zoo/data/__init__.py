"""Video data: annotation lists, decoding, frame sampling, transforms, loaders, synthetic data.

``build_loader(cfg, split)`` is the entry point the trainer and the tester use;
``DATASET_REGISTRY`` is where a user's own dataset registers: a records provider
(``RecordsProvider``, ``VideoList``) with ``register_dataset``, composed with the one
``ClipDataset`` (see ``zoo.data.build`` for the call contract).

The names below are imported on first use (PEP 562), so ``import zoo.data.decode.pyav`` (a reader
that needs only PyAV and numpy) does not import torch. ``zoo.data.build``, where
``DATASET_REGISTRY`` comes from, registers the built-in datasets when it is imported.
"""

from ..utils.lazy import lazy_attributes

# Public name -> the submodule that defines it.
_LAZY = {
    "DATASET_REGISTRY": "build", "build_dataset": "build", "build_loader": "build",
    "count_train_classes": "build",
    "fill_normalization": "build", "normalization": "build",
    "DECODERS": "decode.registry", "DecodeError": "decode.base",
    "decode_frames": "decode.registry", "open_video": "decode.registry",
    "register_decoder": "decode.registry",
    "TooManyBadVideos": "robust",
    "ClipDataset": "video_dataset", "ClipSettings": "clip_settings",
    "VideoListDataset": "dataset_recipes", "register_dataset": "dataset_recipes",
    "ListSource": "lists.providers", "RecordsProvider": "lists.providers",
    "VideoList": "lists.providers", "VideoRecord": "lists.records",
    # zoo.data.synthetic is only imported on first use also because `python -m zoo.data.synthetic`
    # would otherwise find it already imported by this package, and runpy warns about that.
    "prepare_synthetic": "synthetic",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


__all__ = [
    "DATASET_REGISTRY", "DECODERS", "ClipDataset", "ClipSettings", "DecodeError", "ListSource",
    "RecordsProvider", "TooManyBadVideos", "VideoList", "VideoListDataset", "VideoRecord",
    "build_dataset", "build_loader", "count_train_classes", "decode_frames", "fill_normalization",
    "normalization",
    "open_video",
    "prepare_synthetic", "register_dataset", "register_decoder",
]
