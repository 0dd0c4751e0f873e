#!/usr/bin/env python
"""Convert another framework's config to a zoo config.

    python tools/convert_config.py --from pyslowfast SLOWFAST_8x8_R50.yaml slowfast_8x8.yaml

The same command as ``zoo-convert-config``; its code (and the full help) is
zoo/cli/convert_config.py.
"""

import sys

try:
    from zoo.cli.convert_config import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
