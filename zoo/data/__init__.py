"""Video data: annotation lists, decoding, frame sampling, transforms, loaders, synthetic data.

``build_loader(cfg, split)`` is the entry point the engine uses; ``DATASET_REGISTRY`` is where a
user's own dataset class registers (see ``zoo.data.build`` for the call contract).
"""

from . import source_datasets, video_dataset  # noqa: F401  (register the datasets)
from .build import DATASET_REGISTRY, build_dataset, build_loader, fill_normalization
from .decoders import DECODERS, DecodeError, decode_frames, open_video, register_decoder
from .robust import TooManyBadVideos
from .video_dataset import ClipDataset, VideoListDataset


def __getattr__(name: str) -> object:
    # zoo.data.synthetic is imported on first use: `python -m zoo.data.synthetic` would otherwise
    # find it already imported by this package and runpy warns about that.
    if name == "prepare_synthetic":
        from .synthetic import prepare_synthetic

        return prepare_synthetic
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DATASET_REGISTRY", "DECODERS", "ClipDataset", "DecodeError", "TooManyBadVideos",
    "VideoListDataset", "build_dataset", "build_loader", "decode_frames", "fill_normalization",
    "open_video", "prepare_synthetic", "register_decoder",
]
