"""A list's seconds as a video's frames: the ``start`` / ``end`` of a record (CSV lists, Kinetics
times) turned into the frames shown between them, by the presentation times the container stores
(:meth:`~zoo.data.decode.base.VideoReader.frame_times`), not by the average frame rate, which
puts a recording with a pause or a late-starting video stream seconds off."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .decode.base import DecodeError, VideoReader

# Seconds: a range boundary this close to a frame's time counts as that time (float rounding).
_TIME_EPS = 1e-6


def fit_times(times: np.ndarray, num_frames: int, fps: float) -> np.ndarray:
    """``times`` of ``num_frames`` frames: cut, or continued at ``fps`` where the count the dataset
    uses (a list's, or a few more than decode) differs from the reader's frames."""
    if len(times) >= num_frames:
        return times[:num_frames]
    last = times[-1] if len(times) else -1.0 / fps
    return np.concatenate([times, last + np.arange(1, num_frames - len(times) + 1) / fps])


def frame_range(video: VideoReader, num_frames: int, start: float, end: float, path: str,
                with_times: bool = False) -> Tuple[int, int, Optional[np.ndarray]]:
    """``(first, end, times)``: the ``[first, end)`` frames of ``video`` (``num_frames`` of them)
    shown from ``start`` to ``end`` seconds (each < 0 = the video's start / end; all frames
    without a range), and the frames' presentation times in seconds where the reader knows them
    and they are needed: for a range, or ``with_times`` (a target frame rate).

    Raises:
        DecodeError: The range starts after the video's last frame (a truncated download, or a
            file that is not the one the list means), or ends before its first frame shows (a
            video stream that starts late): never a clip of one frozen frame.
    """
    ranged = start >= 0 or end >= 0
    times = video.frame_times() if (ranged or with_times) and video.fps else None
    if times is not None:
        times = fit_times(times, num_frames, video.fps)
    if not ranged or not video.fps:
        return 0, num_frames, times
    shown = times if times is not None else np.arange(num_frames) / video.fps
    ends = float(shown[-1]) + 1.0 / video.fps  # when the last frame stops showing
    if start >= ends:
        raise DecodeError(
            f"{path}: the list's time range starts at {start:g} s, after the video's end at "
            f"{ends:.1f} s ({num_frames} frames at {video.fps:.3g} fps)", "short")
    if 0 < end <= float(shown[0]) + _TIME_EPS:
        raise DecodeError(
            f"{path}: the list's time range ends at {end:g} s, before the video's first frame "
            f"shows at {float(shown[0]):.1f} s (its video stream starts late)", "short")
    # The frame shown at the start; the frames shown before the end.
    first = int(np.searchsorted(shown, max(start, 0.0) + _TIME_EPS, "right")) - 1
    first = min(max(first, 0), num_frames - 1)
    last = (int(np.searchsorted(shown, end - _TIME_EPS, "left")) if end > 0 else num_frames)
    return first, min(max(last, first + 1), num_frames), times
