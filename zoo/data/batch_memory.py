"""Shared memory that loader workers write batches into again (``DATA.BATCH_BUFFERS_PER_WORKER``).

A loader worker hands every batch to the training process in shared memory. Fresh shared memory
is paid for page by page on first use (the kernel zeroes and maps each 4 KB page): on a 2-core VM
that was ~1.6 ms per 4.8 MB uint8 clip, a quarter of a clip's work after decoding. A
:class:`BatchMemory` lets each worker keep a few batch buffers and fill one again once the
training process is done with it:

* one byte per buffer, in shared memory, says whether the training process may still read the
  buffer (1) or not (0);
* a worker fills only buffers at 0, and sets the byte to 1 before it writes;
* the training process sets it back to 0 when the storage it received is freed, i.e. when the last
  tensor viewing it is gone. The finalizer that does so is attached while the batch is unpickled,
  before any other code sees it (so a pin-memory thread that copies the batch and drops it frees
  the buffer too).

A buffer is therefore never written while a tensor of the training process views it, whatever
holds on to the batch (a hook, a list of batches): the worker then takes fresh memory, as PyTorch's
own collate does for every batch. A batch unpickled anywhere else never frees its buffer.

Before torch 2.10 the storage a received batch views outlives its last tensor (its finalizer never
ran with torch 2.3, 2.4, 2.5, 2.6, 2.8 and 2.9; it did with 2.10, 2.11, 2.14 and 2.15), so no
buffer would ever be freed: :data:`REUSE_WORKS` is False there and the loader keeps no buffers.
"""

from __future__ import annotations

import math
import secrets
import weakref
from typing import Optional, Tuple

import torch
from torch.utils.data import get_worker_info

from ..utils.env import map_pages_now, torch_at_least

# Whether the training process frees a buffer when its last tensor goes (see the module doc).
REUSE_WORKS = torch_at_least(2, 10)
# The memories made in this process, by token: where a received batch finds its flags.
_MEMORIES: "weakref.WeakValueDictionary[str, BatchMemory]" = weakref.WeakValueDictionary()


def _nbytes(shape: Tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def fresh_shared(shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor in new shared memory whose pages are mapped in one call
    (:func:`~zoo.utils.env.map_pages_now`) rather than faulted in one by one by the first write."""
    storage = torch.UntypedStorage._new_shared(_nbytes(shape, dtype))
    out = torch.empty(0, dtype=dtype).set_(storage, 0, shape)
    map_pages_now(out)
    return out


def batch_tensor(memory: Optional["BatchMemory"], shape: Tuple[int, ...],
                 dtype: torch.dtype) -> Tuple[Optional[int], torch.Tensor]:
    """``(slot, tensor)`` to write a training batch into: in a loader worker a buffer of
    ``memory`` the training process freed (its slot), else new shared memory (slot None, see
    :func:`fresh_shared`); in the training process ordinary memory (slot None)."""
    if get_worker_info() is None:
        return None, torch.empty(shape, dtype=dtype)
    if memory is None:
        return None, fresh_shared(shape, dtype)
    return memory.take(shape, dtype)


class WrittenItems(list):
    """Items of one batch whose clips a dataset wrote straight into one batch tensor, ``clips``
    ``(B, T, H, W, C)``, in order (``slot``: its buffer of a :class:`BatchMemory`, or None). The
    collate hands ``clips`` over as the batch instead of copying the clips into a new one."""

    def __init__(self, items, clips: torch.Tensor, slot: Optional[int]) -> None:
        super().__init__(items)
        self.clips, self.slot = clips, slot


class BatchMemory:
    """Batch buffers that each loader worker fills again once the training process freed them.

    Make it in the training process before the workers start; it goes to them with the collate
    function.

    Args:
        num_workers: The loader's workers.
        per_worker: Buffers each worker keeps.
    """

    def __init__(self, num_workers: int, per_worker: int) -> None:
        self.token = secrets.token_hex(8)
        self.per_worker = int(per_worker)
        self.flags = torch.zeros(max(num_workers * self.per_worker, 1),
                                 dtype=torch.uint8).share_memory_()
        self._buffers: dict = {}  # in a worker: slot -> its storage
        _MEMORIES[self.token] = self

    def __getstate__(self) -> dict:
        return {"token": self.token, "per_worker": self.per_worker, "flags": self.flags}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._buffers = {}

    def take(self, shape: Tuple[int, ...],
             dtype: torch.dtype) -> Tuple[Optional[int], torch.Tensor]:
        """``(slot, tensor)`` to write a batch into, in a loader worker: a buffer of this worker
        that the training process no longer views (its slot), else fresh shared memory (slot
        None). Outside a worker: (None, fresh shared memory)."""
        info = get_worker_info()
        if info is None or (info.id + 1) * self.per_worker > self.flags.numel():
            return None, fresh_shared(shape, dtype)
        nbytes = _nbytes(shape, dtype)
        slots = range(info.id * self.per_worker, (info.id + 1) * self.per_worker)
        free = [s for s in slots if int(self.flags[s]) == 0]
        if not free:
            return None, fresh_shared(shape, dtype)
        # A free buffer of the right size, else a free slot gets a new buffer.
        fitting = [s for s in free if s in self._buffers and self._buffers[s].nbytes() == nbytes]
        slot = fitting[0] if fitting else free[0]
        if not fitting:
            self._buffers[slot] = fresh_shared(shape, dtype).untyped_storage()
        self.flags[slot] = 1  # before the first write: the training process may read it now
        return slot, torch.empty(0, dtype=dtype).set_(self._buffers[slot], 0, shape)

    def release(self, slot: int) -> None:
        """In a worker: give back a buffer that :meth:`take` handed out but that no batch left
        in (the batch was abandoned by an error)."""
        self.flags[slot] = 0

    def watch(self, tensor: torch.Tensor, slot: int) -> None:
        """In the training process: free ``slot`` when the storage ``tensor`` views is freed."""
        weakref.finalize(tensor.untyped_storage(), _release, self.flags, slot)


def _release(flags: torch.Tensor, slot: int) -> None:
    flags[slot] = 0


class PooledBatch(tuple):
    """A collated batch whose first element is in buffer ``slot`` of a :class:`BatchMemory`.

    Unpickled (in the training process), it becomes a plain tuple, and the buffer is watched
    there (:meth:`BatchMemory.watch`) before anything else can see it.
    """

    def __new__(cls, items, token: str, slot: int):
        batch = super().__new__(cls, items)
        batch.token, batch.slot = token, slot
        return batch

    def __reduce__(self):
        return _received, (self.token, self.slot, tuple(self))


def _received(token: str, slot: int, items: tuple) -> tuple:
    memory = _MEMORIES.get(token)
    if memory is not None:  # else: not the process that made it; the buffer stays taken
        memory.watch(items[0], slot)
    return items
