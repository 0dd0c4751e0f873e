"""Logging set-up: a log file per rank, console output from rank 0 only."""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional, TextIO

_FMT = "[%(asctime)s %(name)s %(levelname)s] %(message)s"
_DATEFMT = "%m/%d %H:%M:%S"

# ``logger.info(text, extra=FILE_ONLY)`` writes ``text`` to the log file but not to the console:
# tracebacks go there, so that the console of a failed run ends with one ``error:`` line.
FILE_ONLY = {"file_only": True}


class _NotFileOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "file_only", False)


_LOGGED_ONCE: set = set()


def log_once(logger: logging.Logger, level: int, message: str, *args: object) -> None:
    """Log a message only the first time this process sees it (the config and the data lists
    are prepared several times before training starts: by the launcher, the data check and each
    worker)."""
    key = (logger.name, level, message % args if args else message)
    if key not in _LOGGED_ONCE:
        _LOGGED_ONCE.add(key)
        logger.log(level, message, *args)


def log_file_of(logger: logging.Logger) -> Optional[str]:
    """The path of the log file ``logger`` writes to (None when it has none)."""
    for h in logger.handlers:
        if isinstance(h, logging.FileHandler):
            return h.baseFilename
    return None


def write_to_log_file(text: str, output_dir: Optional[str] = None, rank: int = 0,
                      name: str = "zoo") -> Optional[str]:
    """Write ``text`` (a traceback) to this process's log file only, never the console.

    When the logger has no file yet and ``output_dir`` is given, ``output_dir/log_rank{rank}.txt``
    is opened (appended to) first. Returns the file's path, or None when there is no file.
    """
    logger = logging.getLogger(name)
    if log_file_of(logger) is None and output_dir:
        try:
            os.makedirs(output_dir, exist_ok=True)
            fh = logging.FileHandler(os.path.join(output_dir, f"log_rank{rank}.txt"),
                                     encoding="utf-8")
        except OSError:
            return None
        fh.setFormatter(logging.Formatter(_FMT, datefmt=_DATEFMT))
        logger.addHandler(fh)
    path = log_file_of(logger)
    if path is not None:
        logger.error(text, extra=FILE_ONLY)
    return path


def set_console_label(label: str, name: str = "zoo") -> None:
    """Prefix this process's console lines with ``label`` instead of ``rank{N}`` (the launcher
    of node N > 0, which is no rank, says ``node{N}``)."""
    for handler in logging.getLogger(name).handlers:
        if type(handler) is logging.StreamHandler:
            handler.setFormatter(_console_formatter(label))


def _console_formatter(label: str) -> logging.Formatter:
    return logging.Formatter(f"[%(asctime)s {label}] %(message)s", datefmt="%H:%M:%S")


def setup_logger(output_dir: Optional[str] = None, rank: int = 0, name: str = "zoo",
                 stream: Optional[TextIO] = None) -> logging.Logger:
    """Configure the ``zoo`` logger for this process.

    Rank 0 logs INFO to stdout; every rank writes ``log_rank{rank}.txt`` in ``output_dir``. Other
    ranks print only errors to the console, so a crash on any rank is still visible. The console
    is ``stream`` (default stdout; tools whose stdout is data, like ``predict.py --json``, pass
    stderr).
    """
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    formatter = logging.Formatter(_FMT, datefmt=_DATEFMT)
    console = logging.StreamHandler(stream or sys.stdout)
    console.setLevel(logging.INFO if rank == 0 else logging.ERROR)
    console.setFormatter(_console_formatter(f"rank{rank}"))
    console.addFilter(_NotFileOnly())
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
