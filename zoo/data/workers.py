"""The loader's worker processes: how they start (``CONFIG.DATA.WORKER_START_METHOD``), what a
start method other than fork needs importable, their seeds and signal grace, and their threads
(``CONFIG.DATA.DECODE_THREADS``). :func:`~zoo.data.build.build_loader` applies them."""

from __future__ import annotations

import math
import multiprocessing
import os
import random
import signal
import sys
from typing import Any, Dict, Optional

import numpy as np
import torch

from ..config import ConfigError
from ..utils.env import available_cpus, keep_freed_memory
from .decode.threads import LIBRARY_CHOICE, set_auto_threads, threads_per_worker


def seed_worker(worker_id: int, base_seed: int, signal_grace: float = 0.0,
                decoder_threads: Optional[int] = None) -> None:
    """Give each data worker its own reproducible seed: SEED + rank * 1000 + worker id; with
    ``signal_grace`` > 0, let it outlive SIGTERM / SIGUSR1 by that many seconds. Its readers decode
    on ``decoder_threads`` threads where ``DATA.DECODE_THREADS`` is 0 (see
    :func:`worker_threads`); torch and OpenCV run on one thread."""
    seed = base_seed + worker_id
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    # Workers already run in parallel; intra-op threads on top would oversubscribe the cores.
    torch.set_num_threads(1)
    set_auto_threads(decoder_threads)  # also OpenCV's loops: one thread
    # Clip buffers are allocated and freed for every item: reuse their pages, not fresh ones.
    keep_freed_memory()
    if signal_grace > 0:
        # A scheduler signals every process of the job (SIGTERM, or Slurm's --signal SIGUSR1),
        # these workers too, while the process reading them may need them for a few more batches
        # (a worker dying at once would be a "worker died" failure there). So the signal only
        # sets a deadline (SIGALRM ends the worker) a little after the reader's own, in case
        # nothing stops this worker first (the reader stops its workers itself, and a worker
        # whose parent died stops by itself).
        def outlive(signum, frame):
            signal.alarm(int(math.ceil(signal_grace)) + 5)

        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, outlive)


def worker_context(method: str) -> Optional[multiprocessing.context.BaseContext]:
    """The multiprocessing context loader workers start in (``CONFIG.DATA.WORKER_START_METHOD``):
    "auto" = fork on Linux, as every Python before 3.14 did there (3.14's default, forkserver,
    would import torch again in every worker and needs every object the dataset holds importable
    by module name), else None (the platform's default)."""
    if method == "auto":
        method = "fork" if sys.platform.startswith("linux") else ""
    return multiprocessing.get_context(method) if method else None


def check_worker_imports(dataset: Any, method: str, num_workers: int) -> None:
    """Stop, while no worker has started, when loader workers started with ``method`` (spawn,
    forkserver: a new interpreter that unpickles the dataset, importing every class it holds by
    module name) would need a module of ``CONFIG.EXTRA_MODULES`` loaded from a ``.py`` path: such
    a module has no importable name (zoo names it ``zoo_user_<file>_<hash>``), and the worker
    would die on its import with torch saying only that it exited unexpectedly.

    Raises:
        ConfigError: Naming the key, the file and what to change.
    """
    if not num_workers or not any(n.startswith("zoo_user_") for n in sys.modules):
        return
    ctx = worker_context(method)
    # The platform's default is the first of the list (asked without fixing it for the process).
    started = (ctx.get_start_method() if ctx is not None else
               multiprocessing.get_start_method(allow_none=True)
               or multiprocessing.get_all_start_methods()[0])
    if started == "fork":
        return
    import pickle
    import re

    try:
        data = pickle.dumps(dataset, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return  # not picklable at all: the DataLoader says so itself
    names = sorted({m.decode() for m in re.findall(rb"zoo_user_\w+", data)} & set(sys.modules))
    if not names:
        return
    path = getattr(sys.modules[names[0]], "__file__", None) or names[0]
    stem = os.path.splitext(os.path.basename(path))[0]
    raise ConfigError(
        f"CONFIG.DATA.WORKER_START_METHOD {method}"
        f"{f' ({started} on this platform)' if method != started else ''}: each loader worker "
        f"starts a new interpreter that imports what the dataset holds by module name, and "
        f"{path} (a CONFIG.EXTRA_MODULES file loaded from its path) has no importable name; set "
        f"WORKER_START_METHOD fork (or auto on Linux), or put {os.path.dirname(path)} on "
        f"PYTHONPATH and name the module ({stem!r}) in CONFIG.EXTRA_MODULES instead of the path")


def worker_threads(decode_threads: int, num_workers: int) -> Dict[str, Any]:
    """Threads of each of ``num_workers`` loader workers: ``decoder`` (the readers' count for
    ``DATA.DECODE_THREADS`` = ``decode_threads``: that value when > 0, FFmpeg's own choice for
    -1, else the worker's share of the cores, :func:`~zoo.data.decode.threads.threads_per_worker`;
    frames under 256x256 always decode on one), ``torch`` (1), ``opencv`` (1; its own default
    with -1, as before workers were given a share) and ``cores``."""
    cores = available_cpus()
    library = decode_threads == LIBRARY_CHOICE
    decoder: Any = (decode_threads if decode_threads > 0 else
                    "FFmpeg's choice (one per core)" if library else
                    threads_per_worker(num_workers, cores))
    return {"cores": cores, "decoder": decoder, "torch": 1,
            "opencv": "OpenCV's default" if library else 1}
