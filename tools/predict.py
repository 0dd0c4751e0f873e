#!/usr/bin/env python
"""Print the top-5 classes of video files with a trained checkpoint.

    python tools/predict.py --config-file x.yaml --checkpoint ckpt.pth a.mp4 b.mp4 [--json] \\
        [KEY VALUE ...]

The same command as ``zoo-predict``; its code (and the full help) is
zoo/cli/predict.py.
"""

import sys

try:
    from zoo.cli.predict import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
