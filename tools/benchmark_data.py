#!/usr/bin/env python
"""Decoding speed and memory of each decoder, against a naive baseline measured in the same run.

    python tools/benchmark_data.py --list train.txt --root /data/videos
    python tools/benchmark_data.py --generate 8 --long-720p     # videos made here, no data needed

The same command as ``zoo-benchmark-data``; its code (and the full help) is
benchmarks/run_data.py.
"""

import sys

try:
    from zoo.cli.benchmark_data import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
