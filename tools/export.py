#!/usr/bin/env python
"""Export a registered model to TorchScript and/or ONNX and check each export against eager.

    python tools/export.py --model slowfast_4x16_resnet50 --pretrained sf.pth --out exported/
    python tools/export.py --model slowfast_4x16_resnet50 --format onnx \\
        --kwargs width 8 depth 18 --input-shape 1 3 16 32 32 --out /tmp/sf_small

The same command as ``zoo-export``; its code (and the full help) is
zoo/cli/export.py.
"""

import sys

try:
    from zoo.cli.export import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
