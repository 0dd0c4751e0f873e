"""``CONFIG.DATA.LOADER_TIMEOUT`` for every way a loader worker can fail to deliver a batch.

The DataLoader's own ``timeout`` bounds only the wait for a batch's message on the result queue.
Once the message is there, unpickling it fetches each tensor's shared memory from the worker that
made it (torch's ``file_descriptor`` sharing: a file descriptor sent over a Unix socket by a thread
of that worker), with no time limit: a worker stopped or stuck at that moment blocks the reading
process forever, and its heartbeat thread keeps beating. :class:`WatchedWorkersIterator` times the
whole wait for each batch from a thread of its own; past the limit it kills the loader's workers,
which fails whatever read was blocked on them, and the wait ends with :class:`LoaderTimeout`, one
line naming the key and the worker. When the iterator shuts down, a worker that outlived the
DataLoader's own join and SIGTERM (a stopped one keeps SIGTERM pending) is killed, or the
interpreter's exit, which waits for every child process, would hang on it.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import List, Optional

from torch.utils.data import _utils
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from ..utils.errors import UserError


class LoaderTimeout(UserError, RuntimeError):
    """A loader worker gave no batch for ``CONFIG.DATA.LOADER_TIMEOUT`` seconds; its workers were
    killed."""


class _Watch:
    """The wait for one batch of an iterator, and the thread that ends it when it is too long."""

    def __init__(self, iterator: _MultiProcessingDataLoaderIter, timeout_s: float,
                 split: str) -> None:
        self.timeout_s, self.split = timeout_s, split
        self._gone = threading.Event()
        self._iterator = weakref.ref(iterator, lambda _: self._gone.set())
        self._lock = threading.Lock()
        self._since: Optional[float] = None  # when the batch awaited now was asked for
        self._worker: Optional[int] = None  # the worker that makes it, when known
        self.killed: Optional[List[int]] = None  # the workers' pids, once the limit ran out
        self._about = ""
        threading.Thread(target=self._run, name="zoo-loader-timeout", daemon=True).start()

    def begin(self, worker: Optional[int]) -> None:
        with self._lock:
            self._since, self._worker = time.monotonic(), worker

    def end(self, error: Optional[BaseException] = None) -> bool:
        """The wait is over (with ``error`` when it failed): whether it ran out the limit, in
        which case the workers were killed."""
        with self._lock:
            self._since = None
            if self.killed is None and "DataLoader timed out" in str(error or ""):
                self._kill()  # the DataLoader's own timeout came first: the workers must go too
            return self.killed is not None

    def error(self) -> LoaderTimeout:
        return LoaderTimeout(
            f"no batch from the {self.split + ' ' if self.split else ''}loader's {self._about} for "
            f"CONFIG.DATA.LOADER_TIMEOUT = {self.timeout_s:g}s: the worker is stuck (a decoder "
            "inside C code, a hung file system) or stopped, so the loader's worker processes "
            "were killed. Raise CONFIG.DATA.LOADER_TIMEOUT if a batch can take that long "
            "(0 = wait forever)")

    def _run(self) -> None:
        interval = min(1.0, max(0.05, self.timeout_s / 20))
        while not self._gone.wait(interval):
            with self._lock:
                if (self.killed is None and self._since is not None
                        and time.monotonic() - self._since > self.timeout_s):
                    self._kill()
            if self.killed is not None:
                return

    def _kill(self) -> None:
        """Kill the iterator's workers (lock held): a read blocked on one of them fails."""
        iterator = self._iterator()
        workers = list(getattr(iterator, "_workers", ()))
        if iterator is not None and getattr(iterator, "_worker_pids_set", False):
            # The deaths are ours: torch's SIGCHLD check must not raise its own error for them
            # in the main thread, wherever it is by then.
            try:
                _utils.signal_handling._remove_worker_pids(id(iterator))
            except Exception:
                pass
            iterator._worker_pids_set = False
        worker = self._worker
        if worker is not None and worker < len(workers):
            self._about = f"worker {worker} (pid {workers[worker].pid})"
        else:
            self._about = f"workers (pids {', '.join(str(w.pid) for w in workers)})"
        self.killed = []
        for w in workers:
            try:
                w.kill()
                self.killed.append(w.pid)
            except Exception:  # already gone
                pass


class WatchedWorkersIterator(_MultiProcessingDataLoaderIter):
    """A DataLoader's iterator with worker processes whose wait for one batch lasts at most the
    loader's ``timeout`` seconds, whatever it blocks on (see the module docstring); the loader
    names its ``split`` in the error when it has one."""

    def __init__(self, loader) -> None:
        super().__init__(loader)
        self._watch = _Watch(self, float(loader.timeout), str(getattr(loader, "split", "")))

    def _next_data(self):
        watch = self._watch
        info = self._task_info.get(self._rcvd_idx)
        watch.begin(info[0] if info else None)
        try:
            data = super()._next_data()
        except Exception as e:  # StopIteration too: an epoch's end
            if watch.end(e):
                raise watch.error() from e
            raise
        if watch.end():
            raise watch.error()
        return data

    def _shutdown_workers(self) -> None:
        super()._shutdown_workers()
        if not getattr(self, "_shutdown", False):
            return  # not shut down (the interpreter is exiting): multiprocessing ends them
        # A worker still there after the DataLoader's join and SIGTERM is stuck for good (a stopped
        # process keeps SIGTERM pending), and the interpreter's exit would wait for it forever.
        for w in getattr(self, "_workers", ()):
            if w.is_alive():
                w.kill()
                w.join(1.0)
