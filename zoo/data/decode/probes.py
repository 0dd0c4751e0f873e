"""PyAV's probes of a file, for the readers built on other libraries (OpenCV, decord, torchcodec):
where OpenCV's frame-number seek is exact (:func:`probe_seek_count`), whether a file another
library fails on is sound (:func:`codec_if_decodable`), and the main stream's facts
(:mod:`zoo.data.decode.pyav_streams`). The first and the last are cached per file version: a
data-loader worker opens the same videos every epoch."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Dict, Optional, Sequence, TypeVar

from .base import DecodeError

if TYPE_CHECKING:
    from .pyav_streams import MainStreamFacts

T = TypeVar("T")

# The frame count where OpenCV's frame-number seek is exact, else None (probe_seek_count).
SEEK_COUNTS: Dict[tuple, Optional[int]] = {}
# Which video stream is the main one, its colours, fields and edits (main_stream_facts).
STREAM_FACTS: Dict[tuple, "MainStreamFacts"] = {}
_CACHE_MAX = 100_000


def probed(cache: Dict[tuple, T], path: str, probe: Callable[[str], T], unreadable: T) -> T:
    """``probe(path)`` (one of PyAV's probes), found once per file version (path, size, mtime) in
    ``cache``; ``unreadable`` where PyAV cannot read the file (the other reader then says what it
    can)."""
    from .pyav import PYAV

    stat = os.stat(path)
    key = (path, stat.st_size, stat.st_mtime_ns)
    if key not in cache:
        try:
            with PYAV.reading(path, "cannot open", "open"):
                found = probe(path)
        except DecodeError:
            found = unreadable
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = found
    return cache[key]


def stream_facts(path: str) -> "MainStreamFacts":
    """:func:`~zoo.data.decode.pyav_streams.main_stream_facts` of ``path``, cached (a file PyAV
    cannot open gets the facts of a plain single-stream video)."""
    from .pyav_streams import MainStreamFacts, main_stream_facts

    return probed(STREAM_FACTS, path, main_stream_facts, MainStreamFacts(True, False))


def probe_seek_count(path: str) -> Optional[int]:
    """The frame count of ``path`` where a frame-number seek by timestamp (as OpenCV's) finds
    frame ``i`` exactly, else None. Exact means: the container stores presentation timestamps,
    they are trustworthy, and they sit on a constant-rate grid. Read with PyAV, demuxing only (no
    decoding). An MP4/MOV whose edit list hides frames is not: OpenCV's frame count and frame
    numbers include the hidden ones. The count is the demuxer's (OpenCV's own is the duration
    from time 0 times the rate, too high for an MKV whose video starts later)."""
    from .pyav import PyAVReader

    with PyAVReader(path) as video:
        return video.exact_seek_count()


def codec_if_decodable(path: str, indices: Sequence[int]) -> Optional[str]:
    """The codec of ``path``'s main video stream (``"av1"``) when PyAV decodes its frames
    ``indices`` (what another reader that fails on the file is missing), else None (the file is
    broken there)."""
    from .pyav import PyAVReader

    try:
        with PyAVReader(path) as video:
            video.decode_array(list(indices))
            return video.codec_name
    except DecodeError:
        return None
