"""An RGB stem's 3-D convolution computed as one wide 2-D convolution (CUDA).

A video net's first conv sees 3 channels, and the SlowFast fast pathway's has 8 output channels:
cuDNN's 3-D kernels run such a conv far below the card's speed (on an H200, SlowFast-R50 8x8's
5x7x7 fast stem took 20 ms of forward + weight gradient at batch 16, a third of the compiled
step; docs/benchmarks.md "GPU"). :func:`stem_conv2d` rearranges the input so that the same sums
become a 2-D conv with many input channels:

* **temporal taps into channels**: a ``kt x kh x kw`` kernel with temporal stride 1 reads ``kt``
  neighbouring frames; stacking them as channels (``C -> C*kt``, frames folded into the batch)
  leaves a ``kh x kw`` 2-D conv;
* **space to depth** (``s2d``, spatial stride 2): each 2x2 block of pixels becomes 4 channels
  (``C*kt -> 4*C*kt``) and the kernel ``ceil(kh/2) x ceil(kw/2)`` with stride 1 (the taps of
  the padded kernel that fall outside the original one are zeros);
* the channels padded with zeros to a multiple of 8 (tensor-core kernels).

Only zeros are added and every product of the original conv is computed once, so the output
and the weight gradient are those of the 3-D conv up to the order of the sums (tests compare
them in float64: tests/test_step_execution.py). The weight stays the 5-D parameter: its
rearrangement is part of the forward, and autograd takes its gradient back to the original
shape.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

__all__ = ["PAD_TO", "foldable_stem", "stem_conv2d"]

PAD_TO = 8  # channels a tensor-core convolution wants (bf16/fp16: 8 elements = 16 bytes)


def foldable_stem(kernel: Sequence[int], stride: Sequence[int], padding, dilation: Sequence[int],
                  groups: int) -> bool:
    """Whether a 3-D conv with these settings can be computed by :func:`stem_conv2d`."""
    return (not isinstance(padding, str) and groups == 1 and tuple(dilation) == (1, 1, 1)
            and stride[0] == 1)


def _space_to_depth_pads(size: int, kernel: int, pad: int) -> tuple:
    """(left, right) padding of one spatial axis for a stride-2 conv computed by space to depth:
    the padded length is twice the number of 2x2 blocks the stride-1 conv reads (right padding
    may be negative: rows the strided conv never reads are cropped)."""
    out = (size + 2 * pad - kernel) // 2 + 1
    blocks = out + (kernel + 1) // 2 - 1
    return pad, 2 * blocks - size - pad


def stem_conv2d(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                stride: Sequence[int], padding: Sequence[int], s2d: bool = True) -> torch.Tensor:
    """``F.conv3d(x, weight, bias, stride, padding)`` (temporal stride 1, no dilation, one group)
    as a 2-D conv: temporal taps stacked as channels, with ``s2d`` a spatial stride of 2 turned
    into space to depth, channels padded to :data:`PAD_TO`. The result is channels-last."""
    n, c, t, h, w = x.shape
    cout, _, kt, kh, kw = weight.shape
    pt, ph, pw = padding
    sh, sw = stride[1], stride[2]
    frames = x.permute(0, 2, 3, 4, 1)  # N, T, H, W, C (a view of a channels-last clip)
    taps = weight.permute(0, 3, 4, 1, 2)  # Cout, kh, kw, C, kt
    if kt > 1 or pt > 0:
        frames = F.pad(frames, (0, 0, 0, 0, 0, 0, pt, pt)).unfold(1, kt, 1)  # N, T', H, W, C, kt
    t_out = frames.shape[1]
    frames = frames.reshape(n * t_out, h, w, c * kt)
    taps = taps.reshape(cout, kh, kw, c * kt)
    conv_stride, conv_pad = (sh, sw), (ph, pw)
    if s2d and sh == 2 and sw == 2:
        (top, bottom), (left, right) = (_space_to_depth_pads(h, kh, ph),
                                        _space_to_depth_pads(w, kw, pw))
        frames = F.pad(frames, (0, 0, left, right, top, bottom))
        m, hp, wp, ck = frames.shape
        frames = (frames.reshape(m, hp // 2, 2, wp // 2, 2, ck).permute(0, 1, 3, 2, 4, 5)
                  .reshape(m, hp // 2, wp // 2, 4 * ck))
        kh2, kw2 = (kh + 1) // 2, (kw + 1) // 2
        taps = F.pad(taps, (0, 0, 0, 2 * kw2 - kw, 0, 2 * kh2 - kh))
        taps = (taps.reshape(cout, kh2, 2, kw2, 2, ck).permute(0, 1, 3, 2, 4, 5)
                .reshape(cout, kh2, kw2, 4 * ck))
        conv_stride, conv_pad = (1, 1), (0, 0)
    extra = -frames.shape[-1] % PAD_TO
    if extra:
        frames, taps = F.pad(frames, (0, extra)), F.pad(taps, (0, extra))
    y = F.conv2d(frames.permute(0, 3, 1, 2), taps.permute(0, 3, 1, 2), bias, conv_stride,
                 conv_pad)
    return y.reshape(n, t_out, *y.shape[1:]).transpose(1, 2)
