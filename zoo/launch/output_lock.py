"""One training job per output folder: an exclusive lock on ``BASE_PATH/EXP_NAME`` while it runs.

Two training jobs writing into one folder would interleave ``metrics.jsonl``, share the rank log
files and overwrite (or set aside, or delete) each other's checkpoints, with nothing on the console
to say so. So the process that is global rank 0 takes an exclusive advisory lock
(``fcntl.flock``) on ``<folder>/training.lock`` before it writes anything there, under zoo's
launcher, torchrun, Slurm or an engine alike, and holds it until its training ends. The file
records the holder's pid and host, for the message a second job stops with.

The kernel frees the lock of a process that died (even by SIGKILL), so a restarted rank 0 takes it
again. A forked child (a DataLoader worker) closes its copy of the descriptor at once, so the lock
never outlives rank 0 in a child. Where the file system has no locks (some network file systems
answer ENOLCK), one warning says so and the job goes on unguarded. Testing and predicting read the
folder's checkpoints and do not take the lock.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
from contextlib import contextmanager
from typing import Iterator, Optional, Set

from ..utils import comm
from ..utils.errors import UserError

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

logger = logging.getLogger(__name__)

LOCK_NAME = "training.lock"

# The descriptors that hold this process's locks.
_held_fds: Set[int] = set()


class OutputFolderBusy(UserError, RuntimeError):
    """Another training job holds the output folder; the message names it and the way out."""


def _close_in_child() -> None:
    """After a fork: the child's copies of the descriptors would keep the locks alive after rank
    0 died (flock belongs to the open file, shared by every copy), so the child closes them."""
    for fd in list(_held_fds):
        try:
            os.close(fd)
        except OSError:
            pass
    _held_fds.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


def _holder(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        text = ""
    return text or "holder unknown"


def acquire(folder: str, what: str = "output folder",
            key: str = "CONFIG.LOG.BASE_PATH/EXP_NAME",
            fix: str = "its own folder with CONFIG.LOG.EXP_NAME") -> Optional[int]:
    """Lock ``folder`` (created if needed) for this process; returns the descriptor that holds
    the lock, or None where the file system has no locks (after one warning).

    Args:
        folder: The folder to hold.
        what, key, fix: How the message names the folder, the setting it comes from, and what
            the run is given instead (defaults: the run's output folder).

    Raises:
        OutputFolderBusy: another process holds it (one line: the folder, the holder, what to do).
    """
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is None:
            raise OSError(errno.ENOSYS, "no fcntl.flock on this platform")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            raise OutputFolderBusy(
                f"the {what} {folder} ({key}) is in use by another training job "
                f"({_holder(path)}): wait for it to end or stop it, or give this run {fix}"
            ) from None
        logger.warning("could not lock the %s %s (%s), so a second training job started on it "
                       "would not be stopped; give every job %s", what, folder,
                       e.strerror or e, fix)
        return None
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    try:  # who holds it, for a second job's message; a full disk keeps the lock without it
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on host {socket.gethostname()}, since {stamp}\n".encode())
    except OSError:
        pass
    _held_fds.add(fd)
    return fd


def release(fd: Optional[int]) -> None:
    """Give up the lock ``acquire`` returned (the file stays: removing it would let a job that
    opened it a moment earlier lock a file no other job sees)."""
    if fd is None:
        return
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
    _held_fds.discard(fd)
    os.close(fd)  # closing the last descriptor of the open file ends the flock


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


@contextmanager
def training_folder(folder: str, checkpoints: Optional[str] = None,
                    checkpoints_from: str = "") -> Iterator[None]:
    """Hold ``folder`` for this training job for the block; every rank calls it.

    Global rank 0 takes the lock; the ranks then learn together whether it got it (one
    collective), so every rank stops with the same line when another job holds the folder.

    Args:
        folder: The run's output folder (BASE_PATH/EXP_NAME).
        checkpoints: The checkpoint folder, held too where it is outside ``folder`` (two runs of
            their own EXP_NAME given one CONFIG.LOG.CHECKPOINT_DIR would overwrite each other's
            checkpoints and resume from them).
        checkpoints_from: The setting the checkpoint folder comes from, for the message.

    Raises:
        OutputFolderBusy: on every rank, when another training job holds either folder.
    """
    fds, refused = [], ""
    if comm.is_main_process():
        try:
            fds.append(acquire(folder))
            if checkpoints and not _inside(checkpoints, folder):
                fds.append(acquire(checkpoints, "checkpoint folder",
                                   checkpoints_from or "CONFIG.LOG.CHECKPOINT_DIR",
                                   "its own CONFIG.LOG.CHECKPOINT_DIR"))
        except OutputFolderBusy as e:
            refused = str(e)
            for fd in fds:
                release(fd)
            fds = []
    refused = comm.all_gather_object(refused)[0]
    if refused:
        raise OutputFolderBusy(refused)
    try:
        yield
    finally:
        for fd in fds:
            release(fd)
