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
    DecoderLibraryError,
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
from .probes import stream_facts


def _decord(decord) -> DecodingLibrary:
    # decord's own error for broken files (DECORDError, an Exception of its own: not a
    # RuntimeError), the RuntimeError / ValueError of its bindings, and the file system's.
    from decord._ffi.base import DECORDError

    return DecodingLibrary("decord", "decord", (DECORDError, RuntimeError, ValueError, OSError))


# FFmpeg's names of the MPEG program and transport stream containers: decord 0.6 returned frame
# i + 12 for frame i there (MPEG-2 at 50 fps), or failed at their end (H.264).
_SHIFTED_CONTAINERS = {"mpeg", "mpegts"}


class DecordReader(VideoReader):
    """A video read with decord (optional: ``pip install decord``; unmaintained since 2021).

    decord 0.6 seeks to the wrong frame in streams with B-frames (H.264, HEVC, MPEG-4 Part 2: a
    neighbour 1-9 frames away, seen in MP4, MKV and AVI alike) and after a seek in AVI, so this
    reader never seeks: it reads frames one by one from the start (``next()``), continues forward
    between calls, and opens the file again to go back. Exact everywhere it opens, but a frame far
    into a long video costs the decode of everything before it: use ``pyav`` for speed. decord turns
    rotated videos upright by itself (display matrix), as the other readers do. The frame rate is
    PyAV's (decord's is the declared one), and so is the count where an MP4 edit list hides frames.

    Refused: MPEG program / transport streams (frames 12 late) and what decord cannot open but
    PyAV decodes (raw H.264/HEVC streams, AV1, GIF) with a :class:`DecoderLibraryError`; a file of
    several video streams (decord may read another than the main one) with a :class:`DecodeError`.

    Args:
        path: Video file path.
        num_frames_hint: The list's frame count, for PyAV's count where it needs one.
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
        facts = stream_facts(path)
        if facts.video_streams > 1:
            raise DecodeError(
                f"{path}: it has {facts.video_streams} video streams (a still image or cover art "
                "among them), and decord may read another than the main one: read it with "
                "CONFIG.DATA.DECODER auto or pyav", "open")
        if facts.container in _SHIFTED_CONTAINERS:
            raise DecoderLibraryError(
                f"{path} is an MPEG program or transport stream ({facts.container}), where decord "
                f"{self._library.version()} returns frames 12 later than asked (not a bad "
                "video): set CONFIG.DATA.DECODER auto or pyav")
        self._open()
        self._len = len(self._vr)
        if self._len <= 0:
            raise DecodeError(f"{path}: the video stream has no frames", "empty")
        # decord's rate is the declared one (wrong for variable-rate video and for an MP4
        # stream-copied to AVI), and it counts the frames an MP4 edit list hides (a cut made with
        # -c copy), repeating the last shown frame for them: PyAV's rate and count are the
        # frames shown (demuxing only).
        from .pyav import PyAVReader

        with PyAVReader(path, num_frames_hint=num_frames_hint) as video:
            self.fps = video.fps
            if facts.edit_list_hides:
                self._len = min(self._len, video.num_frames)

    def _open(self) -> None:
        try:
            with self._library.reading(self.path, "cannot open", open_kind):
                self._vr = self._decord.VideoReader(self.path, ctx=self._decord.cpu(0),
                                                    num_threads=self._threads)
        except DecodeError:
            self._refuse_if_pyav_reads()
            raise
        self._next = 0  # index of the frame next() returns

    def _refuse_if_pyav_reads(self) -> None:
        """decord cannot open the file: where PyAV decodes its first and last frames, the file
        is sound and decord lacks its codec or container (AV1, GIF, Ogg): a library's limit,
        which stops the job instead of passing every such video as broken."""
        from .probes import codec_if_decodable
        from .pyav import PyAVReader

        try:
            with PyAVReader(self.path) as video:
                last = video.num_frames - 1
        except DecodeError:
            return
        codec = codec_if_decodable(self.path, [0, last])
        if codec is not None:
            raise DecoderLibraryError(
                f"decord {self._library.version()} cannot open {self.path}, which PyAV decodes: "
                f"this decord cannot decode {codec} or read its container (not a bad video): set "
                "CONFIG.DATA.DECODER auto or pyav") from None

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
