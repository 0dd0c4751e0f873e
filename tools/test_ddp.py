#!/usr/bin/env python
"""Test a checkpoint with multi-view inference; writes test_metrics.json and predictions.csv.

    python tools/test_ddp.py --config-file x.yaml [CONFIG.TEST.CHECKPOINT path.pth]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.engine import test_worker  # noqa: E402
from zoo.engine.cli import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run(test_worker, "Evaluate a zoo checkpoint on the test (or validation) list.",
                 splits=("test",)))
