"""Launching, training, evaluation, checkpoints and metric logging."""

from .hooks import HookBase
from .launch import LaunchError, launch
from .tester import test_worker
from .trainer import Trainer, train_worker

__all__ = ["HookBase", "LaunchError", "Trainer", "launch", "test_worker", "train_worker"]
