#!/usr/bin/env python
"""Plot training loss, validation accuracy and LR of one or more runs to a PNG.

    python tools/plot_log.py output/quickstart_slowfast_tiny [other_run ...] [--out curves.png]


The same command as ``zoo-plot-log``; its code (and the full help) is
zoo/cli/plot_log.py.
"""

import sys

try:
    from zoo.cli.plot_log import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
