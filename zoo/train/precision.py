"""How the training math is executed: precision and memory layout.

* ``CONFIG.TRAIN.PRECISION``: the autocast context and the gradient scaler; ``"auto"`` is bf16
  where the device computes bf16 natively (CUDA GPUs of compute capability 8.0+, CPUs with
  AVX512-BF16 or AMX), else fp32.
* ``CONFIG.TRAIN.MEMORY_FORMAT``: ``"auto"`` is channels-last on CPUs (oneDNN's convolutions
  are fastest in that layout) and on CUDA GPUs in every precision (cuDNN's fp32/TF32
  convolutions too: SlowFast-R50 trained 1.42x faster in fp32 on an H100), and elsewhere with
  bf16/fp16; else contiguous.

zoo's CPU kernel routes (zoo/accel/) are applied on top of these by the trainer.
"""

from __future__ import annotations

import contextlib
from typing import Optional, Tuple

import torch

from ..utils.env import cpu_has_bf16

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def native_bf16(device: torch.device) -> bool:
    """True when ``device`` computes bf16 in hardware (so bf16 autocast is faster than fp32)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        # Without bf16 instructions oneDNN emulates bf16, which is slower than fp32.
        return cpu_has_bf16()
    return False


def resolve_precision(precision: str, device: torch.device) -> str:
    """``"auto"`` -> ``"bf16"`` where :func:`native_bf16`, else ``"fp32"``; others unchanged."""
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(device) else "fp32"


def resolve_channels_last(memory_fmt: str, precision: str, device: torch.device,
                          channels_last: bool = False) -> bool:
    """Whether to run channels-last.

    Args:
        memory_fmt: ``CONFIG.TRAIN.MEMORY_FORMAT``: "auto", "channels_last" or "contiguous".
        precision: The resolved precision ("fp32", "bf16" or "fp16").
        device: The training device.
        channels_last: ``CONFIG.TRAIN.CHANNELS_LAST`` (older switch; True forces channels-last).
    """
    if channels_last or memory_fmt == "channels_last":
        return True
    if memory_fmt == "contiguous":
        return False
    return device.type in ("cpu", "cuda") or precision in _DTYPES


def execution_settings(train_cfg, device: torch.device) -> Tuple[str, bool]:
    """``(precision, channels_last)`` that ``CONFIG.TRAIN`` asks for on ``device``."""
    precision = resolve_precision(train_cfg.PRECISION, device)
    return precision, resolve_channels_last(train_cfg.MEMORY_FORMAT, precision, device,
                                            train_cfg.CHANNELS_LAST)


def autocast(precision: str, device: torch.device):
    """A context that runs the forward pass in ``precision`` ("fp32" = no autocast)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(
            "CONFIG.TRAIN.PRECISION fp16 needs a CUDA GPU; on CPU use bf16 (or fp32)"
        )
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


def grad_scaler(precision: str, device: torch.device) -> Optional[torch.amp.GradScaler]:
    """A GradScaler for fp16 (its small range needs loss scaling); None otherwise."""
    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None


def memory_format(model_or_clip_dim: int) -> torch.memory_format:
    """channels_last for 4-D image tensors, channels_last_3d for 5-D clips."""
    return torch.channels_last_3d if model_or_clip_dim == 5 else torch.channels_last
