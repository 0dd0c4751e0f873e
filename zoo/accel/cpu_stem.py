"""A narrow RGB stem in float32 under CPU bf16 autocast.

SlowFast's fast pathway opens with a ``5 x 7 x 7`` convolution from 3 to 8 channels on every
frame at full size. Under bf16 autocast oneDNN runs it in its AMX bf16 kernel, whose tiles are
mostly padding for 3 input and 8 output channels, and the batch norm, ReLU and max-pool after it
run on 8-channel channels-last bf16 tensors, a layout PyTorch's CPU kernels handle slowly. The
whole block in float32 on a contiguous clip is faster. Measured on the 2-core Xeon with AMX (one
stem, forward + backward, docs/benchmarks.md section 8):

==============================  ============  =============
stem (out channels, kernel t)   bf16 (ms)     float32 (ms)
==============================  ============  =============
8, 5 (SlowFast's fast stem)     238-274       129-130
16, 5                           248-262       178-183
32, 5 / 64, 5                   about equal   about equal
64, 1 (SlowFast's slow stem)    75-76         128-134
==============================  ============  =============

:class:`CpuStem` therefore runs a :class:`~zoo.models.blocks3d.Stem` with at most 4 input and
16 output channels and a temporal kernel in float32 (conv, batch norm, ReLU and the ``1 x 3 x 3``
max-pool as a 2-D pool over the frames), then returns bf16 in the clip's memory format, as
autocast would. The math is float32's, more exact than bf16's; everything after the stem is
unchanged. Anything else, and any call outside CPU bf16 autocast or under tracing, export or
``torch.compile``, runs the plain stem.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models.blocks3d import Stem
from ..utils.tracing import capturing
from .cpu_conv import cpu_bf16_autocast

__all__ = ["CpuStem", "route_cpu_stems"]

MAX_IN_CHANNELS = 4
MAX_OUT_CHANNELS = 16


def _max_pool(pool: nn.MaxPool3d, x: torch.Tensor) -> torch.Tensor:
    """``pool(x)``; a ``1 x k x k`` pool with temporal stride 1 runs as a 2-D pool of the frames
    (a view of a contiguous clip; PyTorch's 3-D pool is several times slower)."""
    k, s, p, d = (tuple(v) if isinstance(v, (tuple, list)) else (v,) * 3
                  for v in (pool.kernel_size, pool.stride or pool.kernel_size, pool.padding,
                            pool.dilation))
    if k[0] != 1 or s[0] != 1 or p[0] != 0 or pool.return_indices or not x.is_contiguous():
        return pool(x)
    n, c, t, h, w = x.shape
    y = F.max_pool2d(x.view(n, c * t, h, w), k[1:], s[1:], p[1:], d[1:], pool.ceil_mode)
    return y.view(n, c, t, *y.shape[-2:])


class CpuStem(Stem):
    """A :class:`~zoo.models.blocks3d.Stem` that runs in float32 under CPU bf16 autocast where
    that is faster (see the module docstring). Same parameters, buffers and state-dict keys."""

    def _fp32_call(self, x: torch.Tensor) -> bool:
        conv = self.conv
        return (x.device.type == "cpu" and x.dim() == 5 and conv.in_channels <= MAX_IN_CHANNELS
                and conv.out_channels <= MAX_OUT_CHANNELS and conv.kernel_size[0] > 1
                and isinstance(self.pool, nn.MaxPool3d) and cpu_bf16_autocast()
                and not capturing())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._fp32_call(x):
            return super().forward(x)
        layout = (torch.channels_last_3d
                  if x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous()
                  else torch.contiguous_format)
        conv = self.conv
        with torch.autocast("cpu", enabled=False):
            y = x.float().contiguous()
            if self.time_pad:
                y = F.pad(y, (0, 0, 0, 0, self.time_pad, self.time_pad), mode="replicate")
            y = F.conv3d(y, conv.weight.float().contiguous(), conv.bias, conv.stride,
                         conv.padding, conv.dilation, conv.groups)
            y = _max_pool(self.pool, self.relu(self.bn(y)))
        return y.to(torch.bfloat16, memory_format=layout)


def route_cpu_stems(model: nn.Module) -> int:
    """Turn every :class:`~zoo.models.blocks3d.Stem` of ``model`` (exact type) into a
    :class:`CpuStem`, in place; returns how many. Nothing else about the model changes."""
    count = 0
    for m in model.modules():
        if type(m) is Stem:
            m.__class__ = CpuStem
            count += 1
    return count
