"""Clip transforms: uint8 frames ``(T, H, W, C)`` in, normalised float ``(C, T, H, W)`` out.

Every clip is resized once (short side to a target, aspect ratio kept) and then cropped; the crop,
flip and normalisation are cheap slicing and one fused multiply-add. Resizing uses bilinear
interpolation with antialiasing so that downscaling high-resolution videos does not alias.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F


def _short_side_shape(height: int, width: int, short_side: int) -> Tuple[int, int]:
    if height <= width:
        return short_side, max(short_side, round(width * short_side / height))
    return max(short_side, round(height * short_side / width)), short_side


def resize_short_side(frames: torch.Tensor, short_side: int) -> torch.Tensor:
    """Resize uint8 ``(T, H, W, C)`` frames so the short side is ``short_side``.

    Returns:
        float32 ``(T, C, H', W')`` on the 0..255 scale (not yet normalised).
    """
    if frames.dim() != 4:
        raise ValueError(f"expected frames (T, H, W, C), got shape {tuple(frames.shape)}")
    clip = frames.permute(0, 3, 1, 2).float()
    height, width = clip.shape[-2:]
    new_h, new_w = _short_side_shape(height, width, short_side)
    if (new_h, new_w) == (height, width):
        return clip  # already the right size: skip a no-op interpolation
    return F.interpolate(
        clip, size=(new_h, new_w), mode="bilinear", align_corners=False, antialias=True
    )


def _check_crop(clip: torch.Tensor, crop_size: int) -> None:
    height, width = clip.shape[-2:]
    if crop_size > min(height, width):
        raise ValueError(f"crop {crop_size} does not fit in resized frames of {height}x{width}")


def normalize(clip: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Map 0..255 float ``(T, C, H, W)`` to ``(x / 255 - mean) / std`` as ``(C, T, H, W)``."""
    scale = torch.tensor([1.0 / (255.0 * s) for s in std]).view(1, -1, 1, 1)
    shift = torch.tensor([m / s for m, s in zip(mean, std)]).view(1, -1, 1, 1)
    return (clip * scale - shift).transpose(0, 1).contiguous()


def train_transform(
    frames: torch.Tensor,
    crop_size: int,
    short_side_range: Sequence[int],
    random_flip: bool,
    mean: Sequence[float],
    std: Sequence[float],
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Scale jitter, a random square crop and an optional left-right flip.

    Args:
        frames: uint8 ``(T, H, W, C)``.
        crop_size: Side of the square crop.
        short_side_range: ``[min, max]``; the short side is drawn uniformly from it per clip.
        random_flip: Flip the whole clip left-right with probability 0.5.
        mean: Per-channel mean on the 0..1 scale.
        std: Per-channel std on the 0..1 scale.
        generator: Torch RNG; None = the global one (seeded per data worker).

    Returns:
        float32 ``(C, T, crop_size, crop_size)``.
    """
    low, high = int(short_side_range[0]), int(short_side_range[1])
    short_side = int(torch.randint(low, high + 1, (1,), generator=generator))
    clip = resize_short_side(frames, short_side)
    _check_crop(clip, crop_size)
    height, width = clip.shape[-2:]
    top = int(torch.randint(0, height - crop_size + 1, (1,), generator=generator))
    left = int(torch.randint(0, width - crop_size + 1, (1,), generator=generator))
    clip = clip[..., top : top + crop_size, left : left + crop_size]
    if random_flip and bool(torch.rand(1, generator=generator) < 0.5):
        clip = clip.flip(-1)
    return normalize(clip, mean, std)


def _crop_offsets(length: int, crop_size: int, num_crop: int) -> List[int]:
    """Start offsets of ``num_crop`` crops along one axis: centre, or start/centre/end."""
    centre = (length - crop_size) // 2
    if num_crop == 1:
        return [centre]
    if num_crop == 3:
        return [0, centre, length - crop_size]
    raise ValueError(f"num_crop must be 1 or 3, got {num_crop}")


def spatial_crops(clip: torch.Tensor, crop_size: int, num_crop: int) -> List[torch.Tensor]:
    """Centre crop, or three crops spread along the long side (left/centre/right or top/.../bottom).

    Args:
        clip: ``(..., H, W)`` already resized.
        crop_size: Side of the square crops.
        num_crop: 1 or 3.

    Returns:
        ``num_crop`` views of ``clip`` (slices, not copies).
    """
    _check_crop(clip, crop_size)
    height, width = clip.shape[-2:]
    crops = []
    for offset in _crop_offsets(max(height, width), crop_size, num_crop):
        if width >= height:
            top, left = (height - crop_size) // 2, offset
        else:
            top, left = offset, (width - crop_size) // 2
        crops.append(clip[..., top : top + crop_size, left : left + crop_size])
    return crops


def val_transform(
    frames: torch.Tensor,
    crop_size: int,
    short_side: int,
    mean: Sequence[float],
    std: Sequence[float],
) -> torch.Tensor:
    """Short side to ``short_side``, then the centre crop; returns ``(C, T, crop, crop)``."""
    clip = resize_short_side(frames, short_side)
    return normalize(spatial_crops(clip, crop_size, 1)[0], mean, std)


def test_views(
    frames: torch.Tensor,
    segments: Sequence[Sequence[int]],
    crop_size: int,
    short_side: int,
    num_crop: int,
    mean: Sequence[float],
    std: Sequence[float],
) -> torch.Tensor:
    """All test views of one video from a single decode.

    Args:
        frames: uint8 ``(U, H, W, C)``: every frame any segment needs, decoded once.
        segments: For each temporal segment, the rows of ``frames`` that make its clip.
        crop_size: Side of the square crops.
        short_side: Short side after resizing.
        num_crop: Spatial crops per segment, 1 or 3.
        mean: Per-channel mean on the 0..1 scale.
        std: Per-channel std on the 0..1 scale.

    Returns:
        float32 ``(len(segments) * num_crop, C, T, crop, crop)``, segment-major (view
        ``s * num_crop + c`` is crop ``c`` of segment ``s``).
    """
    resized = resize_short_side(frames, short_side)  # once for the union of all segments
    views = []
    for rows in segments:
        clip = resized[torch.as_tensor(rows, dtype=torch.long)]
        for crop in spatial_crops(clip, crop_size, num_crop):
            views.append(normalize(crop, mean, std))
    return torch.stack(views)
