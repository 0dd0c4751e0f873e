#!/usr/bin/env python
"""Benchmarks: train-step speed, zoo vs PyTorchVideo, DDP scaling, loader speed, time to start.

    python tools/benchmark.py compare                  # zoo SlowFast-R50 vs PyTorchVideo's
    python tools/benchmark.py scaling --procs 1 2      # quick-start model, 1 and 2 processes
    python tools/benchmark.py train --model slowfast_tiny_resnet18 --frames 16 --size 56 \\
        --batch 8 --precision fp32 bf16 --memory-format contiguous channels_last
    python tools/benchmark.py data --workers 0 2       # loader clips/s of the quick start
    python tools/benchmark.py startup                  # quick start: command -> first iteration

The same command as ``zoo-benchmark``; its code (and the full help) is
benchmarks/run.py.
"""

import sys

try:
    from zoo.cli.benchmark import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
