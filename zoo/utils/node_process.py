"""Which process of its node this is, from the environment only (no torch import): torchrun
and Slurm run the whole command in every process of a job, zoo's launcher in one, and its
workers get ``LOCAL_RANK``."""

from __future__ import annotations

import os


def process_rank() -> int:
    """This process's rank when torchrun / Slurm started it as one rank of a job, else 0."""
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))


def talks_on_console() -> bool:
    """Whether this process prints what the node's console needs once (the ``error:`` line, the
    config's notes): the first process of each node. The other ranks torchrun / Slurm started on
    a node would repeat it on the same console."""
    return int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", 0))) == 0
