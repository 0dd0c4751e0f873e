"""Training crops resized on the training device (``CONFIG.DATA.RESIZE_ON "device"``).

After decoding, a loader worker's work on a training clip is its random square cut, resized to
``CROP_SIZE`` (the scale jitter), and its flip. The resize is the larger part: 14% of a worker's
CPU time on 340x256 H.264 clips (docs/benchmarks.md, "Crops resized on the device"). With
``RESIZE_ON "device"`` the worker copies the cut, unresized and unflipped, into the top-left
corner of a square of side ``S`` (:func:`cut_side`) and records ``(side, flip, crop)`` for it
(:class:`CropGeometry`, the batch's last element); the training step resizes and flips each clip
on its device after the copy, before normalising (:func:`resize_cuts`).

The picture is the loader's: torch's antialiased bilinear resize of the same cut, which the
flip commutes with. The device resizes in float and rounds to uint8; the loader's uint8 kernel
rounds in fixed point, so a pixel may differ by one level (a test bounds it).

``S`` is fixed per batch: the largest cut the first clip's frames allow (its short side drawn at
the range's minimum), at least ``CROP_SIZE``. A later clip of larger frames whose cut is larger
than ``S`` is resized (and flipped) in the worker, and its row says ``side == crop``.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from . import transforms
from .transforms import Box


class CropGeometry:
    """``(side, flip, crop)`` of each clip of a batch of cuts, an int64 ``(B, 3)`` CPU tensor
    ``table``: the clip's cut is ``[:side, :side]`` of its square, to be resized to ``crop`` x
    ``crop`` and, when ``flip`` is 1, flipped left-right. It stays in ordinary memory (the step
    reads it on the host; nothing to copy to the device)."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table

    def __len__(self) -> int:
        return int(self.table.shape[0])

    def pin_memory(self, *args: Any) -> "CropGeometry":
        return self  # read on the host: pinning would only cost a copy

    def __repr__(self) -> str:
        return f"CropGeometry({self.table.tolist()})"


def batch_geometry(batch: Any) -> Optional[CropGeometry]:
    """The :class:`CropGeometry` of a training batch whose clips are unresized cuts, else None."""
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[-1], CropGeometry):
        return batch[-1]
    return None


def collate_geometry(items: Sequence[CropGeometry]) -> CropGeometry:
    """The batch's :class:`CropGeometry` from its items', in order."""
    return CropGeometry(torch.cat([item.table for item in items]))


def cut_side(height: int, width: int, crop_size: int, short_side_range: Sequence[int]) -> int:
    """Side of the square a cut of ``height`` x ``width`` frames is copied into: the largest cut
    :func:`~zoo.data.transforms.train_box` can draw there (short side at the range's minimum),
    at least ``crop_size``."""
    short = min(height, width)
    largest = round(crop_size * short / int(short_side_range[0]))
    return max(int(crop_size), min(short, largest))


def write_cut(frames: torch.Tensor, box: Box, flip: bool, crop_size: int, out: torch.Tensor,
              rows: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Copy ``box`` of uint8 ``(T, H, W, C)`` frames (the ``rows`` among them, when given) into
    the top-left corner of ``out``, a ``(T, S, S, C)`` square per frame; returns the clip's
    ``(side, flip, crop)`` row. A cut larger than ``S`` is resized (and flipped) here instead,
    into ``[:crop, :crop]``, and its row says so (``side == crop``, no flip left)."""
    top, left, height, width = box
    square = out.shape[1]
    if height > square:
        planar = out[:, :crop_size, :crop_size].permute(0, 3, 1, 2)
        transforms.crop_resize(transforms.as_clip(frames), box, crop_size, rows, flip=flip,
                               out=planar)
        return torch.tensor([crop_size, 0, crop_size])
    cut = frames[:, top : top + height, left : left + width]
    if rows is not None:
        cut = cut.index_select(0, rows)
    out[:, :height, :width].copy_(cut)
    return torch.tensor([height, int(flip), crop_size])


def resize_cuts(cuts: torch.Tensor, geometry: CropGeometry) -> torch.Tensor:
    """uint8 cuts ``(B, C, T, S, S)`` (on any device) resized and flipped as ``geometry`` says:
    uint8 ``(B, C, T, crop, crop)`` on the same device, stored ``(B, T, crop, crop, C)``
    (channels-last), as the loader hands over clips it resized itself.

    Raises:
        ValueError: ``geometry`` does not match the batch (another batch's, or clips of several
            crop sizes).
    """
    table: List[Tuple[int, int, int]] = [tuple(row) for row in geometry.table.tolist()]
    crops = {row[2] for row in table}
    if len(table) != cuts.shape[0] or len(crops) != 1:
        raise ValueError(f"crop geometry of {len(table)} clips (crop sizes {sorted(crops)}) does "
                         f"not match a batch of {cuts.shape[0]} cuts of one crop size")
    crop = crops.pop()
    batch, channels, length = cuts.shape[:3]
    out = torch.empty((batch, length, crop, crop, channels), dtype=torch.uint8,
                      device=cuts.device)
    for b, (side, flip, _) in enumerate(table):
        clip = cuts[b, :, :, :side, :side].transpose(0, 1)  # (T, C, side, side)
        if side != crop:
            clip = F.interpolate(clip.float(), size=(crop, crop), mode="bilinear",
                                 align_corners=False, antialias=True).round_().clamp_(0, 255)
        if flip:
            clip = clip.flip(-1)
        out[b].copy_(clip.permute(0, 2, 3, 1))
    return out.permute(0, 4, 1, 2, 3)
