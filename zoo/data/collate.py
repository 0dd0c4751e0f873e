"""Training batches from dataset items: the clips stacked with one copy (or none, where the
dataset wrote them into the batch), in shared memory inside a loader worker, with the labels,
indices, skipped-video counts and, for cuts resized on the device, their
:class:`~zoo.data.device_crops.CropGeometry`. The items' format is in :mod:`zoo.data.build`."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
from torch.utils.data import default_collate

from ..config import ConfigError
from .batch_memory import BatchMemory, PooledBatch, WrittenItems, batch_tensor
from .device_crops import CropGeometry, collate_geometry


def _stack(tensors: List[torch.Tensor],
           memory: Optional[BatchMemory] = None) -> Tuple[torch.Tensor, Optional[int]]:
    """``(torch.stack(tensors), slot)``. Inside a loader worker the batch goes to shared memory:
    a buffer of ``memory`` that the training process freed (its slot), else new shared memory
    whose pages are mapped in one call before the copy (slot None; ``default_collate`` lets the
    copy fault them in one by one); see :func:`~zoo.data.batch_memory.batch_tensor`."""
    slot, out = batch_tensor(memory, (len(tensors), *tensors[0].shape), tensors[0].dtype)
    return torch.stack(tensors, out=out), slot


def stack_clips(clips: List[Any],
                memory: Optional[BatchMemory] = None) -> Tuple[Any, Optional[int]]:
    """Stack clips into a batch with one copy (in shared memory inside a loader worker, see
    :func:`_stack`); returns ``(batch, slot of memory or None)``.

    uint8 clips ``(C, T, H, W)`` (handed over for the training step to normalise) are stacked in
    their pixel order ``(T, H, W, C)`` and the batch is returned as a ``(B, C, T, H, W)`` view of
    it (channels-last-3d memory): a straight copy instead of a transposing one. Other clip
    tensors are stacked as they are; anything else goes to ``default_collate``.
    """
    first = clips[0]
    if isinstance(first, torch.Tensor) and first.dim() == 4 and first.device.type == "cpu":
        if first.dtype == torch.uint8:
            batch, slot = _stack([c.permute(1, 2, 3, 0) for c in clips], memory)
            return batch.permute(0, 4, 1, 2, 3), slot
        return _stack(clips, memory)
    return default_collate(clips), None


def _clips_batch(batch: List[Any], clips: List[Any],
                 memory: Optional[BatchMemory]) -> Tuple[Any, Optional[int]]:
    """``(clips batch, slot)``: the batch tensor the dataset wrote the clips into
    (:class:`~zoo.data.batch_memory.WrittenItems`, no copy) when they are exactly its rows in
    order, else a stack of them (:func:`stack_clips`)."""
    written = batch.clips.permute(0, 4, 1, 2, 3) if isinstance(batch, WrittenItems) else None
    if written is not None and len(clips) == written.shape[0] and all(
            isinstance(clip, torch.Tensor) and clip.data_ptr() == row.data_ptr()
            and clip.shape == row.shape and clip.stride() == row.stride()
            for clip, row in zip(clips, written)):
        return written, batch.slot
    stacked = stack_clips(clips, memory)
    if written is not None and batch.slot is not None and memory is not None:
        # Items were replaced: that buffer holds no batch. Freed only now: until the copy is
        # made, clips still in it must not be overwritten by the copy itself.
        memory.release(batch.slot)
    return stacked


def _batch(items: Tuple[Any, ...], memory: Optional[BatchMemory], slot: Optional[int]) -> Any:
    return tuple(items) if slot is None else PooledBatch(items, memory.token, slot)


def collate_train(batch: List[Tuple[Any, ...]], memory: Optional[BatchMemory] = None) -> Any:
    """Collate training items of one clip each (see :func:`stack_clips`)."""
    if not isinstance(batch[0][0], torch.Tensor):
        return default_collate(batch)
    clips, slot = _clips_batch(batch, [item[0] for item in batch], memory)
    geometry = _geometry(batch)
    rest = [item[1:len(item) - len(geometry)] for item in batch]
    return _batch((clips, *default_collate(rest), *geometry), memory, slot)


def _geometry(batch: List[Tuple[Any, ...]]) -> List[CropGeometry]:
    """The batch's crop geometry as a list of one, or ``[]`` unless the items end with one
    (``CONFIG.DATA.RESIZE_ON "device"``, see :mod:`zoo.data.device_crops`)."""
    if not isinstance(batch[0][-1], CropGeometry):
        return []
    return [collate_geometry([item[-1] for item in batch])]


def collate_clips(batch: List[Tuple[Any, ...]], clips_per_video: int,
                  memory: Optional[BatchMemory] = None) -> Tuple[torch.Tensor, ...]:
    """Collate training items of ``clips_per_video`` clips each into one batch of clips.

    Items are ``(clips, label, index, n_bad)`` with ``clips`` a tuple of N ``(C, T, H, W)``
    tensors. The batch is ``(clips (B * N, C, T, H, W), labels, indices, n_bad)`` with the clips
    of a video next to each other, its label and index repeated N times, and its ``n_bad`` on its
    first clip only (0 on the others), so that the sum still counts skipped videos.

    Raises:
        ConfigError: An item is not N clips (a dataset that ignores ``clips_per_video``).
    """
    n = clips_per_video
    for item in batch:
        if not isinstance(item[0], (tuple, list)) or len(item[0]) != n:
            what = (f"{len(item[0])} clips" if isinstance(item[0], (tuple, list)) else
                    f"one {type(item[0]).__name__} of shape {tuple(getattr(item[0], 'shape', ()))}")
            raise ConfigError(
                f"CONFIG.DATA.CLIPS_PER_VIDEO = {n} but the training dataset returned {what} per "
                f"item, not a tuple of {n} clips: make the dataset honour its clips_per_video "
                "argument (ClipSettings) or set CLIPS_PER_VIDEO 1"
            )
    # One copy of every clip into the batch, or none where the dataset wrote them there.
    clips, slot = _clips_batch(batch, [clip for item in batch for clip in item[0]], memory)
    labels, indices, n_bad = default_collate([item[1:4] for item in batch])
    bad = torch.zeros(len(n_bad) * n, dtype=n_bad.dtype)
    bad[::n] = n_bad
    return _batch((clips, labels.repeat_interleave(n), indices.repeat_interleave(n), bad,
                   *_geometry(batch)), memory, slot)
