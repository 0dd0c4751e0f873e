"""Clip transforms on tensors: uint8 frames ``(T, H, W, C)`` in, normalised ``(C, T, H, W)`` out.

Every crop is cut from the decoded frames first and then resized to ``crop_size`` in one step, which
touches only the pixels that are kept (on a 340x256 clip ~10x less work than resizing whole float
frames). It is nearly, not exactly, "resize the short side, then crop": the box is rounded to whole
decoded pixels (:func:`_source_side`, :func:`crop_boxes`), so against torchvision's ``Resize(256)``
+ ``CenterCrop(224)`` a 480x640 frame's crop sits 0.4 to 0.6 output pixels to the right and the
pixel values differ slightly (docs/datasets.md, "Transforms", gives the numbers). Frames
stay uint8 until the final normalisation: torch's antialiased bilinear resize has a fast uint8
path. Colour jitter is torchvision's ``transforms.v2.ColorJitter`` with one draw per clip, so
every frame of a clip gets the same change; so do RandAugment and random erasing
(:mod:`zoo.data.clip_augment`).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..utils.device_constants import device_constant
from . import clip_augment

Box = Tuple[int, int, int, int]  # top, left, height, width in decoded-frame pixels


def as_clip(frames: torch.Tensor) -> torch.Tensor:
    """uint8 ``(T, H, W, C)`` -> ``(T, C, H, W)`` view (channels-last memory, no copy)."""
    if frames.dim() != 4:
        raise ValueError(f"expected frames (T, H, W, C), got shape {tuple(frames.shape)}")
    return frames.permute(0, 3, 1, 2)


def _source_side(height: int, width: int, crop_size: int, short_side: float) -> int:
    """Side (decoded pixels) of the square that becomes ``crop_size`` after the short side is
    scaled to ``short_side``."""
    side = round(crop_size * min(height, width) / short_side)
    if side < 1 or side > min(height, width) or crop_size > short_side:
        raise ValueError(
            f"crop {crop_size} does not fit in frames of {height}x{width} resized to short side "
            f"{short_side:g}"
        )
    return side


def crop_resize(clip: torch.Tensor, box: Box, size: int,
                rows: Optional[torch.Tensor] = None, flip: bool = False,
                out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cut ``box`` out of ``(T, C, H, W)``, optionally flip it left-right, and resize it to
    ``size`` x ``size`` (antialiased).

    ``rows`` (int64), when given, picks the frames of the clip from ``clip`` after the cut, so
    that only the box of each picked frame is copied. The flip is made on the cut, before the
    resize: the same pixels as flipping the resized clip (the resize is mirror-symmetric; a test
    checks it), and the flip's copy is the dense copy the resize wants anyway. ``out``, a
    ``(T, C, size, size)`` tensor (a clip's rows of a batch), receives the result: the resize
    writes there directly, the same pixels as without it (a test checks it).
    """
    top, left, height, width = box
    region = clip[..., top : top + height, left : left + width]
    if rows is not None:
        region = region.index_select(0, rows)
    if flip:
        region = region.flip(-1)
    if height == size and width == size:
        return region if out is None else out.copy_(region)
    if not flip and region.dim() == 4 and region.dtype == torch.uint8:
        # torch's uint8 antialiased resize is ~1.6x faster on a dense channels-last input than
        # on a strided cut of the frames, more than the copy costs (4.7 vs 6.4 ms a clip).
        region = region.contiguous(memory_format=torch.channels_last)
    if (out is not None and region.dim() == 4 and _RESIZE_INTO is not None
            and out.is_contiguous(memory_format=torch.channels_last)):
        # The op writes into ``out`` from an input in the same memory format only (a no-op
        # unless the frames were picked by rows and flipped, which leaves them planar).
        region = region.contiguous(memory_format=torch.channels_last)
        return _RESIZE_INTO(region, (size, size), False, None, None, out=out)
    resized = F.interpolate(
        region, size=(size, size), mode="bilinear", align_corners=False, antialias=True
    )
    return resized if out is None else out.copy_(resized)


# The out= form of the op F.interpolate(mode="bilinear", antialias=True) runs on 4-D input (a
# private name of torch's, hence the fallback to resize + copy where a release lacks it).
_RESIZE_INTO = getattr(torch._C._nn, "_upsample_bilinear2d_aa", None)


def resize_frames(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """uint8 ``(T, H, W, C)`` resized to ``height`` x ``width`` whatever its aspect ratio.

    gluoncv.torch's loader (``KEEP_ASPECT_RATIO: False``) had the decoder hand over every frame
    at NEW_WIDTH x NEW_HEIGHT; the crops are then cut from those frames as from any others.
    """
    if tuple(frames.shape[1:3]) == (height, width):
        return frames
    clip = F.interpolate(as_clip(frames), size=(height, width), mode="bilinear",
                         align_corners=False, antialias=True)
    return clip.permute(0, 2, 3, 1)


def normalize(clip: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Map uint8 (or 0..255 float) ``(T, C, H, W)`` to ``(x / 255 - mean) / std`` as float
    ``(C, T, H, W)``."""
    scale = torch.tensor([1.0 / (255.0 * s) for s in std]).view(-1, 1, 1, 1)
    shift = torch.tensor([m / s for m, s in zip(mean, std)]).view(-1, 1, 1, 1)
    # Reorder to (C, T, H, W) while the pixels are still bytes: the same arithmetic as converting
    # first, but the channels-last -> planar copy moves a quarter of the data (~4x faster).
    out = clip.transpose(0, 1).contiguous().to(torch.float32)
    return out.mul_(scale).sub_(shift)


def normalize_batch(clips: torch.Tensor, mean: Sequence[float],
                    std: Sequence[float]) -> torch.Tensor:
    """Map a uint8 batch ``(B, C, T, H, W)`` (or ``(B, C, H, W)``) to float
    ``(x / 255 - mean) / std``, on the batch's own device and in its memory layout.

    The same arithmetic as :func:`normalize`, value for value: a training loader that hands over
    uint8 clips (``CONFIG.DATA.NORMALIZE_ON "device"``) gives the model the same numbers.
    """
    shape = (1, -1) + (1,) * (clips.dim() - 2)
    # Made on the batch's device without a copy from the host, which would wait for the device
    # in every training step (see zoo/utils/device_constants.py).
    scale = device_constant([1.0 / (255.0 * s) for s in std], clips.device, torch.float32)
    shift = device_constant([m / s for m, s in zip(mean, std)], clips.device, torch.float32)
    return clips.to(torch.float32).mul_(scale.view(shape)).sub_(shift.view(shape))


def color_jitter(clip: torch.Tensor, strength: Sequence[float],
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Random brightness, contrast, saturation and hue, drawn once for the whole clip.

    Args:
        clip: uint8 ``(T, C, H, W)``.
        strength: ``[brightness, contrast, saturation, hue]`` as in torchvision's ColorJitter
            (0 = off; hue <= 0.5 and costly: ~5x the others together).
        generator: Torch RNG for the draws; None = the global one.
    """
    if not any(strength):
        return clip
    from torchvision.transforms import v2

    brightness, contrast, saturation, hue = (float(v) for v in strength)
    jitter = v2.ColorJitter(brightness, contrast, saturation, hue)
    if generator is None:
        return jitter(clip.contiguous())
    # torchvision draws from the global RNG: run it on a fork seeded from ``generator``.
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return jitter(clip.contiguous())


def train_box(height: int, width: int, crop_size: int, short_side_range: Sequence[int],
              random_flip: bool, generator: Optional[torch.Generator] = None) -> Tuple[Box, bool]:
    """A training clip's random square cut of ``height`` x ``width`` frames and its flip: the short
    side drawn uniformly from ``short_side_range``, the cut's place, then the flip (probability
    0.5 with ``random_flip``), in that order from ``generator``. The cut becomes ``crop_size`` x
    ``crop_size`` once resized."""
    low, high = int(short_side_range[0]), int(short_side_range[1])
    short_side = int(torch.randint(low, high + 1, (1,), generator=generator))
    side = _source_side(height, width, crop_size, short_side)
    top = int(torch.randint(0, height - side + 1, (1,), generator=generator))
    left = int(torch.randint(0, width - side + 1, (1,), generator=generator))
    flip = random_flip and bool(torch.rand(1, generator=generator) < 0.5)
    return (top, left, side, side), flip


def train_transform(
    frames: torch.Tensor,
    crop_size: int,
    short_side_range: Sequence[int],
    random_flip: bool,
    mean: Sequence[float],
    std: Sequence[float],
    generator: Optional[torch.Generator] = None,
    jitter: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
    rows: Optional[torch.Tensor] = None,
    as_uint8: bool = False,
    out: Optional[torch.Tensor] = None,
    rand_augment: str = "",
    random_erase: float = 0.0,
) -> torch.Tensor:
    """Scale jitter, a random square crop, an optional left-right flip, colour jitter, and
    optionally RandAugment (on the uint8 crop) and random erasing (after the normalisation).

    Args:
        frames: uint8 ``(T, H, W, C)``.
        crop_size: Side of the square crop.
        short_side_range: ``[min, max]``; the short side is drawn uniformly from it per clip.
        random_flip: Flip the whole clip left-right with probability 0.5.
        mean: Per-channel mean on the 0..1 scale.
        std: Per-channel std on the 0..1 scale.
        generator: Torch RNG; None = the global one (seeded per data worker).
        jitter: Colour jitter strengths, see :func:`color_jitter`.
        rows: int64 rows of ``frames`` that make the clip (None = all of them, in order): several
            clips cut from one decode pick their frames without copying whole frames.
        as_uint8: Return the uint8 pixels, not normalised.
        out: With ``as_uint8``, a uint8 ``(T, crop_size, crop_size, C)`` tensor (the clip's row
            of a batch) to write the pixels into; the clip returned is a view of it.
        rand_augment: timm RandAugment policy ("" = off), one draw per clip, see
            :class:`~zoo.data.clip_augment.ClipRandAugment`.
        random_erase: Chance of erasing one box of the normalised clip (0 = off; not with
            ``as_uint8``), see :func:`~zoo.data.clip_augment.random_erase`.

    Returns:
        float32 ``(C, T, crop_size, crop_size)``, or with ``as_uint8`` uint8 of that shape (a
        ``(T, H, W, C)``-ordered view: channels-last memory).
    """
    if out is not None and not as_uint8:
        raise ValueError("train_transform writes into out only with as_uint8=True")
    if random_erase and as_uint8:
        raise ValueError("random erasing works on normalised clips: not with as_uint8=True")
    clip = as_clip(frames)
    (top, left, side, _), flip = train_box(*clip.shape[-2:], crop_size, short_side_range,
                                           random_flip, generator)
    # The resize writes into out, unless colour changes come after it (their result is copied).
    recolour = any(jitter) or bool(rand_augment)
    planar = None if out is None else out.permute(0, 3, 1, 2)
    clip = crop_resize(clip, (top, left, side, side), crop_size, rows, flip=flip,
                       out=None if recolour else planar)
    clip = color_jitter(clip, jitter, generator)
    if rand_augment:
        clip = clip_augment.rand_augment(rand_augment, crop_size)(clip, generator)
    if planar is not None and recolour:
        clip = planar.copy_(clip)
    if as_uint8:
        return clip.transpose(0, 1)
    return clip_augment.random_erase(normalize(clip, mean, std), random_erase, generator)


def _crop_offsets(length: int, side: int, num_crop: int) -> List[int]:
    """Start offsets of ``num_crop`` crops along one axis: centre, or start/centre/end."""
    centre = (length - side) // 2
    if num_crop == 1:
        return [centre]
    if num_crop == 3:
        return [0, centre, length - side]
    raise ValueError(f"num_crop must be 1 or 3, got {num_crop}")


def crop_boxes(
    height: int, width: int, crop_size: int, short_side: int, num_crop: int
) -> List[Box]:
    """Boxes (in decoded pixels) of the centre crop, or of three crops spread along the long side
    (left/centre/right, or top/centre/bottom for portrait frames), after a short-side resize."""
    side = _source_side(height, width, crop_size, short_side)
    boxes = []
    for offset in _crop_offsets(max(height, width), side, num_crop):
        if width >= height:
            boxes.append(((height - side) // 2, offset, side, side))
        else:
            boxes.append((offset, (width - side) // 2, side, side))
    return boxes


def val_transform(
    frames: torch.Tensor,
    crop_size: int,
    short_side: int,
    mean: Sequence[float],
    std: Sequence[float],
) -> torch.Tensor:
    """Short side to ``short_side``, then the centre crop; returns ``(C, T, crop, crop)``."""
    clip = as_clip(frames)
    box = crop_boxes(*clip.shape[-2:], crop_size, short_side, 1)[0]
    return normalize(crop_resize(clip, box, crop_size), mean, std)


def test_views(
    frames: torch.Tensor,
    segments: Sequence[Sequence[int]],
    crop_size: int,
    short_side: int,
    num_crop: int,
    mean: Sequence[float],
    std: Sequence[float],
) -> torch.Tensor:
    """All test views of one video, cut from a single decode.

    Args:
        frames: uint8 ``(U, H, W, C)``: every frame any segment needs, decoded once.
        segments: For each temporal view, the rows of ``frames`` that make its clip.
        crop_size: Side of the square crops.
        short_side: Short side the crops are taken at.
        num_crop: Spatial crops per temporal view, 1 or 3.
        mean: Per-channel mean on the 0..1 scale.
        std: Per-channel std on the 0..1 scale.

    Returns:
        float32 ``(len(segments) * num_crop, C, T, crop, crop)``, segment-major (view
        ``s * num_crop + c`` is crop ``c`` of segment ``s``).
    """
    clip = as_clip(frames)
    boxes = crop_boxes(*clip.shape[-2:], crop_size, short_side, num_crop)
    views = []
    for rows in segments:
        part = clip[torch.as_tensor(rows, dtype=torch.long)]
        for box in boxes:
            views.append(normalize(crop_resize(part, box, crop_size), mean, std))
    return torch.stack(views)
