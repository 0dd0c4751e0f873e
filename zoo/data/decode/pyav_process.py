"""PyAV state kept per process: one RGB converter per thread, and garbage freed before a fork.

Both guard against FFmpeg's threads, which a forked child (a DataLoader worker) does not have.
"""

from __future__ import annotations

import gc
import os
import threading

from av.video.reformatter import VideoReformatter

_local = threading.local()


def _collect_before_fork() -> None:
    """Free this process's garbage before it forks (a DataLoader worker, a multiprocessing child).

    An unclosed container left in a reference cycle (a reader dropped by an exception, a user's
    ``av.open`` without ``close``) still owns FFmpeg's decoder threads. Collected in a forked
    child, where those threads do not exist, freeing it waits for them forever: the worker hangs.
    Collected here, in the parent, it closes normally; the child inherits no such garbage.
    """
    gc.collect()


os.register_at_fork(before=_collect_before_fork)


def reformatter() -> VideoReformatter:
    """This thread's RGB converter (FFmpeg's scaler context, kept between videos), per process.

    One inherited through ``fork`` (a DataLoader worker of a process that decoded before) is
    neither used nor freed: its scaler threads did not survive the fork, and freeing it waits for
    them forever. It stays referenced in the table, under the parent's process id.
    """
    table = getattr(_local, "by_pid", None)
    if table is None:
        table = _local.by_pid = {}
    pid = os.getpid()
    if pid not in table:
        table[pid] = VideoReformatter()
    return table[pid]
