"""Checkpoint writes that overlap training: the state is copied first (a consistent snapshot in
CPU memory), then serialised and written to its file in a thread while the next steps run.

The trainer holds one :class:`BackgroundWriter`. A write still in flight is waited for before the
next one starts, before a preemption checkpoint and at the end of training; between those, each
step only looks whether it is done (:meth:`BackgroundWriter.poll`), so the device never waits for
the disk. A write that failed raises its error (a one-line
:class:`~zoo.utils.checkpoint_io.CheckpointWriteError`) at the first step or wait that sees it,
on the training thread.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable, Optional

import torch


def snapshot(state: Any) -> Any:
    """A copy of ``state`` (a checkpoint dict) that later training steps cannot change: every
    tensor copied into CPU memory of its own (CUDA tensors without blocking, then one wait for
    the copies), containers rebuilt (with their attributes, e.g. a state dict's ``_metadata``),
    other values deep-copied."""
    on_device = []

    def copy_of(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            obj = obj.detach()
            if obj.device.type == "cpu":
                return obj.clone()
            if obj.device.type != "cuda":
                return obj.to("cpu")
            on_device.append(obj.device)
            return obj.to("cpu", non_blocking=True)  # into pinned memory, waited for below
        if isinstance(obj, dict):
            out = obj.__class__()
            out.update((key, copy_of(value)) for key, value in obj.items())
            attrs = getattr(obj, "__dict__", None)
            if attrs:
                out.__dict__.update(copy.deepcopy(attrs))
            return out
        if isinstance(obj, list):
            return [copy_of(value) for value in obj]
        if type(obj) is tuple:
            return tuple(copy_of(value) for value in obj)
        return copy.deepcopy(obj)

    out = copy_of(state)
    for device in set(on_device):
        torch.cuda.current_stream(device).synchronize()
    return out


class BackgroundWriter:
    """Runs one checkpoint write at a time in a thread of this process.

    The thread is not a daemon: a process that leaves while a write is in flight finishes it
    first (the file appears whole or not at all either way: writes are atomic).
    """

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._result: Any = None

    @property
    def pending(self) -> bool:
        """Whether a write was started and not waited for yet."""
        return self._thread is not None

    def submit(self, write: Callable[[], Any]) -> None:
        """Wait for the write in flight (raising its error), then run ``write()`` in a thread."""
        self.wait()

        def run() -> None:
            try:
                self._result = write()
            except BaseException as e:  # raised on the training thread by wait()
                self._error = e

        self._thread = threading.Thread(target=run, name="zoo-checkpoint-write")
        self._thread.start()

    def poll(self) -> bool:
        """Collect the write in flight if it is done (raising its error), without blocking.
        Returns whether a write is still in flight."""
        if self._thread is not None and not self._thread.is_alive():
            self.wait()
        return self.pending

    def wait(self) -> Any:
        """Block until the write in flight is done; raise its error, once. Returns what the
        write returned (None when no write was in flight)."""
        result, self._result = None, None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            result, self._result = self._result, None
        error, self._error = self._error, None
        if error is not None:
            raise error
        return result
