#!/usr/bin/env python
"""Turn Kinetics CSVs (label,youtube_id,time_start,time_end,split) into zoo annotation lists.

    python datasets/build_kinetics_lists.py --videos /data/kinetics400 \\
        --csv kinetics400/train.csv kinetics400/validate.csv --out lists/kinetics400

The same command as ``zoo-build-kinetics-lists``; its code (and the full help) is
zoo/cli/build_kinetics_lists.py.
"""

import sys

try:
    from zoo.cli.build_kinetics_lists import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
