"""Windows of seconds along a video, for scoring (``zoo-predict --window``) or extracting features
(``zoo-extract-features --window``) a long video piece by piece."""

from __future__ import annotations

from typing import List, Tuple

from ..data.decode.base import DecodeError
from ..data.decode.registry import open_video


def video_seconds(path: str, decoder: str = "auto") -> float:
    """How long ``path`` plays: its frames over its average rate.

    Raises:
        DecodeError: It cannot be read, or its frame rate is unknown.
    """
    if decoder in ("frames", "image"):
        decoder = "auto"
    with open_video(path, decoder) as video:
        if not video.fps:
            raise DecodeError(f"{path}: its frame rate is unknown, so it cannot be cut into "
                              "windows of seconds; read it whole (no --window)", "other")
        return video.num_frames / video.fps


def windows(seconds: float, window: float, stride: float) -> List[Tuple[float, float]]:
    """``(start, end)`` seconds of the windows that cover a video of ``seconds``: one every
    ``stride`` seconds from 0 while it starts inside the video, each ``window`` long or cut at
    the video's end."""
    if window <= 0 or stride <= 0:
        raise ValueError(f"window and stride must be > 0 seconds, got {window} and {stride}")
    spans, start = [], 0.0
    while start < seconds or not spans:
        end = min(start + window, seconds)
        spans.append((round(start, 3), round(end, 3)))
        if end >= seconds:
            break
        start += stride
    return spans
