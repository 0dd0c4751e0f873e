"""Benchmarks anyone can rerun: train-step throughput, zoo vs PyTorchVideo, DDP scaling, loader
throughput and time to first iteration. ``tools/benchmark.py`` is the command line; see
docs/benchmarks.md for the figures and how they were taken.

Python::

    from zoo.benchmark import compare_pytorchvideo, train_throughput
    rows = train_throughput("slowfast_tiny_resnet18", frames=16, size=56, batch=8,
                            precisions=["fp32", "auto"])
"""

from .common import machine_info, time_interleaved, write_results
from .compare import compare_pytorchvideo
from .loader import loader_throughput
from .scaling import scaling
from .startup import time_to_first_iteration
from .train import train_throughput, zoo_step

__all__ = [
    "compare_pytorchvideo", "loader_throughput", "machine_info", "scaling", "time_interleaved",
    "time_to_first_iteration", "train_throughput", "write_results", "zoo_step",
]
