"""Small constant tensors on a device, made without waiting for the device.

``torch.tensor(values, device="cuda")`` and ``cpu_tensor.to("cuda")`` copy from pageable host
memory, and CUDA starts such a copy only after all the work already queued on the stream: the
host waits for the device. In a training step that is one wait per call, and the GPU then idles
while the host launches the next kernels (the host cannot run ahead of it). Here each value is
written on the device by a fill kernel, which takes the value as an argument and copies nothing.
"""

from __future__ import annotations

from typing import Sequence, Union

import torch

from .tracing import capturing


def device_constant(values: Sequence[Union[int, float]], device: torch.device,
                    dtype: torch.dtype) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype, device=device)``, the same values, without waiting for
    ``device``: on a device other than the CPU (outside tracing), one fill kernel per value.

    Meant for a handful of values (channel statistics, frame indices) made in every step.
    """
    device = torch.device(device)
    # Captured into a graph, torch.tensor becomes a constant of it, made once: nothing waits.
    if device.type == "cpu" or capturing():
        return torch.tensor(values, dtype=dtype, device=device)
    return _filled(values, device, dtype)


def _filled(values: Sequence[Union[int, float]], device: torch.device,
            dtype: torch.dtype) -> torch.Tensor:
    """The values written one by one by ``fill_``, which rounds each to ``dtype`` as
    ``torch.tensor`` does."""
    out = torch.empty(len(values), dtype=dtype, device=device)
    for i, value in enumerate(values):
        out[i].fill_(value)
    return out
