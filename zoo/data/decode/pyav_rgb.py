"""A decoded PyAV frame to the RGB array a clip holds: turned upright by its display matrix, as a
player shows it, and scaled to the dataset's output size in the same pass as the colour conversion
(FFmpeg's scaler), when one is set."""

from __future__ import annotations

from typing import Optional, Tuple

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from .base import DecodeError, OutputSize, upright

# FFmpeg's scaler filter for the one-pass resize: bilinear, widened when shrinking (antialiased)
# like torch's antialiased bilinear resize; measured against it in docs/benchmarks.md
# ("End-to-end clip loading at real sizes").
_SCALE_FILTER = "BILINEAR"
# The scaler is threaded (``threads``); planar RGB out is then the faster scaled output (the
# same pixels as packed RGB).
_SCALED_FORMAT = "gbrp"


def upright_rgb(frame: av.VideoFrame, converter: VideoReformatter, size: Optional[OutputSize],
                threads: int, path: str) -> np.ndarray:
    """``frame`` as upright ``(H, W, 3)`` RGB, scaled to ``size`` when given, converted by
    ``converter`` on ``threads`` scaler threads.

    Raises:
        DecodeError: The display matrix turns the picture by other than a quarter turn (``path``
            is named).
    """
    rotation = frame.rotation
    if abs(rotation - 90.0 * round(rotation / 90.0)) > 1.0:  # FFmpeg's own tolerance
        raise DecodeError(
            f"{path}: its display matrix turns the picture by {rotation:g} degrees, not a quarter "
            "turn, and zoo turns pictures by quarter turns only (a player shows it tilted, with "
            "filled corners): re-encode it as players show it with the ffmpeg command, or take it "
            "out of the list")
    target = scaled_size(frame, rotation, size)
    if target is None:
        image = converter.reformat(frame, format="rgb24", threads=threads).to_ndarray()
    else:
        # Planar RGB out: FFmpeg's scaler writes it with SIMD where packed rgb24 output of a
        # scaled picture takes its generic C path (1.1 against 2.4 ms for 1080p to 569x320);
        # to_ndarray() interleaves it to (H, W, 3) RGB, a copy of the small picture only.
        image = converter.reformat(frame, width=target[1], height=target[0],
                                   format=_SCALED_FORMAT, interpolation=_SCALE_FILTER,
                                   threads=threads).to_ndarray()
    return upright(image, rotation) if rotation else image


def scaled_size(frame: av.VideoFrame, rotation: float,
                size: Optional[OutputSize]) -> Optional[Tuple[int, int]]:
    """``(height, width)`` to scale the stored picture of ``frame`` to for ``size``, or None to
    keep its size."""
    if size is None:
        return None
    turned = int(round(rotation / 90.0)) % 2 == 1  # stored sideways: displayed W x H
    height, width = (frame.width, frame.height) if turned else (frame.height, frame.width)
    target = size.target(height, width)
    if target == (height, width):
        return None
    return (target[1], target[0]) if turned else target
