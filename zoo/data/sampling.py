"""Which frames make a clip: ``clip_len`` frames, ``stride`` apart, from one window of the video.

A window spans ``(clip_len - 1) * stride + 1`` frames. Training takes a random window, validation
the centred one, testing ``num_segments`` windows spread evenly over the video. A video shorter than
the window starts its window at frame 0 and indices past the end are clamped to the last frame, so
the clip ends with the last frame repeated.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch


def window_span(clip_len: int, stride: int) -> int:
    """Number of frames a clip covers from its first to its last sampled frame."""
    if clip_len < 1 or stride < 1:
        raise ValueError(f"clip_len and stride must be >= 1, got {clip_len} and {stride}")
    return (clip_len - 1) * stride + 1


def _clip_at(start: int, num_frames: int, clip_len: int, stride: int) -> np.ndarray:
    indices = start + stride * np.arange(clip_len, dtype=np.int64)
    return np.minimum(indices, max(num_frames - 1, 0))


def train_indices(
    num_frames: int, clip_len: int, stride: int, generator: Optional[torch.Generator] = None
) -> np.ndarray:
    """A window at a uniformly random position.

    Args:
        num_frames: Frames in the video.
        clip_len: Frames per clip.
        stride: Step between sampled frames.
        generator: Torch RNG; None = torch's global one (seeded per data worker).

    Returns:
        int64 array ``(clip_len,)`` of frame indices.
    """
    slack = num_frames - window_span(clip_len, stride)
    start = int(torch.randint(0, slack + 1, (1,), generator=generator)) if slack > 0 else 0
    return _clip_at(start, num_frames, clip_len, stride)


def val_indices(num_frames: int, clip_len: int, stride: int) -> np.ndarray:
    """The centred window; returns int64 ``(clip_len,)``."""
    slack = num_frames - window_span(clip_len, stride)
    return _clip_at(max(slack, 0) // 2, num_frames, clip_len, stride)


def test_indices(num_frames: int, clip_len: int, stride: int, num_segments: int) -> np.ndarray:
    """``num_segments`` windows, each centred on one of ``num_segments`` equal parts of the video.

    With one segment this is the validation window. Windows may overlap on short videos.

    Returns:
        int64 array ``(num_segments, clip_len)``.
    """
    if num_segments < 1:
        raise ValueError(f"num_segments must be >= 1, got {num_segments}")
    span = window_span(clip_len, stride)
    slack = max(num_frames - span, 0)
    if num_segments == 1:
        starts = [slack // 2]
    else:
        centres = (np.arange(num_segments) + 0.5) * num_frames / num_segments
        starts = np.clip(np.round(centres - span / 2), 0, slack).astype(np.int64).tolist()
    return np.stack([_clip_at(int(s), num_frames, clip_len, stride) for s in starts])
