"""Benchmarks anyone can rerun: train-step throughput, zoo vs PyTorchVideo, DDP scaling, loader
throughput, per-decoder speed and memory, time to first iteration, and a train step's percent of
the device's matmul peak. ``zoo-benchmark`` and ``zoo-benchmark-data`` (run.py and run_data.py
here, started by zoo/cli/; also ``tools/benchmark.py`` and ``tools/benchmark_data.py``) are the
command lines; see docs/benchmarks.md for the figures and how they were taken. This folder is not
installed with zoo: it runs from the source checkout (run Python from the repository root, or
through the commands, which put the root on ``sys.path``).

Python::

    from benchmarks import compare_pytorchvideo, train_throughput
    rows = train_throughput("slowfast_tiny_resnet18", frames=16, size=56, batch=8,
                            precisions=["fp32", "auto"])

The names below are imported on first use (PEP 562): a measuring process that imports
``benchmarks.data`` (no torch at its top) does not pay for the other benchmarks' imports.
"""

import os
from typing import Dict, Mapping

from zoo.utils.lazy import lazy_attributes

# The repository root: the folder holding benchmarks/ and zoo/.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` with the repository root first on PYTHONPATH: a measuring process started with
    ``python -c "from benchmarks.X import ..."`` imports this copy of the benchmarks and of zoo,
    whatever folder it starts in."""
    return dict(env, PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p))


# Public name -> the submodule that defines it.
_LAZY = {
    "compare_pytorchvideo": "compare", "decoder_throughput": "data", "forward_flops": "peak",
    "long_clip": "data", "matmul_peak": "peak",
    "loader_throughput": "loader", "machine_info": "common", "scaling_throughput": "scaling",
    "time_interleaved": "common", "time_to_first_iteration": "startup",
    "train_throughput": "train", "write_results": "common", "zoo_step": "train",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


__all__ = [
    "compare_pytorchvideo", "decoder_throughput", "forward_flops", "loader_throughput",
    "long_clip", "matmul_peak",
    "machine_info", "scaling_throughput", "time_interleaved", "time_to_first_iteration",
    "train_throughput", "write_results", "zoo_step",
]
