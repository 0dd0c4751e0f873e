"""Exponential moving average of model weights (evaluated and saved beside the model)."""

from __future__ import annotations

import copy
from typing import Optional

import torch
import torch.nn as nn


class ModelEMA:
    """``ema = decay * ema + (1 - decay) * weights`` after every optimizer step.

    Buffers (BatchNorm statistics) are copied, not averaged. The EMA copy lives on the model's
    device and never requires gradients.

    Args:
        model: The (unwrapped) model being trained.
        decay: Weight of the old average, e.g. 0.999.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.module = copy.deepcopy(model).eval()
        self.decay = decay
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module, unless: Optional[torch.Tensor] = None) -> None:
        """Move the average towards ``model``'s weights and copy its buffers.

        Args:
            unless: A boolean tensor on the device: where it is True the average and its buffers
                stay as they are (a step skipped on the device, without a host-device sync).
        """
        weight = 1.0 - self.decay
        if unless is not None:
            weight = torch.where(unless, 0.0, weight)
        for ema_p, p in zip(self.module.parameters(), model.parameters()):
            ema_p.lerp_(p.detach(), weight if unless is None else weight.to(ema_p.dtype))
        for ema_b, b in zip(self.module.buffers(), model.buffers()):
            ema_b.copy_(b if unless is None else torch.where(unless, ema_b, b))

    def state_dict(self) -> dict:
        return self.module.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)
