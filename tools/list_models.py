#!/usr/bin/env python
"""Print the registered models with their facts (params, GFLOPs, frames x stride, crop) and tags.

The same command as ``zoo-list-models``; its code (and the full help) is
zoo/cli/list_models.py.
"""

import sys

try:
    from zoo.cli.list_models import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
