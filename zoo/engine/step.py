"""One training iteration: autocast forward, loss, backward with accumulation, clip, step, EMA."""

from __future__ import annotations

import contextlib
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .checkpoint import unwrap
from .ema import ModelEMA
from .mixup import MixupCutmix
from .precision import autocast, grad_scaler, memory_format, resolve_precision


class TrainStep:
    """Everything that happens to one batch. Holds no data loader and no schedule.

    Args:
        model: The model to train (plain or DDP-wrapped).
        optimizer: Its optimizer.
        scheduler: Per-step LR schedule with ``step()`` (stepped once per optimizer step).
        device: Where the batch goes.
        num_classes: Classifier size (for Mixup/CutMix targets).
        precision: "fp32", "bf16", "fp16" or "auto" (bf16 where ``device`` computes it natively).
        channels_last: Feed channels-last clips (the model is converted once, here).
        accum_steps: Optimizer step every this many calls.
        clip_grad_norm: Max global grad norm (0 = off).
        label_smoothing: Cross-entropy label smoothing.
        mixup_alpha, cutmix_alpha: Mixup/CutMix strengths (0 = off).
        ema_decay: EMA of the weights (0 = off).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 device: torch.device, num_classes: int, precision: str = "fp32",
                 channels_last: bool = False, accum_steps: int = 1, clip_grad_norm: float = 0.0,
                 label_smoothing: float = 0.0, mixup_alpha: float = 0.0,
                 cutmix_alpha: float = 0.0, ema_decay: float = 0.0) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.device = device
        self.precision = precision = resolve_precision(precision, device)
        self.channels_last = channels_last
        self.accum_steps = accum_steps
        self.clip_grad_norm = clip_grad_norm
        self.label_smoothing = label_smoothing
        self.scaler = grad_scaler(precision, device)
        self.mix = MixupCutmix(num_classes, mixup_alpha, cutmix_alpha, label_smoothing)
        self.ema: Optional[ModelEMA] = ModelEMA(unwrap(model), ema_decay) if ema_decay > 0 else None
        self.micro = 0  # calls since the last optimizer step

    def _prepare(self, clips: torch.Tensor) -> torch.Tensor:
        clips = clips.to(self.device, non_blocking=True)
        if self.channels_last and clips.dim() in (4, 5):
            clips = clips.contiguous(memory_format=memory_format(clips.dim()))
        return clips

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, soft: Optional[torch.Tensor]):
        logits = logits.float()
        if soft is not None:
            return torch.sum(-soft * F.log_softmax(logits, dim=1), dim=1).mean()
        return F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)

    def __call__(self, clips: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Forward and backward one batch; steps the optimizer every ``accum_steps`` calls.

        Returns the (detached) loss of this batch; no host-device sync happens here.
        """
        clips = self._prepare(clips)
        labels = labels.to(self.device, non_blocking=True)
        soft = None
        if self.mix.enabled:
            clips, soft = self.mix(clips, labels)
        self.micro += 1
        last_micro = self.micro == self.accum_steps
        # Between optimizer steps DDP need not all-reduce: gradients only accumulate locally.
        no_sync = getattr(self.model, "no_sync", None)
        ctx = no_sync() if (no_sync is not None and not last_micro) else contextlib.nullcontext()
        with ctx:
            with autocast(self.precision, self.device):
                logits = self.model(clips)
            loss = self.loss(logits, labels, soft)
            scaled = loss / self.accum_steps
            if self.scaler is not None:
                self.scaler.scale(scaled).backward()
            else:
                scaled.backward()
        if last_micro:
            self._optimizer_step()
        return loss.detach()

    def _optimizer_step(self) -> None:
        if self.clip_grad_norm > 0:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update(unwrap(self.model))
        self.micro = 0
