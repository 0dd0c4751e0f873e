"""The other video readers: OpenCV and decord (when installed).

All follow :class:`~zoo.data.decode_base.VideoReader`: frame ``i`` is the ``i``-th frame in
presentation order, uint8 RGB out, the same errors. Like the PyAV reader they need no torch
(``decode_array``); ``decode`` converts to a tensor.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from .decode_base import (
    END_SLACK,
    DecodeError,
    VideoReader,
    check_deadline,
    check_indices,
    one_line,
)

# With OpenCV, needed frames closer than this are reached with grab(), not with a seek.
_CV_SEEK_GAP = 32


def _rows(indices: List[int]) -> Dict[int, List[int]]:
    rows: Dict[int, List[int]] = {}
    for row, i in enumerate(indices):
        rows.setdefault(i, []).append(row)
    return rows


def _fill(out: Optional[np.ndarray], n: int, rows: List[int], image: np.ndarray) -> np.ndarray:
    if out is None:
        out = np.empty((n, *image.shape), np.uint8)
    elif image.shape != out.shape[1:]:
        import cv2

        image = cv2.resize(image, (out.shape[2], out.shape[1]), interpolation=cv2.INTER_AREA)
    for row in rows:
        out[row] = image
    return out


def _short(path: str, needed: int, last: int, claimed: int) -> DecodeError:
    return DecodeError(
        f"{path}: frame {needed} was needed but the video ends after frame {last} although "
        f"{claimed} frames are claimed (truncated file, or a wrong num_frames in the list)",
        "short",
    )


def _check_file(path: str) -> None:
    if not os.path.isfile(path):
        raise DecodeError(f"{path}: file does not exist", "missing")
    if os.path.getsize(path) == 0:
        raise DecodeError(f"{path}: file is empty (0 bytes)", "empty")


def _quiet_cv2():
    """cv2, with its own warnings and its FFmpeg's log off (a broken file is reported by us)."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    import cv2

    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
    return cv2


class OpenCVReader(VideoReader):
    """A video read with OpenCV's FFmpeg backend (``cv2.VideoCapture``).

    Args:
        path: Video file path.
        num_frames_hint: Frame count to use when OpenCV reports none.
        threads: Decoder threads; 0 = OpenCV's default.
    """

    def __init__(self, path: str, num_frames_hint: int = -1, threads: int = 0) -> None:
        cv2 = _quiet_cv2()
        self._cv2 = cv2
        self.path = path
        _check_file(path)
        params = [cv2.CAP_PROP_N_THREADS, threads] if threads > 0 else []
        try:
            cap = cv2.VideoCapture(path, cv2.CAP_FFMPEG, params)
        except Exception as e:  # some builds raise instead of returning an unopened capture
            raise DecodeError(f"{path}: cannot open ({one_line(e)})", "open") from None
        if not cap.isOpened():
            raise DecodeError(f"{path}: cannot open (not a video OpenCV can read)", "open")
        width, height = cap.get(cv2.CAP_PROP_FRAME_WIDTH), cap.get(cv2.CAP_PROP_FRAME_HEIGHT)
        if width <= 0 or height <= 0:
            cap.release()
            raise DecodeError(f"{path}: no video stream", "no_video")
        self._cap = cap
        fps = cap.get(cv2.CAP_PROP_FPS)
        self.fps = float(fps) if fps and fps > 0 else None
        self._count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        self._hint = num_frames_hint
        self._next = 0  # index of the frame the next grab() returns
        self._counted = False

    def close(self) -> None:
        self._cap.release()

    @property
    def count_was_costly(self) -> bool:
        return self._counted

    @property
    def num_frames(self) -> int:
        if self._count <= 0 and self._hint > 0:
            self._count = self._hint
        if self._count <= 0:
            self._cap.set(self._cv2.CAP_PROP_POS_FRAMES, 0)
            count = 0
            while self._cap.grab():
                check_deadline()
                count += 1
            self._cap.set(self._cv2.CAP_PROP_POS_FRAMES, 0)
            self._next, self._count, self._counted = 0, count, True
            if count == 0:
                raise DecodeError(f"{self.path}: the video stream has no frames", "empty")
        return self._count

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        cv2 = self._cv2
        indices = check_indices(indices)
        rows = _rows(indices)
        wanted = sorted(rows)
        out = None
        last_image = None
        last_read = -1  # index of the last frame actually grabbed
        try:
            for index in wanted:
                if index < self._next or index - self._next > _CV_SEEK_GAP:
                    self._cap.set(cv2.CAP_PROP_POS_FRAMES, index)  # seeks, then decodes forward
                    self._next = index
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
                        out = _fill(out, len(indices), rows[index], last_image)
                        continue  # a frame count one or two too high: repeat the last frame
                    # OpenCV cannot tell the end of the stream from a frame it cannot decode.
                    raise DecodeError(
                        f"{self.path}: frame {index} could not be read although "
                        f"{self.num_frames} frames are claimed (corrupt or truncated video, or a "
                        "wrong num_frames in the list)",
                        "short" if index >= self.num_frames - END_SLACK else "decode",
                    )
                ok, bgr = self._cap.retrieve()
                if not ok or bgr is None:
                    raise DecodeError(f"{self.path}: frame {index} cannot be decoded", "decode")
                last_image = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                out = _fill(out, len(indices), rows[index], last_image)
        except DecodeError:
            raise
        except Exception as e:
            raise DecodeError(f"{self.path}: cannot decode ({one_line(e)})", "decode") from None
        return out


class DecordReader(VideoReader):
    """A video read with decord (optional: ``pip install decord``; unmaintained since 2021).

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
        self.path = path
        _check_file(path)
        try:
            self._vr = decord.VideoReader(path, ctx=decord.cpu(0), num_threads=max(threads, 1))
        except Exception as e:
            kind = "no_video" if "video stream" in str(e).lower() else "open"
            raise DecodeError(f"{path}: cannot open ({one_line(e)})", kind) from None
        self._len = len(self._vr)
        if self._len <= 0:
            raise DecodeError(f"{path}: the video stream has no frames", "empty")
        fps = self._vr.get_avg_fps()
        self.fps = float(fps) if fps and fps > 0 else None

    def close(self) -> None:
        self._vr = None

    @property
    def num_frames(self) -> int:
        return self._len

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        indices = check_indices(indices)
        last = self._len - 1
        if max(indices) > last + END_SLACK:
            raise _short(self.path, max(indices), last, self._len)
        wanted = sorted(set(min(i, last) for i in indices))
        check_deadline()
        try:
            batch = self._vr.get_batch(wanted).asnumpy()
        except Exception as e:
            raise DecodeError(f"{self.path}: cannot decode ({one_line(e)})", "decode") from None
        check_deadline()
        position = {i: k for k, i in enumerate(wanted)}
        return batch[[position[min(i, last)] for i in indices]]
