"""The torchcodec reader: PyTorch's own FFmpeg-based decoder (``pip install torchcodec``).

torchcodec's exact seek mode scans the file's packets once when it opens it and then maps frame
``i`` to a timestamp, so it seeks straight to the keyframe before a needed frame. That is only as
good as the container's timestamps. Checked against a plain sequential decode (tests in
tests/test_torchcodec.py, torchcodec 0.17 with FFmpeg 5.1):

* exact on MP4/MOV (H.264 with B-frames, HEVC, 10-bit, variable frame rate), Matroska/WebM (H.264,
  VP8, VP9, odd sizes) and GIF;
* wrong on AVI with B-frames (which stores no presentation timestamps): most frames come back as a
  copy of frame ``i-1`` or ``i-2``, in both seek modes, and the last frames are missing; also wrong
  on MPEG-TS/PS. The approximate seek mode is wrong on HEVC and variable-rate MP4 as well.

So this reader uses the exact mode only, opens only the containers above (recognised by their
first bytes, not by the file name) and refuses any other file with one line that names a reader
that can read it. torchcodec imports torch, so it is imported when the first file is opened,
never when ``zoo.data.decode.registry`` is imported.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .base import (
    END_SLACK,
    LIBRARY_API_ERRORS,
    DecodeError,
    DecodingLibrary,
    NotExact,
    VideoReader,
    check_deadline,
    check_file,
    check_indices,
    one_line,
    open_kind,
)
from .containers import sniff_container
from .threads import decoder_threads

# Containers in which torchcodec's exact mode returned every frame right (see the module doc).
EXACT_CONTAINERS = ("mp4", "matroska", "gif")
# Containers in which it was seen to return wrong frames.
_WRONG_CONTAINERS = ("avi", "mpegts", "mpeg")
# Frames at least this large (pixels) are decoded with FFmpeg's own threads (when threads is 0),
# the same rule as the PyAV reader.
_THREADED_MIN_PIXELS = 256 * 256
# Frames decoded per call when a needed frame has to be reached by decoding through (see below).
_CHUNK = 16
# torchcodec's C++ errors start with "Class, /build/path/File.cpp:NN, ": not for the user.
_CPP_PREFIX = re.compile(r"^\S+, \S+\.cpp:\d+, ")
# FFmpeg's errors come back from torchcodec's C++ as RuntimeError / ValueError.
TORCHCODEC = DecodingLibrary("torchcodec", "torchcodec", (RuntimeError, ValueError, OSError))


def _reason(error: BaseException) -> str:
    """torchcodec's error as one line, without its C++ source location."""
    return _CPP_PREFIX.sub("", one_line(error))


def _import_torchcodec():
    """torchcodec's VideoDecoder, or one ImportError line saying what to install."""
    try:
        import torchcodec
        from torchcodec.decoders import VideoDecoder
    except ImportError:
        raise ImportError(
            "CONFIG.DATA.DECODER 'torchcodec' needs the torchcodec package: pip install "
            "torchcodec (and FFmpeg's libraries, e.g. apt-get install ffmpeg), or use 'auto'"
        ) from None
    except Exception as e:  # installed, but its FFmpeg libraries cannot be loaded
        raise _cannot_load(one_line(e)) from None
    # Newer torchcodec (0.17) imports without FFmpeg: when its libraries cannot be loaded (no
    # FFmpeg, or built for another torch) it sets ffmpeg_major_version to None and raises
    # RuntimeError at the first file instead. Older releases failed on import (above) and have no
    # such attribute or an int in it.
    if getattr(torchcodec, "ffmpeg_major_version", 0) is None:
        import torch

        raise _cannot_load(f"its libraries do not load with torch {torch.__version__}")
    return VideoDecoder


def _cannot_load(why: str) -> ImportError:
    return ImportError(
        f"torchcodec {TORCHCODEC.version()} is installed but cannot load FFmpeg ({why}): install "
        "FFmpeg's shared libraries (e.g. apt-get install ffmpeg) and the torchcodec release made "
        "for this torch, or use CONFIG.DATA.DECODER 'auto'")


def torchcodec_unusable() -> str:
    """Why the torchcodec reader cannot decode here, as one line; "" when it can."""
    try:
        _import_torchcodec()
    except ImportError as e:
        return str(e)
    return ""


class TorchCodecReader(VideoReader):
    """A video read with torchcodec's ``VideoDecoder`` in its exact seek mode.

    Args:
        path: Video file path (MP4/MOV, MKV/WebM or GIF; others are refused, see the module doc).
        num_frames_hint: Unused (torchcodec counts the frames when it opens the file).
        threads: Decoder threads; 0 = automatic (this process's share of the cores for frames of
            256x256 and more, else 1; see zoo/data/decode/threads.py), -1 = FFmpeg's choice.

    Raises:
        DecodeError: The file is missing, empty, cannot be opened, has no video stream, or is in a
            container torchcodec cannot index exactly.
    """

    def __init__(self, path: str, num_frames_hint: int = -1, threads: int = 0) -> None:
        self.path = path
        check_file(path)
        container = sniff_container(path)
        if container not in EXACT_CONTAINERS:
            why = ("returns neighbouring frames for" if container in _WRONG_CONTAINERS
                   else "is not checked to find frames exactly in")
            raise NotExact(
                f"{path}: torchcodec {why} {container.upper() or 'extension-less'} files; use "
                "CONFIG.DATA.DECODER auto, pyav or opencv for them")
        decoder_class = _import_torchcodec()
        decoder = self._open(decoder_class, 1 if threads == 0 else decoder_threads(threads))
        meta = decoder.metadata
        if threads == 0 and (meta.width or 0) * (meta.height or 0) >= _THREADED_MIN_PIXELS:
            count = decoder_threads(0)  # this process's share of the cores
            if count > 1:
                decoder = self._open(decoder_class, count)
        self._decoder = decoder
        self._count = int(meta.num_frames or 0)
        if self._count <= 0:
            raise DecodeError(f"{path}: the video stream has no frames", "empty")
        fps = meta.average_fps
        self.fps = float(fps) if fps and fps > 0 else None
        self._keyframes: Optional[List[int]] = None

    def _open(self, decoder_class, threads: int):
        check_deadline()
        # (A torchcodec that cannot load FFmpeg was refused by _import_torchcodec already.)
        with TORCHCODEC.reading(self.path, "cannot open", open_kind, _reason):
            return decoder_class(self.path, seek_mode="exact", dimension_order="NHWC",
                                 num_ffmpeg_threads=threads)

    def close(self) -> None:
        self._decoder = None

    @property
    def num_frames(self) -> int:
        """Frames counted from the packets when the file was opened (not the header's claim)."""
        return self._count

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        indices = check_indices(indices)
        last = self._count - 1
        if max(indices) > last + END_SLACK:
            raise DecodeError(
                f"{self.path}: frame {max(indices)} was needed but the video has only "
                f"{self._count} frames (a wrong num_frames in the list, or a truncated file)",
                "short")
        wanted = sorted(set(min(i, last) for i in indices))
        check_deadline()
        try:
            frames = self._decoder.get_frames_at(wanted)
            batch, pts = frames.data.numpy(), frames.pts_seconds.tolist()
        except DecodeError:  # the time limit
            raise
        except LIBRARY_API_ERRORS as e:
            raise TORCHCODEC.failure(e) from e
        except TORCHCODEC.file_errors:
            # Seen on open-GOP H.264: a seek into the last GOP fails although decoding through
            # to it works, so the frames are reached from an earlier keyframe instead.
            try:
                batch, pts = self._decode_through(wanted)
            except DecodeError as e:
                from .probes import codec_if_decodable

                if e.kind != "timeout" and codec_if_decodable(self.path, wanted):
                    raise NotExact(
                        f"{self.path}: torchcodec cannot decode frames {wanted[0]}-{wanted[-1]}, "
                        "which PyAV decodes (a torchcodec limit, e.g. a size change mid-stream): "
                        "use CONFIG.DATA.DECODER auto or pyav for this file (torchcodec said: "
                        f"{str(e).split(': ', 1)[-1]})") from None
                raise
        check_deadline()
        if any(b <= a for a, b in zip(pts, pts[1:])):
            # Frames that share a timestamp (a broken mux) cannot be told apart by it: torchcodec
            # then hands back one of them for all, silently.
            raise NotExact(
                f"{self.path}: frames {wanted[0]}-{wanted[-1]} do not have increasing timestamps, "
                "so torchcodec cannot tell them apart; use CONFIG.DATA.DECODER auto, pyav or "
                "opencv for this file")
        position = {i: k for k, i in enumerate(wanted)}
        return batch[[position[min(i, last)] for i in indices]]

    def _decode_through(self, wanted: List[int]) -> Tuple[np.ndarray, List[float]]:
        """The frames at the sorted ``wanted`` indices, decoded forward from an earlier keyframe,
        and their timestamps (seconds)."""
        if self._keyframes is None:
            self._keyframes = [int(k) for k in self._decoder._get_key_frame_indices()] or [0]
        earlier = [k for k in self._keyframes if k < wanted[0]]
        start = earlier[-2] if len(earlier) > 1 else 0  # before the GOP the seek landed in
        rows: Dict[int, int] = {i: k for k, i in enumerate(wanted)}
        out: Optional[np.ndarray] = None
        pts = [0.0] * len(wanted)
        with TORCHCODEC.reading(self.path, f"cannot decode frames {wanted[0]}-{wanted[-1]}",
                                reason=_reason):
            for first in range(start, wanted[-1] + 1, _CHUNK):
                check_deadline()
                stop = min(first + _CHUNK, wanted[-1] + 1)
                # Every chunk is decoded, even one with no needed frame: a request for the frame
                # right after the last decoded one continues the decode, anything else seeks.
                frames = self._decoder.get_frames_in_range(first, stop)
                chunk, seconds = frames.data.numpy(), frames.pts_seconds.tolist()
                if out is None:
                    out = np.empty((len(wanted), *chunk.shape[1:]), np.uint8)
                for i in range(first, stop):
                    if i in rows:
                        out[rows[i]], pts[rows[i]] = chunk[i - first], seconds[i - first]
        return out, pts
