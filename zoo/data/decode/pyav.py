"""The default reader: PyAV (FFmpeg), paying only for the frames a clip needs.

* Seek to the keyframe before the first needed frame, decode forward, stop after the last one; a
  long gap between needed frames (the segments of a multi-view test) is crossed with another seek
  when that is cheaper than decoding through it.
* Convert to RGB only the frames that are kept, with one reused converter, straight into the output
  array (no per-frame list, no second copy). When the dataset asks for a smaller size
  (:meth:`PyAVReader.set_output_size`: the first resize of its transform), FFmpeg's scaler
  converts and resizes in one pass (bilinear, antialiased when shrinking, as torch's resize).
* Frames that no output needs and no other frame references (most B-frames) are not decoded at
  all: FFmpeg's ``skip_frame`` is set to ``NONREF`` for every packet whose frame is not wanted
  (timestamp-indexed decodes only; a frame counted from the start must be decoded to be counted),
  with the decoders that apply it to that packet's frame (H.264, HEVC, VP8/9, MPEG-1/2/4; not
  AV1's dav1d, which applies it frames later).
* Threaded decoding for large frames; small frames decode on one thread (thread start-up costs more
  than the decode, and data-loader workers already fill the cores).

Frame numbers: frame ``i`` is the ``i``-th picture a sequential decode outputs. Timestamps are
used to find it only where the container stores presentation timestamps (MP4/MOV, Matroska/WebM),
and only while they agree with the decoder's output; elsewhere the reader counts decoded frames:

* MP4/MOV with a constant frame rate (nearly all): frame ``i`` is ``round((pts - start) * fps)``,
  which needs no scan of the file.
* Variable frame rate, Matroska/WebM (no frame count stored, and muxers there are often sloppy):
  the packet timestamps are read once (demuxing only, no decoding) and frame ``i`` is the frame
  whose timestamp is the ``i``-th of them.
* Every decoded frame is checked: it must carry the next timestamp of the table (or the next grid
  slot) after the frame before it. When not (a B-frame stream whose timestamps are in decode order,
  a timestamp missing or not among the packets'), and in containers without presentation
  timestamps (AVI, raw H.264/HEVC elementary streams, MPEG-TS, ...), the reader decodes from the
  start of the file and counts frames: always exact, slower for frames far into a long file.
  A later request for frames further on continues that decode instead of starting again.

Rotation: a display matrix (phones) is honoured as players honour it: each frame is turned upright
(by multiples of 90 degrees), so a portrait video comes out portrait.

Needs PyAV and numpy only: ``decode_array`` returns a numpy array, and torch is imported by
``decode`` when it is first called (see :mod:`zoo.data.decode.base`).
"""

from __future__ import annotations

import bisect
from fractions import Fraction
from typing import Dict, Iterator, List, Optional, Sequence, Set

import av
import numpy as np

from .base import (
    END_SLACK,
    DecodeError,
    DecodingLibrary,
    OutputSize,
    VideoReader,
    check_deadline,
    check_file,
    check_indices,
    fill_rows,
    index_rows,
    remaining_time,
)
from .pyav_process import reformatter
from .pyav_rgb import upright_rgb
from .pyav_streams import (
    OPEN_OPTIONS,
    discarded_frames,
    index_step_rate,
    indexed_frames,
    keyframe_times,
    main_video_stream,
    span_rate,
)
from .threads import decoder_threads

__all__ = ["OPEN_OPTIONS", "PYAV", "PyAVReader", "main_video_stream"]

# Frames at least this large (pixels) are decoded on several threads (when threads is 0).
_THREADED_MIN_PIXELS = 256 * 256
# With the keyframe interval unknown, gaps up to this many frames are decoded through, not seeked.
_MIN_SEEK_GAP = 32
# A seek must skip at least this many frames to pay for flushing and refilling the decoder.
_MIN_SKIP = 8
# Decoders (FFmpeg's names) that apply ``skip_frame`` to the frame of the packet it is set for;
# checked frame by frame against decoding everything, threaded and not. dav1d (AV1) reads it
# frames later, so a skipped frame's neighbour came out in its place: other codecs decode all.
_SKIPS_BY_PACKET = {"h264", "hevc", "vp8", "vp9", "mpeg4", "mpeg2video", "mpeg1video"}
# A timestamp this far (in frames) off the constant-rate grid means variable frame rate.
_OFF_GRID = 0.35
# Containers (FFmpeg demuxer names) that store presentation timestamps; the rest are decoded from
# the start. AVI stores none (decode order only), raw streams no timestamps at all.
_PTS_FORMATS = {"mov", "mp4", "matroska", "webm"}


# What PyAV raises for a broken file: FFmpeg's errors (every ``av.error`` class), the file
# system's, and a truncated stream's end. Anything else it raises (TypeError, AttributeError, ...)
# is a call this PyAV does not support, and stops the job (DecoderLibraryError).
PYAV = DecodingLibrary("PyAV", "av", (av.error.FFmpegError, OSError, EOFError))


class _VariableRate(Exception):
    """Raised inside a constant-rate decode when timestamps leave the grid."""


class _SkippedTail(Exception):
    """The stream ended after skipped frames: the last frame, which the indices past the end get,
    may be one of them. Decoded again without skipping."""


class _Untrusted(Exception):
    """Raised when a decoded frame's timestamp disagrees with its position: count frames instead."""


class PyAVReader(VideoReader):
    """An open video read with PyAV; use as a context manager.

    Args:
        path: Video file path.
        num_frames_hint: Frame count to trust when the container stores none (e.g. the count from
            the annotation list); <= 0 = count the packets.
        threads: Decoder (and scaler) threads; 0 = automatic (this process's share of the cores
            for frames of 256x256 and more, else 1; see zoo/data/decode/threads.py), -1 =
            FFmpeg's choice (one per core).

    Raises:
        DecodeError: The file is missing, empty, cannot be opened, or has no video stream.
    """

    def __init__(self, path: str, num_frames_hint: int = -1, threads: int = 0) -> None:
        self.path = path
        check_file(path)
        self._threads = threads
        self._open()
        formats = set(self._container.format.name.split(","))
        # Where timestamps cannot say a frame's position, frames are counted from the start.
        self._sequential = not formats & _PTS_FORMATS
        self._matroska = "matroska" in formats
        self._avi = "avi" in formats
        self._stream_iter = None  # the running sequential decode, and the index it yields next
        self._next = 0
        self._ended = False  # the sequential decode reached the end of the stream
        self._last_frame = None
        stream = self._stream
        rate = stream.average_rate or stream.guessed_rate
        self._rate: Optional[Fraction] = Fraction(rate) if rate else None
        self._fps: Optional[float] = None  # measured on first use (see fps)
        self._start = stream.start_time or 0
        self._hint = num_frames_hint
        self._num_frames: Optional[int] = None
        self._table: Optional[List[int]] = None  # sorted packet timestamps, once read
        self._keys: Optional[List[int]] = None  # sorted keyframe timestamps of the index
        self._counted = False
        self._pristine = True  # nothing read yet: frame 0 needs no seek
        self._frames_decoded = 0  # for tests and benchmarks: frames the codec produced
        self._output_size: Optional[OutputSize] = None
        # Skip the frames no output needs and nothing references (tests and benchmarks turn it
        # off to compare); the indices sent with skipping allowed, per decode run.
        self.skip_unneeded = True
        self._skippable: Set[int] = set()

    def _open(self) -> None:
        """Open (or open again, to restart from the beginning) the container and its decoder."""
        with PYAV.reading(self.path, "cannot open", "open"):
            self._open_stream()

    def _open_stream(self) -> None:
        path, threads = self.path, self._threads
        self._container = av.open(path, timeout=remaining_time(), **OPEN_OPTIONS)
        if not self._container.streams.video:
            self._container.close()
            raise DecodeError(f"{path}: no video stream", "no_video")
        self._stream = stream = main_video_stream(self._container)
        context = stream.codec_context
        # FFmpeg's scaler runs on as many threads as the decoder (PyAV's default is one per core).
        big = (context.width or 0) * (context.height or 0) >= _THREADED_MIN_PIXELS
        count = decoder_threads(threads) if threads != 0 or big else 1  # 0 = FFmpeg picks
        self._scale_threads = count
        if count == 1:
            context.thread_count = 1
        else:
            stream.thread_type = "AUTO"  # frame + slice threads
            context.thread_count = count
        # One converter per thread, reused by every video: frame.to_ndarray(format="rgb24") sets
        # up a new conversion for every frame (~6 ms of a 32-frame 64x64 clip against ~1 ms when
        # reused), and setting one up costs 3-10 ms per clip (it keeps its set-up while the
        # frame size and format stay the same).
        self._to_rgb = reformatter()
        self._can_skip = context.name in _SKIPS_BY_PACKET
        # Frame number = round((pts - start) * scale), in integers: Fractions cost ~0.1 ms a frame.
        rate = stream.average_rate or stream.guessed_rate
        scale = Fraction(stream.time_base) * Fraction(rate) if rate and stream.time_base else 0
        self._grid = (scale.numerator, scale.denominator) if scale else None

    def close(self) -> None:
        self._container.close()

    def set_output_size(self, size: Optional[OutputSize]) -> bool:
        """Scale frames to ``size`` in the RGB conversion (FFmpeg's bilinear scaler, one pass)."""
        self._output_size = size
        return True

    @property
    def fps(self) -> Optional[float]:
        """Average frames per second, from the frames the file holds where its declared rate can
        be wrong: in Matroska/WebM the frames over the span of their timestamps (read once,
        demuxing only; a variable-rate WebM declares its encoder's 30 for 24 shown); in AVI one
        frame per step its index's frames all keep (an MP4 stream-copied to AVI declares 50 for
        25, its frames two ticks apart); elsewhere the stream's average rate (MP4/MOV: frames
        over duration). None when unknown."""
        if self._fps is None:
            self._fps = self._measured_fps() or (float(self._rate) if self._rate else 0.0)
        return self._fps or None

    def _measured_fps(self) -> Optional[float]:
        time_base = self._stream.time_base
        if self._matroska and time_base:
            return span_rate(self._timestamps(), time_base)
        if self._avi and time_base:
            return index_step_rate(self._stream)
        return None

    def frame_times(self) -> Optional[np.ndarray]:
        """The presentation time of each frame in seconds, as the container stores it: from the
        stream's start and rate where its frames sit on its base rate's grid (MP4/MOV at a
        constant rate, read at open), else from the packet timestamps (variable rate,
        Matroska/WebM; demuxing once). None where the container stores no presentation
        timestamps (AVI, MPEG-TS, raw streams) or they cannot be trusted."""
        time_base = self._stream.time_base
        if self._sequential or not time_base:
            return None
        base, rate = self._stream.base_rate, self._rate
        if not self._matroska and base and rate and abs(float(rate / Fraction(base)) - 1) < 0.01:
            first = float(self._start * Fraction(time_base))
            return first + np.arange(self.num_frames, dtype=np.float64) / float(rate)
        table = self._timestamps()
        if self._sequential:
            return None
        return np.asarray(table, dtype=np.float64) * float(time_base)

    @property
    def stream_has_count(self) -> bool:
        """Whether the container stores a frame count."""
        return int(self._stream.frames or 0) > 0

    @property
    def codec_name(self) -> str:
        """FFmpeg's name of the main video stream's codec (``"h264"``, ``"av1"``)."""
        codec = self._stream.codec_context.codec
        return getattr(codec, "canonical_name", None) or codec.name

    def exact_seek_count(self) -> Optional[int]:
        """The frame count where a frame-number seek by timestamp (as OpenCV's) finds frame ``i``
        exactly, else None (see :func:`zoo.data.decode.probes.probe_seek_count`). Demuxes the
        file's packets once where the container stores no table of them; decodes nothing."""
        if self._sequential or self._rate is None:
            return None
        if not self._matroska and discarded_frames(self._stream):
            return None
        table = self._timestamps()
        if self._sequential:
            return None
        scale = self._stream.time_base * self._rate
        on_grid = all(abs((t - self._start) * scale - i) <= _OFF_GRID for i, t in enumerate(table))
        return len(table) if on_grid else None

    @property
    def count_was_costly(self) -> bool:
        return self._counted

    @property
    def decodes_from_start(self) -> bool:
        return self._sequential

    @property
    def num_frames(self) -> int:
        """The container's count, else the hint, else the number of video packets."""
        if self._num_frames is None:
            count = int(self._stream.frames or 0)
            if count > 0 and not self._matroska:
                # An MP4/MOV edit list (a cut with ``ffmpeg -ss ... -c copy``, a phone's trim)
                # hides frames the sample table still counts; FFmpeg marks them and never outputs
                # them.
                count -= discarded_frames(self._stream)
            if self._avi:
                # AVI's header counts empty "drop" chunks too (a remux from MP4 with B-frames
                # claimed 600 frames for 300): its index, read at open, has the real ones when
                # the file has one. A file cut before its index (a recording that stopped) has
                # only the entries read at open: fewer than half the header's count, the
                # packets are counted instead.
                indexed = indexed_frames(self._stream)
                count = indexed if indexed and 2 * indexed >= count else 0
            if count <= 0 and self._hint > 0:
                count = self._hint
            if count <= 0:
                count = self._count_packets() if self._sequential else len(self._timestamps())
                self._counted = True
            self._num_frames = count
        return self._num_frames

    def _packets(self):
        """The video packets from the start of the file (demuxing only); read errors wrapped."""
        if not self._pristine:
            self._restart()
        self._pristine = False
        self._stream_iter = None  # the demuxer moves: a running decode cannot continue
        with PYAV.reading(self.path, "cannot read"):
            for packet in self._container.demux(self._stream):
                check_deadline()
                if packet.size and not packet.is_discard:  # (discard: hidden by an edit list)
                    yield packet

    def _count_packets(self) -> int:
        """The video packets from the first keyframe on: a decoder outputs no frame for those
        before it (an MPEG-TS recording cut mid-GOP had 20 of 80); all of them in a stream that
        flags no keyframe."""
        count = leading = 0
        for packet in self._packets():
            if count or packet.is_keyframe:
                count += 1
            else:
                leading += 1
        count = count or leading
        if not count:
            raise DecodeError(f"{self.path}: the video stream has no frames", "empty")
        return count

    def _timestamps(self) -> List[int]:
        """Presentation timestamps of every video packet, sorted (demuxing only, no decoding).

        Also finds timestamps that cannot be trusted (then frames are counted from the start): a
        packet without one, or a stream that reorders frames (B-frames) whose timestamps
        nevertheless rise in decode order (decode-order times written as presentation times).
        """
        if self._table is None:
            table = [packet.pts for packet in self._packets()]
            if not table:
                raise DecodeError(f"{self.path}: the video stream has no frames", "empty")
            if None in table:
                self._sequential = True
                table = [t for t in table if t is not None]
            elif self._stream.codec_context.has_b_frames and len(table) > 2 and all(
                    a < b for a, b in zip(table, table[1:])):
                self._sequential = True
            table.sort()
            self._table = table
        return self._table

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        indices = check_indices(indices)
        wanted = sorted(set(indices))
        sink = _Sink(len(indices), index_rows(indices))
        with PYAV.reading(self.path, "cannot decode"):
            if not self._sequential:
                try:
                    self._decode_skipping(wanted, sink)
                except _Untrusted:
                    self._sequential = True
            if self._sequential:
                self._decode_sequential(wanted, sink)
        return sink.out

    def _decode_skipping(self, wanted: List[int], sink: "_Sink") -> None:
        """:meth:`_decode_by_timestamps`, again without skipping if the end was reached after a
        skipped frame (rare: only clips that ask for frames past the end)."""
        try:
            self._decode_by_timestamps(wanted, sink)
        except _SkippedTail:
            skip, self.skip_unneeded = self.skip_unneeded, False
            try:
                self._decode_by_timestamps(wanted, sink)
            finally:
                self.skip_unneeded = skip

    def _decode_by_timestamps(self, wanted: List[int], sink: "_Sink") -> None:
        # The timestamp grid needs a frame rate and a count (from the container or the list);
        # otherwise, in Matroska, or when the timestamps leave the grid, the table.
        grid = self._table is None and self._rate is not None and not self._matroska and (
            self.stream_has_count or self._hint > 0)
        if grid:
            try:
                self._decode(wanted, sink, grid=True)
                return
            except _VariableRate:
                pass
        self._timestamps()
        if self._sequential:
            raise _Untrusted
        self._decode(wanted, sink, grid=False)

    def _position(self, pts: Optional[int], grid: bool) -> Optional[int]:
        """Frame number of a timestamp (on the grid, or in the table); None when it has none."""
        if pts is None:
            return None
        if not grid:
            index = bisect.bisect_left(self._table, pts)
            return index if index < len(self._table) and self._table[index] == pts else None
        num, den = self._grid
        scaled = (pts - self._start) * num  # the frame position times den
        index = (2 * scaled + den) // (2 * den)
        return index if abs(scaled - index * den) <= _OFF_GRID * den else None

    def _index(self, frame: av.VideoFrame, grid: bool, previous: int) -> int:
        """Frame number of a decoded frame from its timestamp, checked against the one before:
        it must be the next one, or the frames in between were allowed to be skipped."""
        index = self._position(frame.pts, grid)
        if index is not None and previous >= 0 and index != previous + 1 and not (
                index > previous and self._skippable.issuperset(range(previous + 1, index))):
            index = None  # repeated, out of order, or a gap that no skip explains
        if index is None:
            # Grid: off the grid or missing slots (variable rate); table: not a packet's timestamp.
            raise _VariableRate if grid else _Untrusted
        return index

    def _frames(self, wanted: Set[int], grid: bool) -> Iterator[av.VideoFrame]:
        """Decode from the demuxer's position, with frames outside ``wanted`` skipped where no
        other frame references them (FFmpeg's ``skip_frame``, set per packet)."""
        context = self._stream.codec_context
        skip = self.skip_unneeded and self._can_skip
        self._skippable = set()
        for packet in self._container.demux(self._stream):
            if skip and packet.size:
                index = self._position(packet.pts, grid)
                if index is None or index in wanted:
                    context.skip_frame = "DEFAULT"
                else:
                    context.skip_frame = "NONREF"
                    self._skippable.add(index)
            yield from packet.decode()  # the last, empty packet flushes the decoder
        if skip:
            context.skip_frame = "DEFAULT"

    def _restart(self) -> None:
        """Back to the start of the file: open it again (a seek to 0 is not exact everywhere)."""
        self._container.close()
        self._open()
        self._stream_iter, self._next, self._ended = None, 0, False

    def _decode_sequential(self, wanted: List[int], sink: "_Sink") -> None:
        """Fill ``sink`` counting frames from the start; a running decode continues when it can."""
        if self._stream_iter is None or wanted[0] < self._next:
            if not (self._ended and wanted[0] >= self._next):
                if not self._pristine:
                    self._restart()
                self._pristine = False
                self._stream_iter = iter(self._container.decode(self._stream))
                self._next, self._ended, self._last_frame = 0, False, None
        pos = 0
        if not self._ended:
            for frame in self._stream_iter:
                check_deadline()
                self._frames_decoded += 1
                index = self._next
                self._next += 1
                self._last_frame = frame
                if index < wanted[pos]:
                    continue
                image = self._rgb(frame)
                while pos < len(wanted) and wanted[pos] <= index:
                    sink.put(wanted[pos], image)
                    pos += 1
                if pos == len(wanted):
                    return
            self._ended = True
        self._finish(wanted[pos:], sink, self._last_frame, self._next - 1)

    def _seek_timestamp(self, index: int) -> int:
        """The timestamp a seek to frame ``index`` aims at."""
        if self._table is not None:
            return self._table[min(index, len(self._table) - 1)]
        # Aim half a frame early so that rounding never lands the seek after the frame.
        target = self._start + int((index - 0.5) / (self._rate * self._stream.time_base))
        return max(target, self._start)

    def _seek(self, index: int) -> None:
        self._container.seek(self._seek_timestamp(index), stream=self._stream, backward=True,
                             any_frame=False)

    def _keyframe_times(self) -> List[int]:
        """Sorted timestamps of the keyframes in the demuxer's index: in MP4/MOV its sample
        table, read at open (no reading here); empty where there is none to trust (Matroska's
        cues may list only some keyframes, and other formats are decoded from the start)."""
        if self._keys is None:
            self._keys = []
            if not self._matroska:
                self._keys = keyframe_times(self._stream)
        return self._keys

    def _seek_moves_on(self, pts: Optional[int], index: int) -> bool:
        """Whether a seek to frame ``index`` would land after the frame at ``pts`` just decoded.

        A seek lands on the last keyframe at or before its target. With one keyframe in 250
        frames, a gap between two clips' windows is mostly inside one keyframe interval, and a
        seek would only decode again from the keyframe already passed (four independent windows
        cost four decodes from frame 0 instead of one). Unknown (no index): assume it does.
        """
        keys = self._keyframe_times()
        if not keys or pts is None:
            return True
        target = self._seek_timestamp(index)
        landing = bisect.bisect_right(keys, target) - 1
        # Index timestamps are decode times (<= the keyframe's presentation time): a landing at
        # or before ``pts`` may still be a few frames after it, never enough to pay for a seek.
        return landing >= 0 and keys[landing] > pts

    def _decode(self, wanted: List[int], sink: "_Sink", grid: bool) -> None:
        """Fill ``sink`` with the frames at the sorted ``wanted`` indices."""
        pos = 0  # next entry of ``wanted`` still to fill
        current = -1  # index of the last decoded frame
        last_key = 0  # index of the last keyframe seen
        gop = 0  # longest keyframe interval seen
        last_frame = None
        wanted_set = set(wanted)
        while True:
            seeked = not (self._pristine and wanted[pos] == 0)
            if seeked:  # else the file is at its start: decode from there
                self._seek(wanted[pos])
            self._pristine = False
            self._stream_iter = None  # a seek ends any sequential decode
            previous = -1  # frame numbers are checked for continuity within one decode run
            for frame in self._frames(wanted_set, grid):
                check_deadline()
                self._frames_decoded += 1
                first = previous < 0
                index = self._index(frame, grid, previous)
                if frame.key_frame:
                    if previous >= 0:  # decoded through from the last keyframe: a true interval
                        gop = max(gop, index - last_key)
                    last_key = index
                previous = index
                current = index
                last_frame = frame
                if index < wanted[pos]:
                    continue  # between the keyframe and the needed frame: not converted
                if first and seeked and not frame.key_frame:
                    # A seek lands on a keyframe at or before the target; only frames shown before
                    # it (open GOP) may come first. Anything else: the timestamps mislead.
                    raise _Untrusted
                image = self._rgb(frame)
                while pos < len(wanted) and wanted[pos] <= index:
                    sink.put(wanted[pos], image)
                    pos += 1
                if pos == len(wanted):
                    return
                if (self._should_seek(index, wanted[pos], last_key, gop)
                        and self._seek_moves_on(frame.pts, wanted[pos])):
                    break  # cheaper to seek to the next keyframe than to decode through the gap
            else:
                if any(i > current for i in self._skippable):
                    raise _SkippedTail
                self._finish(wanted[pos:], sink, last_frame, current)
                return

    @staticmethod
    def _should_seek(index: int, target: int, last_key: int, gop: int) -> bool:
        """Whether seeking from frame ``index`` to ``target`` beats decoding through the gap."""
        if gop:  # keyframes at a known interval: a seek lands on the last one before the target
            landing = last_key + (target - last_key) // gop * gop
            return landing - index >= _MIN_SKIP
        # Interval unknown: it is at least index - last_key, so only a longer gap is worth it.
        return target - index > max(_MIN_SEEK_GAP, index - last_key)

    def _finish(self, missing: List[int], sink: "_Sink", last_frame, current: int) -> None:
        """The stream ended before ``missing``: repeat the last frame, or fail if far too short."""
        if last_frame is None:
            raise DecodeError(f"{self.path}: no frame could be decoded", "decode")
        if missing[-1] > current + END_SLACK:
            raise DecodeError(
                f"{self.path}: frame {missing[-1]} was needed but the stream ends after frame "
                f"{current} although {self.num_frames} frames are claimed (truncated file, or a "
                "wrong num_frames in the list)",
                "short",
            )
        image = self._rgb(last_frame)
        for i in missing:
            sink.put(i, image)

    def _rgb(self, frame: av.VideoFrame) -> np.ndarray:
        return upright_rgb(frame, self._to_rgb, self._output_size, self._scale_threads, self.path)


class _Sink:
    """The output array, filled row by row as frames arrive (allocated at the first frame)."""

    def __init__(self, length: int, rows: Dict[int, List[int]]) -> None:
        self.length = length
        self.rows = rows
        self.out: Optional[np.ndarray] = None

    def put(self, index: int, image: np.ndarray) -> None:
        # (A frame of another size, a resolution change mid-stream, is resized to the first's.)
        self.out = fill_rows(self.out, self.length, self.rows[index], image)
