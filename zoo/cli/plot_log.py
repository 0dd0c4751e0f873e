"""``zoo-plot-log`` (``tools/plot_log.py``): plot training loss, validation accuracy and LR of one
or more runs to a PNG.

    zoo-plot-log output/quickstart_slowfast_tiny [other_run ...] [--out curves.png]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .command import command
from .parser import tool_parser

DESCRIPTION = "Plot training loss, validation accuracy and LR of one or more runs to a PNG."


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(DESCRIPTION, __doc__)
    p.add_argument("run_dirs", nargs="+", help="run folders (each holds metrics.jsonl)")
    p.add_argument("--out", default="", help="PNG path (default: RUN_DIR/curves.png of the first)")
    return p


@command
def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from ..infer.plots import plot_runs

    out = args.out or os.path.join(args.run_dirs[0], "curves.png")
    data = plot_runs(args.run_dirs, out)
    for name, c in data.items():
        best = max(c["val_top1"]) if c["val_top1"] else float("nan")
        print(f"{name}: {len(c['train_loss'])} train points, {len(c['val_top1'])} val points, "
              f"best top-1 {best:.2f}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
