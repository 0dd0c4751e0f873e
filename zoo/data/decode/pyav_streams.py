"""What PyAV's demuxer says about a video stream without decoding it: which stream a player shows,
its frame count and keyframes from the container's index, and its frame rate where the declared
one can be wrong. The PyAV reader (:mod:`zoo.data.decode.pyav`), OpenCV's probes and
``zoo-reencode`` use them.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import List, NamedTuple, Optional, Sequence

import av

# A badly encoded title must not make a video unreadable: PyAV before 19 raises on metadata that
# is not UTF-8 unless told to ignore it; 19 decodes it leniently and has no such argument.
OPEN_OPTIONS = {"metadata_errors": "ignore"} if int(av.__version__.split(".")[0]) < 19 else {}


def main_video_stream(container: "av.container.InputContainer") -> "av.VideoStream":
    """The video stream a player shows: FFmpeg's best one (``av_find_best_stream``), which prefers
    the default-flagged stream and a moving stream to a single picture (cover art, a thumbnail),
    wherever they sit in the file. The container must have a video stream."""
    return container.streams.best("video")


# FFmpeg's colour matrices of BT.2020 (AVCOL_SPC_BT2020_NCL, AVCOL_SPC_BT2020_CL): HDR10, HLG and
# other wide-gamut video.
BT2020_MATRICES = (9, 10)


# FFmpeg's field orders (AVFieldOrder) that are not interlaced: unknown, progressive.
_PROGRESSIVE_ORDERS = (0, 1)


class MainStreamFacts(NamedTuple):
    """What readers that pick their own stream, count frames or convert colours themselves
    (OpenCV, decord) must know of a file before reading it."""

    is_first: bool  # the first video stream is the main one (or there is at most one)
    bt2020: bool  # the main video stream declares a BT.2020 colour matrix (HDR10, an iPhone's HDR)
    interlaced: bool = False  # the main stream's fields are interlaced (TV, camcorder footage)
    video_streams: int = 1  # how many video streams (cover art counts)
    edit_list_hides: bool = False  # an MP4/MOV edit list hides frames of the main stream
    container: str = ""  # FFmpeg's name of the container format ("mpegts", "mov,mp4,...")


def main_stream_facts(path: str) -> MainStreamFacts:
    """:class:`MainStreamFacts` of ``path``; opens the file with PyAV once, reads no packet (one
    frame with PyAV before 18, for the field order)."""
    with av.open(path, **OPEN_OPTIONS) as container:
        videos = container.streams.video
        if not videos:
            return MainStreamFacts(True, False, video_streams=0)
        main = main_video_stream(container)
        context = main.codec_context
        return MainStreamFacts(main.index == videos[0].index,
                               context.colorspace in BT2020_MATRICES,
                               interlaced=_interlaced(container, main),
                               video_streams=len(videos),
                               edit_list_hides=discarded_frames(main) > 0,
                               container=container.format.name)


def _interlaced(container: "av.container.InputContainer", stream: "av.VideoStream") -> bool:
    """Whether ``stream``'s fields are interlaced: the field order FFmpeg's probe at open found
    (PyAV 18 and later), else whether its first frame says so (one frame decoded)."""
    order = getattr(stream.codec_context, "field_order", None)
    if order is not None:
        return int(order) not in _PROGRESSIVE_ORDERS
    # One decoder thread: a codec context whose frame threads started, freed later by the
    # garbage collector in the middle of another decode, was seen to deadlock there (PyAV 17).
    stream.codec_context.thread_count = 1
    frames = container.decode(stream)
    try:
        return bool(next(frames).interlaced_frame)
    except (av.error.FFmpegError, StopIteration):  # no frame decodes: the reader will say so
        return False
    finally:
        frames.close()


def indexed_frames(stream: "av.VideoStream") -> int:
    """Non-empty entries of the demuxer's index that are shown (no reading), 0 when it has
    none."""
    entries = stream.index_entries
    return sum(1 for e in entries if e.size > 0 and not e.is_discard) if entries else 0


def discarded_frames(stream: "av.VideoStream") -> int:
    """Entries of the demuxer's index that an edit list leaves out (no reading; ~1.5 ms for a
    5-minute video's 7,500 entries)."""
    entries = stream.index_entries
    return sum(1 for e in entries if e.is_discard) if entries else 0


def keyframe_times(stream: "av.VideoStream") -> List[int]:
    """Sorted timestamps of the keyframes in the demuxer's index (in MP4/MOV its sample table,
    read at open)."""
    return sorted(e.timestamp for e in stream.index_entries if e.is_keyframe)


def span_rate(timestamps: Sequence[int], time_base: Fraction) -> Optional[float]:
    """Frames per second as the frames over the span of their sorted ``timestamps``; None for
    fewer than two frames or no span."""
    span = (timestamps[-1] - timestamps[0]) * Fraction(time_base) if len(timestamps) > 1 else 0
    return (len(timestamps) - 1) / float(span) if span > 0 else None


def index_step_rate(stream: "av.VideoStream") -> Optional[float]:
    """Frames per second as one frame per step that every frame of the index keeps (AVI: an MP4
    stream-copied to AVI declares 50 for 25, its frames two ticks apart); None when that step is
    one tick (the declared rate then stands)."""
    stamps = sorted(e.timestamp for e in stream.index_entries if e.size > 0)
    step = functools.reduce(math.gcd, (b - a for a, b in zip(stamps, stamps[1:])), 0)
    return 1.0 / float(step * Fraction(stream.time_base)) if step > 1 else None
