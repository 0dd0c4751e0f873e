"""Checkpoint writes that overlap training: the state is copied first (a consistent snapshot in
CPU memory; from a GPU the copies are queued behind the step and waited for by the writing
thread), then serialised and written to its file in a thread while the next steps run.

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
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

ALIGN = 64  # bytes between the starts of two tensors in a staging buffer


class Staging:
    """One host buffer that receives the device tensors of a snapshot, kept for the next one.

    A snapshot of a CUDA model copies every tensor (~1,000 for SlowFast-R50's model and
    optimizer state) to the host. Each into pinned memory of its own would cost a pinned
    allocation per tensor on the first snapshot (~0.4 s on an H200 host); here they all go into
    one pinned buffer, kept and reused while the state fits in it, and the training thread
    queues the copies without waiting for them. :meth:`reserve` makes the buffer ahead of the
    first snapshot (the trainer does it at the first step), so that no epoch boundary pays for
    pinning it.

    Args:
        devices: The device types whose tensors go through the buffer (tests pass "cpu").
    """

    def __init__(self, devices: Tuple[str, ...] = ("cuda",)) -> None:
        self.devices = devices
        self._buffer: Optional[torch.Tensor] = None

    def take(self, nbytes: int) -> torch.Tensor:
        """A uint8 host buffer of ``nbytes`` (pinned where CUDA is): a view of the kept one
        while it is large enough, else a new one that is kept instead."""
        if self._buffer is None or self._buffer.numel() < nbytes:
            self._buffer = None  # freed before its successor is made
            pin = "cuda" in self.devices and torch.cuda.is_available()
            self._buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        return self._buffer[:nbytes]

    def reserve(self, state: Any) -> int:
        """Make the buffer a snapshot of ``state`` needs (its tensors on :attr:`devices`), now.
        Returns its size in bytes (0 when ``state`` has no such tensor)."""
        nbytes = _layout([t for t in _tensors(state) if t.device.type in self.devices])[1]
        if nbytes:
            self.take(nbytes)
        return nbytes


class Snapshot:
    """A checkpoint state copied at one moment: :meth:`wait` returns it once its copies from
    the device are complete, every tensor in storage of its own (as ``torch.save`` should see
    it: a tensor that shared one large buffer would carry the whole buffer into the file)."""

    def __init__(self, state: Any, staged: List[torch.Tensor], devices: List[torch.device]):
        self._state = state
        self._staged = {id(t) for t in staged}
        self._events = []
        for device in devices:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            self._events.append(event)

    def wait(self) -> Any:
        """The state, once its copies are complete (blocks this thread, not the device)."""
        for event in self._events:
            event.synchronize()
        self._events = []
        staged, self._staged = self._staged, set()
        if not staged:
            return self._state
        return _map_tensors(self._state, lambda t: t.clone() if id(t) in staged else t)


def snapshot(state: Any, staging: Optional[Staging] = None) -> Snapshot:
    """A copy of ``state`` (a checkpoint dict) that later training steps cannot change: CPU
    tensors cloned, CUDA tensors copied without blocking into ``staging`` (or pinned memory of
    their own without one), containers rebuilt (with their attributes, e.g. a state dict's
    ``_metadata``), other values deep-copied. Strides are kept.

    The copies are queued on each device's current stream, behind the step that made the
    tensors and ahead of any later kernel that changes them; :meth:`Snapshot.wait` waits for
    them. With ``staging`` the next snapshot reuses its buffer: take it only once the write of
    this one is done.
    """
    devices = staging.devices if staging is not None else ()
    to_stage = [t for t in _tensors(state) if t.device.type in devices]
    views: Dict[int, torch.Tensor] = {}
    if to_stage:
        layout, nbytes = _layout(to_stage)
        buffer = staging.take(nbytes)
        for t, start, strides in layout:
            size = t.numel() * t.element_size()
            view = buffer[start:start + size].view(t.dtype).as_strided(t.size(), strides)
            views[id(t)] = view.copy_(t.detach(), non_blocking=True)
    on_device = set()

    def copy_of(t: torch.Tensor) -> torch.Tensor:
        if id(t) in views:
            if t.device.type == "cuda":
                on_device.add(t.device)
            return views[id(t)]
        t = t.detach()
        if t.device.type == "cpu":
            return t.clone()
        if t.device.type != "cuda":
            return t.to("cpu")
        on_device.add(t.device)
        return t.to("cpu", non_blocking=True)  # into pinned memory, waited for by wait()

    out = _map_tensors(state, copy_of, copy_other=True)
    staged = [views[id(t)] for t in to_stage]
    return Snapshot(out, staged, sorted(on_device, key=str))


def _layout(tensors: List[torch.Tensor]) -> Tuple[List[Tuple[torch.Tensor, int, Tuple[int, ...]]],
                                              int]:
    """Where each distinct tensor of ``tensors`` goes in a staging buffer: ``(tensor, byte
    offset, strides)`` in order (the strides are the tensor's where it is dense), and the
    buffer's size in bytes. Each starts at a multiple of :data:`ALIGN`."""
    layout, offset, seen = [], 0, set()
    for t in tensors:
        if id(t) in seen:
            continue
        seen.add(id(t))
        strides = torch.empty_like(t, device="meta").stride()
        layout.append((t, offset, strides))
        offset += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
    return layout, offset


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors in nested dicts, lists and tuples, in the order :func:`_map_tensors` meets
    them."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, list) or type(obj) is tuple:  # the containers _map_tensors rebuilds
        for value in obj:
            yield from _tensors(value)


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor],
                 copy_other: bool = False) -> Any:
    """``obj`` with every tensor ``t`` in nested dicts, lists and tuples replaced by ``fn(t)``;
    the containers rebuilt (dicts with their class and attributes); other values deep-copied
    with ``copy_other``, else kept."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        out = obj.__class__()
        out.update((key, _map_tensors(value, fn, copy_other)) for key, value in obj.items())
        attrs = getattr(obj, "__dict__", None)
        if attrs:
            out.__dict__.update(copy.deepcopy(attrs))
        return out
    if isinstance(obj, list):
        return [_map_tensors(value, fn, copy_other) for value in obj]
    if type(obj) is tuple:
        return tuple(_map_tensors(value, fn, copy_other) for value in obj)
    return copy.deepcopy(obj) if copy_other else obj


class BackgroundWriter:
    """Runs one checkpoint write at a time in a thread of this process.

    The thread is not a daemon: a process that leaves while a write is in flight finishes it
    first (the file appears whole or not at all either way: writes are atomic).
    """

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._result: Any = None
        self._staging = Staging()

    def snapshot(self, state: Any) -> Snapshot:
        """Wait for the write in flight (its snapshot's staging buffer is reused), then
        :func:`snapshot` ``state`` through that buffer."""
        self.wait()
        return snapshot(state, self._staging)

    def reserve(self, state: Any) -> int:
        """Make the staging buffer a snapshot of ``state`` (a checkpoint dict) will need, now
        rather than at the first snapshot (see :meth:`Staging.reserve`). Returns its bytes."""
        return self._staging.reserve(state)

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
        result = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            result, self._result = self._result, None
        error, self._error = self._error, None
        if error is not None:
            raise error
        return result
