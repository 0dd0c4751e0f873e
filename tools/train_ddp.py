#!/usr/bin/env python
"""Train a model described by a YAML config; run the same command on every node.

    python tools/train_ddp.py --config-file configs/quickstart/slowfast_tiny_motion.yaml


The same command as ``zoo-train``; its code (and the full help) is
zoo/cli/train.py.
"""

import sys

try:
    from zoo.cli.train import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
