"""RGB stem convolutions on tensor-core kernels: their input channels padded from 3 to 8, and a
3-D stem fed a channels-last clip computed as one 2-D conv (zoo/accel/stem_fold.py).

cuDNN runs a bf16/fp16 (or TF32) convolution on tensor cores when its input channels are a
multiple of 8; a 3-channel stem (every video net's first conv, the largest activation of the
step) otherwise falls to a generic kernel (``implicit_convolveNd_sgemm``). :func:`pad_stems`
gives each such conv a forward that appends zero channels to its input and zero input columns
to its weight, both on the fly: the products with the zero channels add exact zeros, so the
output and the gradients of the real weight are those of the 3-channel conv (up to the order of
the sums, 1e-5 in float32: tests/test_step_execution.py), and the parameter,
its state-dict key and shape stay the 3-channel ones (checkpoints move freely between devices).

It is the GPU's counterpart of ``cpu_stem`` (the same narrow stems, at most
``cpu_stem.MAX_IN_CHANNELS`` input channels), applied by the trainer on CUDA only
(``CONFIG.TRAIN.STEM_PAD_CHANNELS``); on the CPU a conv routed by ``cpu_conv`` keeps its
route.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models.blocks3d import Stem
from .cpu_stem import MAX_IN_CHANNELS
from .stem_fold import PAD_TO, foldable_stem, stem_conv2d

__all__ = ["PAD_TO", "PaddedConv2d", "PaddedConv3d", "pad_channels", "pad_stems",
           "stem_convs"]

# A 3-D stem fed a channels-last clip is computed as one 2-D conv (zoo/accel/stem_fold.py:
# temporal taps as channels and, with SPACE_TO_DEPTH, a spatial stride of 2 as space to depth);
# False keeps the padded 3-D conv.
FOLD_TAPS = True
SPACE_TO_DEPTH = True


def pad_channels(t: torch.Tensor, extra: int) -> torch.Tensor:
    """``t`` with ``extra`` zero channels appended along dim 1 (its memory format kept)."""
    return F.pad(t, (0, 0) * (t.dim() - 2) + (0, extra))


class _PadChannels:
    """The forward of a conv whose input channels are padded to :data:`PAD_TO`."""

    def _conv_forward(self, x: torch.Tensor, weight: torch.Tensor,
                      bias: Optional[torch.Tensor]) -> torch.Tensor:
        if (FOLD_TAPS and x.dim() == 5 and weight.dim() == 5 and self.padding_mode == "zeros"
                and x.is_contiguous(memory_format=torch.channels_last_3d)
                and foldable_stem(self.kernel_size, self.stride, self.padding, self.dilation,
                                  self.groups)):
            return stem_conv2d(x, weight, bias, self.stride, self.padding, SPACE_TO_DEPTH)
        extra = PAD_TO - weight.shape[1]
        if extra > 0 and x.dim() == weight.dim() and x.shape[1] == weight.shape[1]:
            x, weight = pad_channels(x, extra), pad_channels(weight, extra)
        return super()._conv_forward(x, weight, bias)


class PaddedConv3d(_PadChannels, nn.Conv3d):
    """An ``nn.Conv3d`` whose narrow input is padded to :data:`PAD_TO` channels in forward."""


class PaddedConv2d(_PadChannels, nn.Conv2d):
    """An ``nn.Conv2d`` whose narrow input is padded to :data:`PAD_TO` channels in forward."""


_PADDED = {nn.Conv3d: PaddedConv3d, nn.Conv2d: PaddedConv2d}


def stem_convs(model: nn.Module) -> List[nn.Module]:
    """The convs that see the clip: each :class:`~zoo.models.blocks3d.Stem`'s conv (SlowFast
    has one per pathway) and the model's first conv (the other families' stems)."""
    convs = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d))]
    stems = [m.conv for m in model.modules() if isinstance(m, Stem)]
    return stems + [c for c in convs[:1] if all(c is not s for s in stems)]


def pad_stems(model: nn.Module) -> int:
    """Give each stem conv of ``model`` (:func:`stem_convs`) that is a plain ``nn.Conv3d`` /
    ``nn.Conv2d`` with at most ``MAX_IN_CHANNELS`` input channels and one group the padded
    forward, in place (the same module, parameters and state-dict keys). Returns how many."""
    count = 0
    for m in stem_convs(model):
        padded = _PADDED.get(type(m))  # exact type: a user's subclass keeps its own forward
        if padded is not None and m.groups == 1 and m.in_channels <= MAX_IN_CHANNELS:
            m.__class__ = padded
            count += 1
    return count
