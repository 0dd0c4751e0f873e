"""The OpenCV reader (its FFmpeg backend).

All follow :class:`~zoo.data.decode.base.VideoReader`: frame ``i`` is the ``i``-th frame in
presentation order, uint8 RGB out, the same errors. Like the PyAV reader they need no torch
(``decode_array``); ``decode`` converts to a tensor.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

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
)
from .probes import SEEK_COUNTS, probed, stream_facts
from .threads import decoder_threads

# With OpenCV, needed frames closer than this are reached with grab(), not with a seek.
_CV_SEEK_GAP = 32
def _quiet_cv2():
    """cv2, with its own warnings and its FFmpeg's log off (a broken file is reported by us)."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    import cv2

    log = getattr(cv2.utils, "logging", None)
    if log is not None:  # OpenCV 5
        log.setLogLevel(log.LOG_LEVEL_ERROR)
    else:  # OpenCV 4 (4.8 to 4.12 checked) has only the older call; 2 is LOG_LEVEL_ERROR
        cv2.setLogLevel(2)
    return cv2


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def _opencv(cv2) -> DecodingLibrary:
    # A broken file makes OpenCV return False, or raise cv2.error; anything else is its API.
    return DecodingLibrary("OpenCV", "cv2", (cv2.error, OSError))


class OpenCVReader(VideoReader):
    """A video read with OpenCV's FFmpeg backend (``cv2.VideoCapture``).

    OpenCV seeks (``CAP_PROP_POS_FRAMES``) by converting a frame number to a timestamp, which is
    exact only where the container stores presentation timestamps on a constant-rate grid. Before
    its first seek the file is probed with PyAV (:func:`~zoo.data.decode.probes.probe_seek_count`,
    demuxing only); elsewhere (AVI, raw streams, variable frame rate, broken timestamps) frames are
    grabbed from the start. The frame count is PyAV's either way. A seek that stops short of its
    frame (a truncated file: OpenCV then returns the last frame it could decode) is an error.
    OpenCV turns rotated videos upright by itself (``CAP_PROP_ORIENTATION_AUTO``, on by default),
    as the other readers do.

    Args:
        path: Video file path.
        num_frames_hint: Frame count to use when OpenCV reports none.
        threads: Decoder threads; 0 = automatic (this process's share of the cores, see
            zoo/data/decode/threads.py), -1 = OpenCV's default (one per core).
    """

    def __init__(self, path: str, num_frames_hint: int = -1, threads: int = 0) -> None:
        cv2 = _quiet_cv2()
        self._cv2, self._library = cv2, _opencv(cv2)
        self.path = path
        self._threads = threads
        check_file(path)
        facts = stream_facts(path)
        if not facts.is_first:
            raise DecodeError(
                f"{path}: its first video stream is not its main one (a still image or cover art "
                "comes first), and OpenCV reads only the first: read it with CONFIG.DATA.DECODER "
                "auto or pyav", "open")
        if facts.bt2020:
            # OpenCV's FFmpeg backend converts to BGR with another matrix: an HLG clip came out
            # ~37 grey levels off on average (PyAV: 3.7), with no error.
            raise DecoderLibraryError(
                f"{path} has BT.2020 colours (HDR or wide-gamut video), which OpenCV "
                f"{self._library.version()} converts to RGB with another colour matrix (tens of "
                "grey levels off; not a bad video): set CONFIG.DATA.DECODER auto or pyav")
        if facts.interlaced and _major(cv2.__version__) >= 5:
            # OpenCV 5.0's FFmpeg backend turns interlaced frames near-black (mean grey level
            # 0-5 where PyAV's is ~127), with no error; 4.10 read them right.
            raise DecoderLibraryError(
                f"{path} is interlaced, and OpenCV {self._library.version()} returns interlaced "
                "frames near-black (not a bad video): set CONFIG.DATA.DECODER auto or pyav, or "
                "install opencv-python<5")
        self._cap = cap = self._open()
        width, height = cap.get(cv2.CAP_PROP_FRAME_WIDTH), cap.get(cv2.CAP_PROP_FRAME_HEIGHT)
        if width <= 0 or height <= 0:
            cap.release()
            raise DecodeError(f"{path}: no video stream", "no_video")
        fps = cap.get(cv2.CAP_PROP_FPS)
        self._fps = float(fps) if fps and fps > 0 else None
        self._count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        self._hint = num_frames_hint
        self._next = 0  # index of the frame the next grab() returns
        self._counted = False
        self._asked_pyav = False  # count and rate taken from PyAV (see _from_pyav)
        self._seekable: Optional[bool] = None  # probed before the first seek
        self._seek_count: Optional[int] = None  # PyAV's frame count, where seeks are exact
        self._read_any = False  # a frame of the file was decoded (its codec is supported)

    def _open(self):
        cv2 = self._cv2
        threads = decoder_threads(self._threads)  # 0 = OpenCV's default
        params = [cv2.CAP_PROP_N_THREADS, threads] if threads > 0 else []
        # (Some builds raise instead of returning an unopened capture.)
        with self._library.reading(self.path, "cannot open", "open"):
            cap = cv2.VideoCapture(self.path, cv2.CAP_FFMPEG, params)
        if not cap.isOpened():
            raise DecodeError(f"{self.path}: cannot open (not a video OpenCV can read)", "open")
        return cap

    def close(self) -> None:
        self._cap.release()

    def _can_seek(self) -> bool:
        """Whether OpenCV's frame-number seek is exact in this file (probed once, with PyAV)."""
        if self._seekable is None:
            from .probes import probe_seek_count

            self._seek_count = probed(SEEK_COUNTS, self.path, probe_seek_count, None)
            self._seekable = self._seek_count is not None
        return self._seekable

    @property
    def count_was_costly(self) -> bool:
        return self._counted

    @property
    def decodes_from_start(self) -> bool:
        return not self._can_seek()

    @property
    def num_frames(self) -> int:
        if self._count > 0 and not self._can_seek():
            self._from_pyav()
        elif self._count > 0 and self._seek_count:
            self._count = self._seek_count
        if self._count <= 0 and self._hint > 0:
            self._count = self._hint
        if self._count <= 0:
            self._rewind()
            count = 0
            while self._cap.grab():
                check_deadline()
                count += 1
            self._next = count  # the capture is at the end: the rewind opens the file again
            self._rewind()
            self._count, self._counted = count, True
            if count == 0:
                raise DecodeError(f"{self.path}: the video stream has no frames", "empty")
        return self._count

    @property
    def fps(self) -> Optional[float]:
        """OpenCV's rate where it can seek exactly (a constant-rate grid), else PyAV's (see
        :attr:`PyAVReader.fps`): OpenCV reports the declared rate, wrong for variable-rate WebM
        or an MP4 stream-copied to AVI."""
        if not self._can_seek():
            self._from_pyav()
        return self._fps

    def frame_times(self) -> Optional[np.ndarray]:
        """PyAV's (:meth:`PyAVReader.frame_times`, demuxing only): OpenCV's frame ``i`` is the
        ``i``-th frame a decode outputs, as PyAV's is."""
        from .pyav import PyAVReader

        with PyAVReader(self.path, num_frames_hint=self._hint) as video:
            return video.frame_times()

    def _from_pyav(self) -> None:
        """Where OpenCV cannot seek exactly, its count is duration x declared fps and its rate the
        declared one: take both from PyAV, once."""
        if self._asked_pyav:
            return
        self._asked_pyav = True
        from .pyav import PyAVReader

        with PyAVReader(self.path, num_frames_hint=self._hint) as video:
            if self._count > 0:
                self._count, self._counted = video.num_frames, video.count_was_costly
            self._fps = video.fps

    def _rewind(self) -> None:
        """Back to frame 0 (opening the file again: exact in every container)."""
        if self._next:
            self._cap.release()
            self._cap = self._open()
            self._next = 0

    def _go_to(self, index: int) -> None:
        """Place the capture so that the next grab() returns frame ``index`` or one before it."""
        if index >= self._next and index - self._next <= _CV_SEEK_GAP:
            return  # grab() through the gap
        if self._can_seek():
            cv2 = self._cv2
            self._cap.set(cv2.CAP_PROP_POS_FRAMES, index)  # seeks, then decodes forward
            landed = int(round(self._cap.get(cv2.CAP_PROP_POS_FRAMES)))
            if landed != index:  # it stops at the last frame it could decode, without an error
                self._next = landed
                raise DecodeError(
                    f"{self.path}: a seek to frame {index} stopped at frame {landed} although "
                    f"{self.num_frames} frames are claimed (corrupt or truncated video, or a wrong "
                    "num_frames in the list)",
                    "short" if index >= self.num_frames - END_SLACK else "decode")
            self._next = index
        elif index < self._next:
            self._rewind()

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        cv2 = self._cv2
        indices = check_indices(indices)
        rows = index_rows(indices)
        wanted = sorted(rows)
        out = None
        last_image = None
        last_read = -1  # index of the last frame actually grabbed
        with self._library.reading(self.path, "cannot decode"):
            for index in wanted:
                self._go_to(index)
                ok = True
                while self._next <= index:
                    check_deadline()
                    ok = self._cap.grab()
                    if not ok:
                        break
                    last_read = self._next
                    self._next += 1
                if not ok:
                    if last_image is not None and index <= last_read + END_SLACK:
                        out = fill_rows(out, len(indices), rows[index], last_image)
                        continue  # a frame count one or two too high: repeat the last frame
                    if not self._read_any:  # no frame of this file yet: a codec it lacks?
                        self._refuse_unsupported_codec(index)
                    # OpenCV cannot tell the end of the stream from a frame it cannot decode.
                    raise DecodeError(
                        f"{self.path}: frame {index} could not be read although "
                        f"{self.num_frames} frames are claimed (corrupt or truncated video, or a "
                        "wrong num_frames in the list)",
                        "short" if index >= self.num_frames - END_SLACK else "decode",
                    )
                ok, bgr = self._cap.retrieve()
                if not ok or bgr is None:
                    if not self._read_any:
                        self._refuse_unsupported_codec(index)
                    raise DecodeError(f"{self.path}: frame {index} cannot be decoded", "decode")
                self._read_any = True
                last_image = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                out = fill_rows(out, len(indices), rows[index], last_image)
        return out

    def _refuse_unsupported_codec(self, index: int) -> None:
        """Called when OpenCV has decoded no frame of the file and cannot read frame ``index``.
        Where PyAV decodes that frame, the file is sound and this OpenCV's FFmpeg has no decoder
        for its codec (opencv-python's wheels decode AV1, the codec of many YouTube downloads, only
        with hardware they do not use): a library's limit, which stops the job instead of
        passing every such video as broken."""
        from .probes import codec_if_decodable

        codec = codec_if_decodable(self.path, [index])
        if codec is not None:
            raise DecoderLibraryError(
                f"OpenCV {self._library.version()} reads no frame of {self.path} ({codec}), "
                f"which PyAV decodes: this OpenCV cannot decode {codec} (not a bad video): set "
                "CONFIG.DATA.DECODER auto or pyav, or re-encode the videos (zoo-reencode)")
