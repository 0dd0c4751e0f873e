"""What a user error is, and how a failed run says so: one ``error:`` line, traceback in the log.

A *user error* is a problem with the user's input that a message can explain: a config value, an
annotation list, a video file, a checkpoint, the job's topology, a missing file, an unknown
registry name. Every such error class subclasses :class:`UserError` (and keeps a builtin base,
e.g. ``ConfigError(UserError, ValueError)``); missing files, permissions and missing libraries
count too. Its console output is exactly one line, ``error: <message>``, and a non-zero exit
code (:func:`exit_code`); its traceback (useful to developers only) goes to the rank's log file
``BASE_PATH/EXP_NAME/log_rank{N}.txt`` when that file exists. Anything else is a bug: its line says
so and where the full traceback is.

A leaf module: it imports nothing from zoo but the logger, so every layer can raise its errors.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import traceback
from typing import Optional, Tuple

from .logger import write_to_log_file


class UserError(Exception):
    """An error the user can fix from its message alone: the base of zoo's user-facing errors.

    Subclasses keep the builtin base they had, so ``except ValueError`` still catches a
    ``ConfigError``. ``exit_code`` is the process exit status a command ends with on it.
    """

    exit_code: int = 1


class UsageError(UserError, ValueError):
    """A command's arguments do not work together or name nothing (like argparse's own usage
    errors, exit code 2)."""

    exit_code = 2


class NonFiniteLoss(UserError, RuntimeError):
    """Training produced a non-finite loss, parameter or gradient and ``CONFIG.TRAIN.NONFINITE``
    is ``stop``: the message names the iteration, the rank and the first non-finite tensor."""


# Builtin errors that are the user's too: a missing or unreadable file, a library not installed.
USER_BUILTIN_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
                       ImportError)


def is_user_error(e: BaseException) -> bool:
    """True for the errors a user can fix from the message alone (see the module docstring)."""
    return isinstance(e, (UserError, *USER_BUILTIN_ERRORS))


def one_line(e: BaseException) -> str:
    """The exception's message as one line (a KeyError's message without the quotes; for an
    error a DataLoader worker raised, the worker's own message, not the traceback around it)."""
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) > 2 and lines[0].startswith("Caught ") and "Original Traceback" in lines[1]:
        # torch re-raises a worker's exception as "Caught X in DataLoader worker process N.",
        # "Original Traceback (most recent call last):", the traceback, then "X: message".
        return re.sub(r"^[\w.]+: ", "", lines[-1], count=1)
    return "; ".join(lines) if lines else type(e).__name__


# torch's messages for a DataLoader worker process that ended from outside zoo's code.
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.]+)")
_WORKER_GONE = re.compile(r"DataLoader worker \(pids?\(?s?\)? ?([\d, ]+)\) exited unexpectedly")


def environment_failure(e: BaseException) -> Optional[str]:
    """The one line for a failure the machine caused, not zoo's code (a data-loader worker
    killed by the kernel's out-of-memory killer, or by a bus error on a full /dev/shm); None for
    anything else."""
    text = str(e)
    m = _WORKER_KILLED.search(text)
    if m and "bus error" in m.group(2).lower():
        return (f"data-loader worker (pid {m.group(1)}) died of a bus error: shared memory "
                "(/dev/shm) ran out; give the job more (docker run --shm-size=8g, a larger "
                "/dev/shm), or lower CONFIG.DATA.NUM_WORKERS or the batch size")
    m = m or _WORKER_GONE.search(text)
    if m is None:
        return None
    how = (f"was killed by signal {m.group(2)}, from outside zoo" if m.re is _WORKER_KILLED
           else "exited unexpectedly")
    return (f"data-loader worker (pid {m.group(1).strip()}) {how}: most often the kernel's "
            "out-of-memory killer (see dmesg); lower CONFIG.DATA.NUM_WORKERS or the batch size, "
            "or give the job more memory")


# zoo's own code: the package and the repository's tools/ scripts.
_ZOO_DIRS = tuple(os.path.join(os.path.realpath(d), "") for d in (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                 "tools")))
# Libraries: the standard library and installed packages (torch, numpy...).
_LIBRARY_DIRS = tuple(sorted({os.path.join(os.path.realpath(p), "") for p in (
    sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")) if p}))


def user_code_frame(e: BaseException) -> Optional[Tuple[str, int]]:
    """``(file, line)`` where ``e`` was raised when that is the user's code (a model of
    ``CONFIG.EXTRA_MODULES``, a hook file): the innermost frame of its traceback outside the
    standard library and installed packages (a library's error counts where the user's code
    called it); None when that frame is zoo's (a bug of zoo's) or there is none."""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        name = frame.filename
        if name.startswith("<"):  # <frozen ...>, generated code: a library's
            continue
        path = os.path.realpath(name)
        if path.startswith(_ZOO_DIRS):
            return None
        if path.startswith(_LIBRARY_DIRS):
            continue
        return path, frame.lineno or 0
    return None


def first_line(e: BaseException) -> str:
    """The first non-empty line of ``e``'s message (a KeyError's without the quotes)."""
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""


def hook_of(e: BaseException) -> str:
    """``" in hook Class.method"`` when a hook of the user's raised ``e`` (the trainer marks it,
    see :meth:`zoo.train.trainer.Trainer._call`), else ""."""
    hook = getattr(e, "zoo_hook", "")
    return f" in hook {hook}" if hook else ""


def user_code_failure(e: BaseException, log_path: Optional[str]) -> Optional[str]:
    """The one line for an error the user's own code raised (see :func:`user_code_frame`):
    where, its type and first line, and where the full traceback is; None for anything else."""
    where = user_code_frame(e)
    if where is None:
        return None
    message = first_line(e)
    kept = f"full traceback in {log_path}" if log_path else "traceback above"
    return (f"{type(e).__name__}{': ' + message if message else ''} raised in {where[0]}:"
            f"{where[1]} (your code{hook_of(e)}, not zoo's; {kept})")


def exit_code(e: BaseException) -> int:
    """The process exit code for ``e``: its class's ``exit_code`` (2 for a config or usage
    error, like argparse's usage errors), 1 for everything else."""
    return e.exit_code if isinstance(e, UserError) else 1


def report_failure(e: BaseException, output_dir: Optional[str] = None, rank: int = 0,
                   console: bool = True) -> int:
    """Log ``e``'s traceback to the rank's log file and print one ``error:`` line on stderr.

    Args:
        e: The exception that ended the run.
        output_dir: The run's folder. A bug's traceback is written to ``log_rank{rank}.txt`` there
            even when the file does not exist yet; a user error's traceback only goes to a log file
            this process already has (a bad config does not create the run's folder).
        rank: This process's rank (names the log file).
        console: Print the ``error:`` line. False for the other ranks torchrun / Slurm started on
            a node, which would repeat the first one's line; they write it to their log file.

    Returns:
        The process exit code.
    """
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    environment = environment_failure(e)
    user = is_user_error(e) or environment is not None
    make_file = output_dir if (not user or not console) else None
    if getattr(e, "zoo_traceback_logged", False):
        log_path = write_to_log_file(f"{type(e).__name__}: {one_line(e)} (traceback above)",
                                     make_file, rank)
    else:
        log_path = write_to_log_file(text.rstrip(), make_file, rank)
    if user:
        line = f"error: {environment or one_line(e)}"
    else:
        if log_path is None and console:
            sys.stderr.write(text)  # nowhere else to keep it
        where = f"full traceback in {log_path}" if log_path else "traceback above"
        theirs = user_code_failure(e, log_path)
        line = (f"error: {theirs}" if theirs else
                f"error: unexpected {type(e).__name__}: {one_line(e)}{hook_of(e)} (an internal "
                f"error, please report it; {where})")
    write_to_log_file(line, None, rank)
    if console:
        print(line, file=sys.stderr, flush=True)
    return exit_code(e)
