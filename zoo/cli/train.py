"""``zoo-train`` (``tools/train_ddp.py``): train a model described by a YAML config; run the same
command on every node.

    zoo-train --config-file configs/quickstart/slowfast_tiny_motion.yaml [KEY VALUE ...]
"""

from __future__ import annotations

import sys
from typing import List, Optional

from .command import command
from .job import run

DESCRIPTION = "Train a zoo model (distributed over this node's GPUs or CPU processes)."


@command
def main(argv: Optional[List[str]] = None) -> int:
    from ..train.trainer import train_worker  # here: importing the command stays cheap

    return run(train_worker, DESCRIPTION, argv, preemptible=True)


if __name__ == "__main__":
    sys.exit(main())
