#!/usr/bin/env python
"""Write the pooled pre-classifier features of every video in the validation list, one .npy each.

    python tools/extract_features.py --config-file i3d_resnet50_v1_feat.yaml [--output DIR]

The same command as ``zoo-extract-features``; its code (and the full help) is
zoo/cli/extract_features.py.
"""

import sys

try:
    from zoo.cli.extract_features import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
