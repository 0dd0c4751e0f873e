"""Optimizers with parameter groups and per-iteration learning-rate schedules."""

from .lr_scheduler import WarmupScheduler, build_lr_scheduler, lr_scale
from .optimizer import build_optimizer

__all__ = ["WarmupScheduler", "build_lr_scheduler", "build_optimizer", "lr_scale"]
