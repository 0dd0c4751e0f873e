"""Video data: annotation lists, decoding, frame sampling, transforms, loaders, synthetic data.

``build_loader(cfg, split)`` is the entry point the engine uses; ``DATASET_REGISTRY`` is where a
user's own dataset class registers (see ``zoo.data.build`` for the call contract).
"""

from . import video_dataset  # noqa: F401  (registers VideoListDataset)
from .build import DATASET_REGISTRY, build_dataset, build_loader


def __getattr__(name: str) -> object:
    # zoo.data.synthetic is imported on first use: `python -m zoo.data.synthetic` would otherwise
    # find it already imported by this package and runpy warns about that.
    if name == "prepare_synthetic":
        from .synthetic import prepare_synthetic

        return prepare_synthetic
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DATASET_REGISTRY", "build_dataset", "build_loader", "prepare_synthetic"]
