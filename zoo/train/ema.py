"""Exponential moving average of model weights (evaluated and saved beside the model)."""

from __future__ import annotations

import copy

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
    def update(self, model: nn.Module) -> None:
        for ema_p, p in zip(self.module.parameters(), model.parameters()):
            ema_p.lerp_(p.detach(), 1.0 - self.decay)
        for ema_b, b in zip(self.module.buffers(), model.buffers()):
            ema_b.copy_(b)

    def state_dict(self) -> dict:
        return self.module.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)
