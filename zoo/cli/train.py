"""``zoo-train`` (``tools/train_ddp.py``): train a model described by a YAML config; run the same
command on every node.

    zoo-train --config-file configs/quickstart/slowfast_tiny_motion.yaml [KEY VALUE ...]
"""

from __future__ import annotations

import sys
from typing import List, Optional

from ..engine import train_worker
from .job import run

DESCRIPTION = "Train a zoo model (distributed over this node's GPUs or CPU processes)."


def main(argv: Optional[List[str]] = None) -> int:
    return run(train_worker, DESCRIPTION, argv, preemptible=True)


if __name__ == "__main__":
    sys.exit(main())
