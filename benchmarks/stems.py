"""A model's RGB stem convs three ways (``zoo-benchmark stems``): the 3-D conv with its input
padded to 8 channels, and the 2-D fold of zoo/accel/stem_fold.py with and without space to depth.

Each stem of the model (:func:`~zoo.accel.stem_pad.stem_convs`: SlowFast has one per pathway)
runs on a random clip of its pathway's shape (the frames each stem sees are read off one small
forward pass), forward + weight gradient (the clip needs no gradient), in bf16 on CUDA and
float32 on the CPU, channels-last, the three ways timed in turn (``common.time_interleaved``).
The rows give the median milliseconds, the ratio against the padded 3-D conv and the largest
difference of the outputs from it, relative to its largest value.
"""

from __future__ import annotations

import statistics
from typing import Any, Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo.accel.stem_fold import PAD_TO, foldable_stem, stem_conv2d
from zoo.accel.stem_pad import pad_channels, stem_convs
from zoo.models import create_model

from .common import time_interleaved

CL3D = torch.channels_last_3d


def stem_frames(model: nn.Module, frames: int) -> List[int]:
    """The number of frames each 3-D stem conv of ``model`` sees for a clip of ``frames``."""
    stems = [m for m in stem_convs(model) if isinstance(m, nn.Conv3d)]
    seen: Dict[int, int] = {}

    def record(index: int):
        def hook(module, inputs, output) -> None:  # returns None: the output is kept
            seen.setdefault(index, inputs[0].shape[2])
        return hook

    hooks = [m.register_forward_hook(record(i)) for i, m in enumerate(stems)]
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(1, 3, frames, 32, 32))
    finally:
        for h in hooks:
            h.remove()
    return [seen[i] for i in range(len(stems))]


def _padded_conv3d(x, w, stride, padding):
    extra = -x.shape[1] % PAD_TO
    return F.conv3d(pad_channels(x, extra), pad_channels(w, extra), None, stride, padding)


def stem_rows(model_name: str, frames: int, size: int, batch: int, device: torch.device,
              warmup: int = 3, runs: int = 10) -> List[Dict[str, Any]]:
    """One row per (stem, way): ``stem``, ``input``, ``kernel``, ``way``, ``dtype``, ``ms``,
    ``speedup_vs_padded_3d``, ``max_rel_diff``."""
    model = create_model(model_name, num_classes=10)
    stems = [m for m in stem_convs(model) if isinstance(m, nn.Conv3d)]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    rows = []
    for index, (conv, t) in enumerate(zip(stems, stem_frames(model, frames))):
        if not foldable_stem(conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                             conv.groups):
            continue
        g = torch.Generator().manual_seed(index)
        x = torch.randn(batch, conv.in_channels, t, size, size, generator=g)
        x = x.to(device, dtype).contiguous(memory_format=CL3D)
        w = torch.randn(conv.weight.shape, generator=g).to(device, dtype).requires_grad_()
        ways = {
            "padded 3-D": lambda: _padded_conv3d(x, w, conv.stride, conv.padding),
            "taps as channels, 2-D": lambda: stem_conv2d(x, w, None, conv.stride, conv.padding,
                                                         False),
            "+ space to depth": lambda: stem_conv2d(x, w, None, conv.stride, conv.padding, True),
        }
        with torch.no_grad():
            ref = ways["padded 3-D"]().float()
            diffs = {way: float((fn().float() - ref).abs().max() / ref.abs().max())
                     for way, fn in ways.items()}
        grad = torch.randn(ref.shape, generator=g).to(device, dtype)
        times = time_interleaved({way: lambda fn=fn: fn().backward(grad)
                                  for way, fn in ways.items()}, warmup, runs, device)
        ms = {way: statistics.median(ts) * 1000 for way, ts in times.items()}
        for way, diff in diffs.items():
            rows.append({"stem": index, "input": "x".join(map(str, x.shape)),
                         "kernel": "x".join(map(str, conv.kernel_size)),
                         "out_channels": conv.out_channels, "way": way,
                         "dtype": str(dtype).replace("torch.", ""), "ms": round(ms[way], 3),
                         "speedup_vs_padded_3d": round(ms["padded 3-D"] / ms[way], 3),
                         "max_rel_diff": float(f"{diff:.2e}")})
    return rows
