"""A loader worker's batch: new shared memory whose pages are mapped in one call
(zoo.utils.env.map_pages_now) before the clips are copied in (zoo.data.collate.stack_clips), or a
buffer of zoo.data.batch_memory.BatchMemory that the training process has freed."""

from __future__ import annotations

import functools
import gc
import os
import pickle
import sys

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from zoo.data.batch_memory import REUSE_WORKS, BatchMemory, PooledBatch
from zoo.data.collate import collate_train
from zoo.utils.env import map_pages_now

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="madvise and /proc/self/smaps: Linux only")


def _resident_kb(address: int) -> int:
    """Rss of this process's mapping that holds ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(v, 16) for v in head.split("-"))
                inside = start <= address < end
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError(f"no mapping holds {address:#x}")


def _kernel() -> tuple:
    release = os.uname().release.split("-")[0].split(".")
    return tuple(int(v) for v in release[:2] if v.isdigit())


@linux_only
def test_fresh_shared_memory_is_mapped_before_any_write():
    size = 32 << 20
    block = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(size), 0,
                                                   (size,))
    before = _resident_kb(block.data_ptr())
    if _kernel() < (5, 14):
        assert map_pages_now(block) is False
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14 and later)")
    assert map_pages_now(block) is True
    after = _resident_kb(block.data_ptr())
    assert before < size // 1024 // 10, before  # nothing touched yet: (almost) nothing mapped
    assert after >= size // 1024 * 95 // 100, (before, after)
    assert int(block.count_nonzero()) == 0  # mapping writes nothing


def test_nothing_to_map_is_a_no_op():
    assert map_pages_now(torch.empty(0, dtype=torch.uint8)) is False


class _Clips(Dataset):
    """Items ``(clip, label, index, n_bad)``: uint8 or float ``(C, T, H, W)`` clips of random
    pixels, the same for an index whichever process makes them."""

    def __init__(self, dtype: torch.dtype, size: int = 6) -> None:
        self.dtype, self.size = dtype, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(index)
        pixels = torch.randint(0, 256, (4, 5, 7, 3), dtype=torch.uint8, generator=g)
        return pixels.permute(3, 0, 1, 2).to(self.dtype), index % 2, index, 0


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_a_worker_batch_holds_the_clips_in_shared_memory(dtype):
    data = _Clips(dtype)
    loader = DataLoader(data, batch_size=3, num_workers=1, collate_fn=collate_train)
    batches = list(loader)
    assert len(batches) == 2
    for b, (clips, labels, index, bad) in enumerate(batches):
        want = torch.stack([data[i][0] for i in range(3 * b, 3 * b + 3)])
        assert clips.dtype == dtype and torch.equal(clips, want)
        assert clips.is_shared()  # the worker wrote it where the main process reads it
        if dtype == torch.uint8:  # stored in pixel order (B, T, H, W, C)
            assert clips.permute(0, 2, 3, 4, 1).is_contiguous()
        assert labels.tolist() == [i % 2 for i in range(3 * b, 3 * b + 3)]
        assert index.tolist() == list(range(3 * b, 3 * b + 3)) and bad.tolist() == [0, 0, 0]


def _pooled_loader(data: Dataset, memory: BatchMemory, context: str = None) -> DataLoader:
    return DataLoader(data, batch_size=2, num_workers=1, multiprocessing_context=context,
                      collate_fn=functools.partial(collate_train, memory=memory))


def _want(data: Dataset, b: int) -> torch.Tensor:
    return torch.stack([data[i][0] for i in (2 * b, 2 * b + 1)])


def test_a_batch_still_held_is_never_written_again():
    data = _Clips(torch.uint8, size=24)
    memory = BatchMemory(num_workers=1, per_worker=2)
    held = list(_pooled_loader(data, memory))  # every batch kept: no buffer is ever freed
    assert len(held) == 12
    for b, batch in enumerate(held):
        assert type(batch) is tuple and torch.equal(batch[0], _want(data, b))
    assert memory.flags.tolist() == [1, 1]  # both buffers still viewed here
    del held, batch
    gc.collect()
    # Freed with the last tensor that viewed them; before torch 2.10 never (so the loader keeps
    # no buffers there), and never too early.
    assert memory.flags.tolist() == ([0, 0] if REUSE_WORKS else [1, 1])


@pytest.mark.skipif(torch.multiprocessing.get_sharing_strategy() != "file_descriptor",
                    reason="reads the shared memory's inode through its file descriptor")
@pytest.mark.parametrize("per_worker,context", [(0, None), (3, None), (3, "spawn")])
def test_a_freed_buffer_is_filled_again(per_worker, context):
    if per_worker and not REUSE_WORKS:
        pytest.skip("torch before 2.10 never frees a received batch's storage: no buffer reuse")
    data = _Clips(torch.uint8, size=32)
    memory = BatchMemory(num_workers=1, per_worker=per_worker) if per_worker else None
    files = []
    batches = iter(_pooled_loader(data, memory, context))
    # Not `for b, batch in enumerate(...)`: enumerate keeps its last result until it has the next
    # batch, so batch b would be freed only after the loader asked for batch b + 3.
    for b in range(16):
        batch = next(batches)
        assert torch.equal(batch[0], _want(data, b))
        fd, _ = batch[0].untyped_storage()._share_fd_cpu_()
        files.append(os.fstat(fd).st_ino)
        del batch  # freed before the next batch is asked for, as a training step frees its batch
    assert next(batches, None) is None
    if per_worker:
        # Held here 1, waiting in the queue 1, being made 1 (2 batches prefetched): 3 buffers,
        # again and again.
        assert len(set(files)) <= per_worker, files
    else:
        assert len(set(files)) == 16


def test_a_pooled_batch_arrives_as_a_tuple_whose_buffer_is_watched():
    memory = BatchMemory(num_workers=1, per_worker=2)
    memory.flags[1] = 1  # what a worker does before it fills buffer 1
    clips = torch.arange(6, dtype=torch.uint8)
    received = pickle.loads(pickle.dumps(PooledBatch((clips, 5), memory.token, 1)))
    assert type(received) is tuple and torch.equal(received[0], clips) and received[1] == 5
    view = received[0][2:]
    del received
    gc.collect()
    assert memory.flags.tolist() == [0, 1]  # a view of the storage is still alive
    del view
    gc.collect()
    assert memory.flags.tolist() == [0, 0]
