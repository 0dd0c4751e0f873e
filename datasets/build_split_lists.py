#!/usr/bin/env python
"""Turn the official UCF101 or HMDB51 split files into zoo annotation lists.

    python datasets/build_split_lists.py ucf101 --splits ucfTrainTestlist --out lists/ucf101
    python datasets/build_split_lists.py hmdb51 --splits testTrainMulti_7030_splits \\
        --out lists/hmdb51 [--videos /data/hmdb51]

The same command as ``zoo-build-split-lists``; its code (and the full help) is
zoo/cli/build_split_lists.py.
"""

import sys

try:
    from zoo.cli.build_split_lists import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
