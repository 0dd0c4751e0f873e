"""Logging set-up: a log file per rank, console output from rank 0 only."""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

_FMT = "[%(asctime)s %(name)s %(levelname)s] %(message)s"
_DATEFMT = "%m/%d %H:%M:%S"


def setup_logger(output_dir: Optional[str] = None, rank: int = 0,
                 name: str = "zoo") -> logging.Logger:
    """Configure the ``zoo`` logger for this process.

    Rank 0 logs INFO to stdout; every rank writes ``log_rank{rank}.txt`` in ``output_dir``. Other
    ranks print only errors to the console, so a crash on any rank is still visible.
    """
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    formatter = logging.Formatter(_FMT, datefmt=_DATEFMT)
    console = logging.StreamHandler(sys.stdout)
    console.setLevel(logging.INFO if rank == 0 else logging.ERROR)
    console.setFormatter(
        logging.Formatter(f"[%(asctime)s rank{rank}] %(message)s", datefmt="%H:%M:%S")
    )
    logger.addHandler(console)
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
        fh = logging.FileHandler(os.path.join(output_dir, f"log_rank{rank}.txt"), encoding="utf-8")
        fh.setLevel(logging.INFO)
        fh.setFormatter(formatter)
        logger.addHandler(fh)
    logging.captureWarnings(True)
    warn_logger = logging.getLogger("py.warnings")
    warn_logger.handlers = logger.handlers
    warn_logger.propagate = False
    return logger
