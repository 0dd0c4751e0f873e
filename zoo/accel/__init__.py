"""Opt-in speed-ups for particular devices, applied once by the trainer (nothing else in zoo
imports this package):

* ``cpu_conv``: conv3d layers on CPU through the kernel that computes them fastest (the same
  result; PyTorch's ``slow_conv3d`` avoided, bf16 emulated where the CPU lacks it);
* ``cpu_stem``: a narrow RGB stem in float32 under CPU bf16 autocast;
* ``stem_pad``: on CUDA, the narrow RGB stem convs' input padded to 8 channels (tensor-core
  kernels; ``CONFIG.TRAIN.STEM_PAD_CHANNELS``);
* ``ddp_comm`` / ``powersgd``: gradient compression hooks (``DDP_CONFIG.GRAD_COMPRESSION``),
  for slow links between nodes.

``CONFIG.TRAIN.CPU_KERNELS`` switches the CPU routes; on a GPU they are never applied.
"""

from __future__ import annotations

import torch.nn as nn

from .cpu_conv import CpuConv3d, route_cpu_convs
from .cpu_stem import CpuStem, route_cpu_stems
from .ddp_comm import COMPRESSIONS, register_compression
from .stem_pad import pad_stems

__all__ = ["COMPRESSIONS", "CpuConv3d", "CpuStem", "apply_cpu_kernels", "pad_stems",
           "register_compression", "route_cpu_convs", "route_cpu_stems"]


def apply_cpu_kernels(model: nn.Module, stems: bool = True) -> int:
    """Route ``model``'s conv3d layers (and, with ``stems``, its narrow RGB stems) to zoo's CPU
    kernels, in place, before an optimizer or DDP sees it. Returns the conv3d layers routed."""
    if stems:
        route_cpu_stems(model)
    return route_cpu_convs(model)
