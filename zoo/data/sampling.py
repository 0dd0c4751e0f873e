"""Which frames make a clip, for the three sampling schemes of ``CONFIG.DATA.SAMPLING``.

* ``"dense"``: ``clip_len`` frames, ``stride`` apart, from one window of ``(clip_len - 1) * stride
  + 1`` frames (SlowFast, I3D, R(2+1)D). Training takes a random window, validation the centred
  one, testing ``num_views`` windows spread evenly over the video.
* ``"tsn"``: the video is cut into ``num_segment`` equal segments and each gives a snippet of
  ``clip_len`` frames ``stride`` apart (TSN); the clip has ``num_segment * clip_len`` frames.
  Training places each snippet at random in its segment, validation in the middle, and test view
  ``v`` of ``V`` at ``(v + 0.5) / V`` of every segment.
* ``"uniform"``: ``clip_len`` frames, one from each of ``clip_len`` equal segments (TSN with
  one-frame snippets; MMAction2's UniformSample).

Frame rates: the strides count in the video's own frames, unless ``CONFIG.DATA.TARGET_FPS`` names
a rate: then the indices are drawn on the video's timeline at that rate and mapped back to its own
frames (:func:`on_timeline`, :func:`to_source`), so a clip spans the same seconds whatever the
video's rate.

Short videos: a dense window longer than the video is squeezed onto it (``clip_len`` frames spread
evenly from the first to the last frame, repeating frames as needed) rather than ending in a frozen
run of the last frame; segment schemes on a video with fewer frames than segments repeat frames in
order. Every function returns int64 indices in ``[0, num_frames)``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

SCHEMES = ("dense", "tsn", "uniform")


def window_span(clip_len: int, stride: int) -> int:
    """Number of frames a clip covers from its first to its last sampled frame."""
    if clip_len < 1 or stride < 1:
        raise ValueError(f"clip_len and stride must be >= 1, got {clip_len} and {stride}")
    return (clip_len - 1) * stride + 1


def frames_per_clip(clip_len: int, scheme: str, num_segment: int = 1) -> int:
    """Length ``T`` of the clips a scheme produces."""
    return clip_len * num_segment if scheme == "tsn" else clip_len


def on_timeline(num_frames: int, fps: Optional[float], target_fps: float) -> Tuple[int, float]:
    """The length of a video on a ``target_fps`` timeline, and the video's frames per step of it.

    Args:
        num_frames: The video's frames.
        fps: Its frame rate; None or 0 = unknown (frame folders), which leaves it as it is.
        target_fps: Rate of the timeline; 0 = the video's own frames.

    Returns:
        ``(frames on the timeline, scale)``: the indices sampled on the timeline are turned into
        the video's by :func:`to_source` with ``scale`` (1.0 = the same frames).
    """
    if target_fps <= 0 or not fps or fps <= 0:
        return num_frames, 1.0
    scale = float(fps) / float(target_fps)
    return max(1, int(np.floor(num_frames / scale + 0.5))), scale


def to_source(indices: np.ndarray, scale: float, num_frames: int) -> np.ndarray:
    """Indices on a :func:`on_timeline` timeline -> the nearest of the video's ``num_frames``
    frames (a video slower than the timeline repeats frames)."""
    if scale == 1.0:
        return indices
    return np.minimum(np.floor(indices * scale + 0.5), num_frames - 1).astype(np.int64)


def uniform(times: np.ndarray) -> bool:
    """Whether frames shown at ``times`` (seconds, sorted) sit a constant step apart, to within a
    quarter of a step (timestamps rounded to a millisecond by Matroska stay uniform)."""
    if len(times) < 3:
        return True
    steps = np.diff(times)
    step = float(np.median(steps))
    return step > 0 and float(np.abs(steps - step).max()) <= 0.25 * step


def on_times(times: np.ndarray, target_fps: float) -> Tuple[int, np.ndarray]:
    """:func:`on_timeline` for frames shown at irregular ``times`` (seconds, sorted; a variable
    frame rate): the length of their span on a ``target_fps`` timeline, and for each step of it
    the frame shown at that time, as a player shows it (a pause in the video repeats the frame
    before it).

    Returns:
        ``(frames on the timeline, frame of each step)``: a step index ``k`` is frame
        ``steps[k]`` of ``times``.
    """
    times = np.asarray(times, dtype=np.float64)
    if len(times) < 2:
        return 1, np.zeros(1, dtype=np.int64)
    last = float(np.median(np.diff(times)))  # the last frame shows for a typical step
    length = max(1, int(np.floor((times[-1] + last - times[0]) * target_fps + 0.5)))
    at = times[0] + np.arange(length, dtype=np.float64) / target_fps
    shown = np.searchsorted(times, at + 1e-6, "right") - 1  # (1 µs: float rounding)
    return length, np.clip(shown, 0, len(times) - 1).astype(np.int64)


def _squeezed(num_frames: int, clip_len: int) -> np.ndarray:
    """``clip_len`` indices spread evenly from 0 to ``num_frames - 1`` (a video shorter than the
    window)."""
    return np.round(np.linspace(0, max(num_frames - 1, 0), clip_len)).astype(np.int64)


def _window(start: int, num_frames: int, clip_len: int, stride: int) -> np.ndarray:
    if num_frames < window_span(clip_len, stride):
        return _squeezed(num_frames, clip_len)
    return start + stride * np.arange(clip_len, dtype=np.int64)


def train_indices(
    num_frames: int, clip_len: int, stride: int, generator: Optional[torch.Generator] = None
) -> np.ndarray:
    """A dense window at a uniformly random position.

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
    return _window(start, num_frames, clip_len, stride)


def val_indices(num_frames: int, clip_len: int, stride: int) -> np.ndarray:
    """The centred dense window; returns int64 ``(clip_len,)``."""
    slack = num_frames - window_span(clip_len, stride)
    return _window(max(slack, 0) // 2, num_frames, clip_len, stride)


def test_indices(num_frames: int, clip_len: int, stride: int, num_segments: int) -> np.ndarray:
    """``num_segments`` dense windows whose starts are spaced evenly from the first frame to the
    last start where a window fits, rounded to frames: window k of K starts at
    ``round(k * (num_frames - span) / (K - 1))``, the first at frame 0 and the last ending on the
    last frame.

    Neither MMAction2's nor PySlowFast's default: MMAction2's ``SampleFrames`` (test mode)
    centres clip k in the k-th of K equal segments, ``int(avg * (k + 0.5))`` with
    ``avg = (num_frames - clip_len * stride + 1) / K``; PySlowFast starts view k at
    ``delta * k / K`` (``delta = num_frames - span``), and its ``USE_OFFSET_SAMPLING`` at
    ``k * floor(delta / (K - 1))``. For 100 frames, 16 x 2 and K = 2 the starts are [0, 69]
    here, [17, 51] in MMAction2 and [0, 34] in PySlowFast.

    With one segment this is the validation window (the centred one). Windows overlap on short
    videos; on a video no longer than one window every window is the same frames spread over
    ``clip_len``.

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
        starts = np.round(np.arange(num_segments) * (slack / (num_segments - 1)))
        starts = starts.astype(np.int64).tolist()
    return np.stack([_window(int(s), num_frames, clip_len, stride) for s in starts])


def segment_indices(
    num_frames: int,
    num_segment: int,
    snippet_len: int,
    stride: int,
    positions: np.ndarray,
) -> np.ndarray:
    """One snippet per segment, each placed at ``positions[k]`` (0..1) of its free room.

    Args:
        num_frames: Frames in the video.
        num_segment: Equal segments the video is cut into.
        snippet_len: Frames per snippet.
        stride: Step between a snippet's frames.
        positions: ``(num_segment,)`` floats in [0, 1]: 0 = snippet at the segment's start,
            1 = as late as it fits.

    Returns:
        int64 ``(num_segment * snippet_len,)``, segment-major.
    """
    span = window_span(snippet_len, stride)
    length = num_frames / num_segment
    starts = np.arange(num_segment) * length + np.maximum(length - span, 0) * positions
    offsets = stride * np.arange(snippet_len)
    indices = np.floor(starts)[:, None] + offsets[None, :]
    return np.clip(indices, 0, max(num_frames - 1, 0)).astype(np.int64).reshape(-1)


def clip_indices(
    num_frames: int,
    clip_len: int,
    stride: int,
    scheme: str = "dense",
    num_segment: int = 1,
    train: bool = False,
    generator: Optional[torch.Generator] = None,
) -> np.ndarray:
    """The frames of one training (random) or validation (deterministic) clip.

    Args:
        num_frames: Frames in the video.
        clip_len: Frames per clip ("dense", "uniform") or per snippet ("tsn").
        stride: Step between frames of a window or snippet (unused by "uniform").
        scheme: "dense", "tsn" or "uniform".
        num_segment: Segments for "tsn".
        train: Random placement (True) or the centred one (False).
        generator: Torch RNG for the random placement.

    Returns:
        int64 ``(T,)`` with ``T = frames_per_clip(clip_len, scheme, num_segment)``.
    """
    if scheme == "dense":
        if train:
            return train_indices(num_frames, clip_len, stride, generator)
        return val_indices(num_frames, clip_len, stride)
    segments, snippet, step = _segment_shape(clip_len, stride, scheme, num_segment)
    if train:
        positions = torch.rand(segments, generator=generator, dtype=torch.float64).numpy()
    else:
        positions = np.full(segments, 0.5)
    return segment_indices(num_frames, segments, snippet, step, positions)


def test_clip_indices(
    num_frames: int,
    clip_len: int,
    stride: int,
    num_views: int,
    scheme: str = "dense",
    num_segment: int = 1,
) -> np.ndarray:
    """``num_views`` deterministic clips spread over the video, for multi-view testing.

    Returns:
        int64 ``(num_views, T)``; with one view this is the validation clip.
    """
    if num_views < 1:
        raise ValueError(f"num_views must be >= 1, got {num_views}")
    if scheme == "dense":
        return test_indices(num_frames, clip_len, stride, num_views)
    segments, snippet, step = _segment_shape(clip_len, stride, scheme, num_segment)
    views = [np.full(segments, (v + 0.5) / num_views) for v in range(num_views)]
    return np.stack([segment_indices(num_frames, segments, snippet, step, p) for p in views])


def _segment_shape(clip_len: int, stride: int, scheme: str, num_segment: int) -> tuple:
    """(segments, snippet length, stride) of the segment schemes."""
    if scheme == "tsn":
        if num_segment < 1:
            raise ValueError(f"num_segment must be >= 1, got {num_segment}")
        return num_segment, clip_len, stride
    if scheme == "uniform":
        return clip_len, 1, 1
    raise ValueError(f"sampling scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
