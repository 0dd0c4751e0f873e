"""Temporal Segment Networks (Wang et al., ECCV 2016) on a 2D ResNet-18/34/50/101/152.

The video is cut into ``T`` equal segments and one frame is sampled from each (the data side's
``NUM_SEGMENT``); the 2D network scores every frame and a *segment consensus* (mean, or max) of the
per-frame logits is the video's score. Input is a clip ``(B, C, T, H, W)`` whose T frames are the
segment frames.

:class:`TSN` is a :class:`~zoo.models.resnet.ResNet`, so its state-dict keys equal torchvision's
resnet50: ImageNet weights load with ``pretrained=PATH`` (the head re-initialised) or convert with
``--from torchvision``.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .facts import IMAGENET_MEAN, IMAGENET_STD, ModelFacts
from .registry import register_model
from .resnet import BasicBlock, Bottleneck, ResNet

__all__ = ["TSN"]

_CONSENSUS = ("avg", "max")


class TSN(ResNet):
    """A 2D ResNet applied per segment frame, with a segment consensus over the logits.

    Args:
        consensus: ``"avg"`` (the paper's default) or ``"max"`` over segments.
        *args, **kwargs: :class:`~zoo.models.resnet.ResNet` arguments.
    """

    def __init__(self, *args: Any, consensus: str = "avg", **kwargs: Any) -> None:
        if consensus not in _CONSENSUS:
            raise ValueError(f"consensus must be one of {_CONSENSUS}, got {consensus!r}")
        super().__init__(*args, **kwargs)
        self.consensus = consensus

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of segment frames ``(B, C, T, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"expected segment frames (B, C, T, H, W), got {tuple(x.shape)}")
        b, c, t, h, w = x.shape
        frames = x.transpose(1, 2).reshape(b * t, c, h, w)
        logits = self.fc(self.dropout(self.forward_features(frames))).view(b, t, -1)
        return logits.mean(dim=1) if self.consensus == "avg" else logits.amax(dim=1)


def _variant(name: str, block: type, layers: Sequence[int], params: int, gflops: float) -> None:
    """Register the builder ``name``: a :class:`TSN` of ``block`` with ``layers``."""
    depth = name.rsplit("resnet", 1)[1]
    doc = f"""TSN on a ResNet-{depth} (torchvision keys), 8 segments by default.

    gluoncv's ``resnet{depth}_v1b_*`` nets are this architecture: a torchvision ResNet (stride on
    the 3x3 conv, "v1b") whose pooled features are averaged over the segments before ``fc``, which
    equals averaging the logits (``fc`` is linear, and dropout acts per frame either way).

    Args:
        num_classes: Output classes.
        **kwargs: :class:`TSN` arguments: ``dropout`` before ``fc`` (default 0.5; no state-dict
            keys), ``consensus`` (``"avg"`` or ``"max"`` over the segments' logits), and
            :class:`~zoo.models.resnet.ResNet` arguments (``base_width``, ...).
    """
    # sampling_stride None: one frame from each of input_frames equal segments of the whole video.
    facts = ModelFacts(input_frames=8, sampling_stride=None, crop_size=224, mean=IMAGENET_MEAN,
                       std=IMAGENET_STD, params=params, gflops=gflops)
    register_model(name, TSN, facts, doc, block=block, layers=layers, dropout=0.5)


# Params at 400 classes (equal gluoncv's resnet*_v1b_kinetics400, counted from its code); gflops:
# multiply-adds of the 8 frames at 224x224 (torch.utils.flop_counter; recounted in tests).
_variant("tsn_resnet18", BasicBlock, (2, 2, 2, 2), 11_381_712, 14.5)
_variant("tsn_resnet34", BasicBlock, (3, 4, 6, 3), 21_489_872, 29.3)
_variant("tsn_resnet50", Bottleneck, (3, 4, 6, 3), 24_327_632, 32.7)
_variant("tsn_resnet101", Bottleneck, (3, 4, 23, 3), 43_319_760, 62.4)
_variant("tsn_resnet152", Bottleneck, (3, 8, 36, 3), 58_963_408, 92.1)
