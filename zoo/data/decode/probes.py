"""PyAV's probes of a file (:mod:`zoo.data.decode.pyav_streams`), for the readers built on other
libraries (OpenCV, decord), cached per file version: a data-loader worker opens the same videos
every epoch."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Dict, Optional, TypeVar

from .base import DecodeError

if TYPE_CHECKING:
    from .pyav_streams import MainStreamFacts

T = TypeVar("T")

# The frame count where OpenCV's frame-number seek is exact, else None (pyav.probe_seek_count).
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
