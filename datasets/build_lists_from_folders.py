#!/usr/bin/env python
"""Turn a folder of class sub-folders into zoo annotation lists.

The same command as ``zoo-build-lists-from-folders``; its code (and the full help) is
zoo/cli/build_lists_from_folders.py.
"""

import sys

try:
    from zoo.cli.build_lists_from_folders import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
