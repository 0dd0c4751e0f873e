"""Optimizers with parameter groups and per-iteration learning-rate schedules."""

from .lr_scheduler import WarmupScheduler, build_lr_scheduler
from .optimizer import build_optimizer

__all__ = ["WarmupScheduler", "build_lr_scheduler", "build_optimizer"]
