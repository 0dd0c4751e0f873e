#!/usr/bin/env python
"""Re-encode videos for fast loading: short side 256, a keyframe every 16 frames, H.264 .mp4.

    python datasets/reencode.py --src /data/kinetics400/raw --dst /data/kinetics400/256
    python datasets/reencode.py --src /data/raw --dst /data/256 --list lists/train.txt --workers 8

The same command as ``zoo-reencode``; its code (and the full help) is
zoo/cli/reencode.py.
"""

import sys

try:
    from zoo.cli.reencode import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
