"""The decord reader (optional: ``pip install decord``; unmaintained since 2021).

It follows :class:`~zoo.data.decode.base.VideoReader`: frame ``i`` is the ``i``-th frame in
presentation order, uint8 RGB out, the same errors; ``decode_array`` needs no torch.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import (
    END_SLACK,
    DecodeError,
    DecodingLibrary,
    VideoReader,
    check_deadline,
    check_file,
    check_indices,
    fill_rows,
    index_rows,
    open_kind,
    short_error,
)


def _decord(decord) -> DecodingLibrary:
    # decord's own error (DECORDError, a RuntimeError) for broken files, and the file system's.
    return DecodingLibrary("decord", "decord", (RuntimeError, ValueError, OSError))




class DecordReader(VideoReader):
    """A video read with decord (optional: ``pip install decord``; unmaintained since 2021).

    decord 0.6 seeks to the wrong frame in streams with B-frames (H.264, HEVC, MPEG-4 Part 2: a
    neighbour 1-9 frames away, seen in MP4, MKV and AVI alike) and after a seek in AVI, so this
    reader never seeks: it reads frames one by one from the start (``next()``), continues forward
    between calls, and opens the file again to go back. Exact everywhere it opens, but a frame far
    into a long video costs the decode of everything before it: use ``pyav`` for speed. decord turns
    rotated videos upright by itself (display matrix), as the other readers do. It cannot open raw
    H.264/HEVC streams (no duration): that is a :class:`DecodeError`.

    Args:
        path: Video file path.
        num_frames_hint: Unused (decord indexes every frame when it opens a file).
        threads: Decoder threads; 0 = 1.
    """

    def __init__(self, path: str, num_frames_hint: int = -1, threads: int = 0) -> None:
        try:
            import decord
        except ImportError:
            raise ImportError(
                "CONFIG.DATA.DECODER 'decord' needs the decord package: pip install decord "
                "(or use 'pyav', the default)"
            ) from None
        self._decord, self._library = decord, _decord(decord)
        self.path = path
        self._threads = max(threads, 1)
        check_file(path)
        self._open()
        self._len = len(self._vr)
        if self._len <= 0:
            raise DecodeError(f"{path}: the video stream has no frames", "empty")
        fps = self._vr.get_avg_fps()
        self.fps = float(fps) if fps and fps > 0 else None

    def _open(self) -> None:
        with self._library.reading(self.path, "cannot open", open_kind):
            self._vr = self._decord.VideoReader(self.path, ctx=self._decord.cpu(0),
                                                num_threads=self._threads)
        self._next = 0  # index of the frame next() returns

    def close(self) -> None:
        self._vr = None

    @property
    def num_frames(self) -> int:
        return self._len

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        indices = check_indices(indices)
        last = self._len - 1
        if max(indices) > last + END_SLACK:
            raise short_error(self.path, max(indices), last, self._len)
        rows = index_rows([min(i, last) for i in indices])
        wanted = sorted(rows)
        if wanted[0] < self._next:
            self._open()  # back to the start: decord's own seek is not exact
        out = None
        try:
            with self._library.reading(self.path, "cannot decode"):
                for index in wanted:
                    while self._next <= index:
                        check_deadline()
                        frame = self._vr.next()
                        self._next += 1
                    out = fill_rows(out, len(indices), rows[index], frame.asnumpy())
        except StopIteration:
            raise short_error(self.path, index, self._next - 1, self._len) from None
        return out
