#!/usr/bin/env python
"""Check a multi-node set-up without training; run the same command on every node at once.

    python tools/doctor.py --config-file x.yaml [--local] [KEY VALUE ...]

The same command as ``zoo-doctor``; its code (and the full help) is
zoo/cli/doctor.py.
"""

import sys

try:
    from zoo.cli.doctor import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
