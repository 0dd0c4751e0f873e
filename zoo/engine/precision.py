"""Mixed precision: the autocast context and the gradient scaler for CONFIG.TRAIN.PRECISION."""

from __future__ import annotations

import contextlib
from typing import Optional

import torch

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
