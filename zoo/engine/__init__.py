"""Launching, training, evaluation, checkpoints and metric logging."""

from .launch import LaunchError, launch
from .tester import test_worker
from .trainer import train_worker

__all__ = ["LaunchError", "launch", "test_worker", "train_worker"]
