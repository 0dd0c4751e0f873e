"""How many threads a video reader may use in this process (``CONFIG.DATA.DECODE_THREADS``).

Loader workers decode in parallel already: with W workers on C cores, a reader that starts one
FFmpeg thread per core (FFmpeg's and PyAV's default) runs W x C decoder threads, plus as many
scaler threads, on C cores. Frame threading also holds one frame per thread in flight, which a
seek throws away. So each worker gets its share of the cores, ``max(1, C // W)`` decoder threads
(:func:`threads_per_worker`), set once in the worker (:func:`set_auto_threads`); torch and
OpenCV get one thread there. The main process (no workers) keeps every core.

A reader asked for ``threads`` resolves it with :func:`decoder_threads`: > 0 as given, 0 = this
process's share, -1 = the library's own choice (one thread per core: the oversubscribed setting,
kept to measure it against).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from ...utils.env import available_cpus

LIBRARY_CHOICE = -1  # DECODE_THREADS value: FFmpeg / OpenCV pick (one thread per core)

_auto: Optional[int] = None  # set in a loader worker; None = every core of this process


def threads_per_worker(workers: int, cores: Optional[int] = None) -> int:
    """Automatic decoder threads of each of ``workers`` loader workers on ``cores`` cores (default:
    the cores this process may run on): ``max(1, cores // workers)``, all cores for 0 workers."""
    cores = available_cpus() if cores is None else int(cores)
    return max(1, cores // max(1, int(workers)))


def set_auto_threads(threads: Optional[int]) -> None:
    """What ``threads`` 0 means in this process from now on (None: every core). A set count (a
    loader worker) also puts OpenCV's own parallel loops (resize, colour conversion) on one
    thread: at once if cv2 is loaded, else through ``OPENCV_FOR_THREADS_NUM``, which OpenCV reads
    when it loads (a value already in the environment is kept)."""
    global _auto
    _auto = None if threads is None else max(1, int(threads))
    if _auto is None:
        return
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and hasattr(cv2, "setNumThreads"):
        cv2.setNumThreads(1)
    else:
        os.environ.setdefault("OPENCV_FOR_THREADS_NUM", "1")


def auto_threads() -> int:
    """This process's automatic decoder thread count (see :func:`set_auto_threads`)."""
    return _auto if _auto is not None else available_cpus()


def decoder_threads(threads: int) -> int:
    """The thread count a reader asked for ``threads`` uses: ``threads`` when > 0, this process's
    share when 0 (:func:`auto_threads`), 0 (= the library picks) for :data:`LIBRARY_CHOICE`."""
    if threads > 0:
        return int(threads)
    if threads == LIBRARY_CHOICE:
        return 0
    return auto_threads()
