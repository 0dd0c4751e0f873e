#!/usr/bin/env python
"""Train a model described by a YAML config; run the same command on every node.

    python tools/train_ddp.py --config-file configs/quickstart/slowfast_tiny_motion.yaml
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.engine import train_worker  # noqa: E402
from zoo.engine.cli import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run(train_worker,
                 "Train a zoo model (distributed over this node's GPUs or CPU processes)."))
