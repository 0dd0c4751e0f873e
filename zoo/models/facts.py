"""``ModelFacts``: what zoo records beside each registered model (input, normalisation, size).

A family file builds one ``ModelFacts`` per registered name and hands it to
:func:`zoo.models.register_model`. The facts feed ``tools/list_models.py`` and docs/models.md,
``--dry-run``, the default ``DATA.MEAN`` / ``STD``, the FLOPs recount (``flops.measure``), export's
example input, and the weights table (``alias_of`` / ``weights_of`` / ``inherits_weights``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "KINETICS_MEAN", "KINETICS_STD", "ModelFacts",
           "video_facts"]

# Normalisations the families share (ImageNet's; the 0.45 / 0.225 of PySlowFast's Kinetics nets).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
KINETICS_MEAN = (0.45, 0.45, 0.45)
KINETICS_STD = (0.225, 0.225, 0.225)

_TASKS = ("image", "video")


@dataclass(frozen=True)
class ModelFacts:
    """The facts of one registered model.

    Args:
        input_frames: Frames of one view the model was published with (1 for image models).
        sampling_stride: Frame stride between them, or ``None`` for TSN-style segments (one
            frame from each of ``input_frames`` equal segments of the video).
        crop_size: Side of the square crop.
        mean: Per-channel mean of the normalisation (RGB, in [0, 1] units).
        std: Per-channel std of the normalisation.
        task: ``"video"`` (input ``(B, C, T, H, W)``) or ``"image"`` (``(B, C, H, W)``).
        params: Parameter count at the default class count (1000 for images, else 400).
        gflops: Multiply-adds (1e9) of one view at the input above (torch.utils.flop_counter).
        published_top1: Kinetics-400 top-1 the publisher reports for these weights.
        alpha: SlowFast frame-rate ratio (slow frames = ``input_frames // alpha``).
        source: Whose model this is when not zoo's own (``"torchvision"``, ``"gluoncv"``).
        alias_of: The architecture an alias builds (gluoncv's names); aliases are left out of
            ``list_models(aliases=False)``.
        weights_of: The model whose published weights this one loads (when it has none).
        num_classes: The class count the name fixes (``None``: any; default 400 / 1000).
        inherits_weights: Whether an alias may load its base's video-trained weights (False
            when its input or layers differ from the base's).
    """

    input_frames: int
    sampling_stride: Optional[int]
    crop_size: int
    mean: Tuple[float, ...]
    std: Tuple[float, ...]
    task: str = "video"
    params: Optional[int] = None
    gflops: Optional[float] = None
    published_top1: Optional[float] = None
    alpha: Optional[int] = None
    source: Optional[str] = None
    alias_of: Optional[str] = None
    weights_of: Optional[str] = None
    num_classes: Optional[int] = None
    inherits_weights: bool = True

    def __post_init__(self) -> None:
        if self.task not in _TASKS:
            raise ValueError(f"ModelFacts.task must be one of {_TASKS}, got {self.task!r}")
        if len(self.mean) != len(self.std):
            raise ValueError(f"ModelFacts mean {self.mean} and std {self.std} differ in length")
        # Stored as tuples so a frozen record cannot be changed through a shared list.
        object.__setattr__(self, "mean", tuple(self.mean))
        object.__setattr__(self, "std", tuple(self.std))

    @property
    def sampling(self) -> str:
        """``"segments"`` (TSN: ``sampling_stride`` None) or ``"stride"``."""
        return "segments" if self.sampling_stride is None else "stride"

    @property
    def default_num_classes(self) -> int:
        """The class count a builder uses when none is given."""
        return self.num_classes or (1000 if self.task == "image" else 400)

    def replace(self, **changes: Any) -> "ModelFacts":
        """A copy with ``changes`` applied (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> Dict[str, Any]:
        """Every field (``None`` where unknown) plus ``sampling``; mean / std as lists, the form
        ``model_facts`` returns and configs hold."""
        out = dataclasses.asdict(self)
        out["mean"], out["std"] = list(self.mean), list(self.std)
        out["sampling"] = self.sampling
        return out


def video_facts(frames: int, stride: Optional[int], crop: int, mean: Sequence[float],
                std: Sequence[float], **fields: Any) -> ModelFacts:
    """Shorthand for a video model's ``ModelFacts`` (positional input, then keyword fields)."""
    return ModelFacts(input_frames=frames, sampling_stride=stride, crop_size=crop,
                      mean=tuple(mean), std=tuple(std), **fields)
