#!/usr/bin/env python
"""Test a checkpoint with multi-view inference; writes test_metrics.json and predictions.csv.

    python tools/test_ddp.py --config-file x.yaml [CONFIG.TEST.CHECKPOINT path.pth]


The same command as ``zoo-test``; its code (and the full help) is
zoo/cli/test.py.
"""

import sys

try:
    from zoo.cli.test import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
