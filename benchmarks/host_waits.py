"""Where a training run on a GPU makes the host wait for the GPU: a trainer hook for the GPU check.

``HostWaitCount`` (``CONFIG.TRAIN.HOOKS`` entry ``benchmarks/host_waits.py:HostWaitCount``) turns
on torch's sync debug mode ("warn") from the end of the first epoch's last step to the end of
training: every call that synchronises with the device then raises a warning, which the hook
counts by thread and source line instead of printing. It writes ``host_waits.json`` into the
run's folder: the steps in that window and the waits, e.g. ``{"steps": 96, "waits":
[{"where": "zoo/train/hooks.py:209", "thread": "MainThread", "count": 9}]}``.

A wait in the main thread at every step keeps the host from queueing the next step while the GPU
runs this one; the expected ones are the epoch's end (its log line reads the loss) and each
``LOG.DISPLAY_FREQ`` line. The checkpoint writer's thread waits for its copies, which holds no
step. On a CPU there is nothing to count: the file says so (``"device": "cpu"``).
"""

from __future__ import annotations

import collections
import json
import os
import threading
import warnings
from typing import Dict, Optional, Tuple

import torch

from zoo.train.hooks import HookBase
from zoo.utils import comm

# The warning torch's sync debug mode gives (c10/cuda/CUDAFunctions.cpp: warn_or_error).
SYNC_WARNING = "called a synchronizing CUDA operation"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _where(filename: str, lineno: int) -> str:
    """``filename:lineno``, relative to the checkout when the file is in it."""
    path = os.path.abspath(filename)
    if path.startswith(ROOT + os.sep):
        path = os.path.relpath(path, ROOT)
    return f"{path}:{lineno}"


class WaitCounter:
    """Counts the sync debug mode's warnings by ``(where, thread)`` while entered; other warnings
    are shown as usual. Turning the mode on and off is the caller's (:class:`HostWaitCount`)."""

    def __init__(self) -> None:
        self.counts: Dict[Tuple[str, str], int] = collections.Counter()
        self._lock = threading.Lock()
        self._catch: Optional[warnings.catch_warnings] = None

    def __enter__(self) -> "WaitCounter":
        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.filterwarnings("always", message=SYNC_WARNING)
        shown = warnings.showwarning

        def count(message, category, filename, lineno, file=None, line=None):
            if SYNC_WARNING not in str(message):
                shown(message, category, filename, lineno, file, line)
                return
            key = (_where(filename, lineno), threading.current_thread().name)
            with self._lock:
                self.counts[key] += 1

        warnings.showwarning = count
        return self

    def __exit__(self, *exc) -> None:
        if self._catch is not None:
            self._catch.__exit__(*exc)  # puts the filters and showwarning back
            self._catch = None

    def table(self):
        return [{"where": where, "thread": thread, "count": n}
                for (where, thread), n in sorted(self.counts.items(), key=lambda kv: -kv[1])]


class HostWaitCount(HookBase):
    """Counts the host's waits for the GPU after the first epoch (see the module docstring)."""

    def __init__(self) -> None:
        self.counter: Optional[WaitCounter] = None
        self.steps = 0

    def _on_cuda(self) -> bool:
        return self.trainer.device.type == "cuda"

    def after_step(self) -> None:
        t = self.trainer
        if self.counter is not None:
            self.steps += 1
        elif (t.epoch == t.start_epoch and self._on_cuda()
              and t.inner_iter + 1 >= t.steps_per_epoch * t.cfg.CONFIG.TRAIN.ACCUM_STEPS):
            self.counter = WaitCounter().__enter__()
            torch.cuda.set_sync_debug_mode("warn")

    def after_train(self) -> None:
        t = self.trainer
        if self.counter is not None:
            torch.cuda.set_sync_debug_mode("default")
            self.counter.__exit__(None, None, None)
        if not comm.is_main_process():
            return
        result = {"device": t.device.type, "steps": self.steps,
                  "waits": self.counter.table() if self.counter is not None else []}
        with open(os.path.join(t.out_dir, "host_waits.json"), "w") as f:
            json.dump(result, f, indent=1)


def summary(path: str, top: int = 3) -> str:
    """The figure of a ``host_waits.json``: ``"host waits after epoch 1: 14 in 96 steps, main
    thread 12 (zoo/train/hooks.py:209 9, ...)"``; "" when there is no file or nothing was
    counted (a CPU)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ""
    if data.get("device") != "cuda":
        return ""
    waits = data.get("waits", [])
    main = [w for w in waits if w["thread"] == "MainThread"]
    total, in_main = sum(w["count"] for w in waits), sum(w["count"] for w in main)
    where = ", ".join(f"{w['where']} {w['count']}" for w in main[:top])
    return (f"host waits after epoch 1: {total} in {data.get('steps', 0)} steps, main thread "
            f"{in_main}" + (f" ({where})" if where else ""))
