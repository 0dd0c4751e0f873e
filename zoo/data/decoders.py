"""Decoding chosen frames of a video with PyAV.

Only the frames a clip needs are paid for: the reader seeks to the keyframe before the first needed
frame, stops after the last one, and converts to RGB only the frames that are kept. Frame ``i`` is
the one whose presentation time is ``start + i / fps`` (constant frame rate assumed, as in gluoncv
and PySlowFast); a needed index that falls in a timestamp gap or past the real end of the stream
gets the next decoded frame, or else the last one, so a list with a slightly wrong frame count still
loads.
"""

from __future__ import annotations

import os
from fractions import Fraction
from typing import Dict, List, Optional, Sequence

import av
import numpy as np
import torch
from av.video.reformatter import VideoReformatter

# Frames at least this large (pixels) are decoded with FFmpeg's own threads.
_THREADED_MIN_PIXELS = 256 * 256


class DecodeError(RuntimeError):
    """A video cannot be read: missing, unreadable, or without a video stream."""


class VideoFile:
    """An open video; use as a context manager.

    Args:
        path: Video file path.
        num_frames_hint: Frame count to trust when the container does not store one (e.g. the
            count from the annotation list); <= 0 = count by decoding the whole stream.

    Raises:
        DecodeError: The file is missing, unreadable, or has no video stream.
    """

    def __init__(self, path: str, num_frames_hint: int = -1) -> None:
        self.path = path
        if not os.path.isfile(path):
            raise DecodeError(f"{path}: file does not exist")
        try:
            self._container = av.open(path)
        except Exception as e:  # FFmpeg raises many error types for a broken file
            raise DecodeError(f"{path}: cannot open ({_one_line(e)})") from None
        if not self._container.streams.video:
            self._container.close()
            raise DecodeError(f"{path}: no video stream")
        self._stream = self._container.streams.video[0]
        context = self._stream.codec_context
        if (context.width or 0) * (context.height or 0) >= _THREADED_MIN_PIXELS:
            self._stream.thread_type = "AUTO"  # frame + slice threads for large frames
        else:
            # Starting decoder threads costs more than decoding a small frame (measured ~1 ms
            # per 64x64 clip), and data-loader workers already use the cores.
            context.thread_count = 1
        # One converter per video: frame.to_ndarray(format="rgb24") sets up a new conversion for
        # every frame, which took ~6 ms of a 32-frame 64x64 clip against ~1 ms when reused.
        self._to_rgb = VideoReformatter()
        self._num_frames: Optional[int] = None
        self._hint = num_frames_hint

    def __enter__(self) -> "VideoFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._container.close()

    @property
    def stream_has_count(self) -> bool:
        """Whether the container stores a frame count (else ``num_frames`` is a hint or a count)."""
        return int(self._stream.frames or 0) > 0

    @property
    def num_frames(self) -> int:
        """Frames in the stream: the container's count, else the hint, else a full decode count."""
        if self._num_frames is None:
            count = int(self._stream.frames or 0)
            if count <= 0 and self._hint > 0:
                count = self._hint
            if count <= 0:
                count = self._count_by_decoding()
            self._num_frames = count
        return self._num_frames

    def _count_by_decoding(self) -> int:
        try:
            self._container.seek(0, stream=self._stream)
            count = sum(1 for _ in self._container.decode(self._stream))
            self._container.seek(0, stream=self._stream)
        except Exception as e:
            raise DecodeError(f"{self.path}: cannot decode ({_one_line(e)})") from None
        if count == 0:
            raise DecodeError(f"{self.path}: the video stream has no frames")
        return count

    def _frame_rate(self) -> Optional[Fraction]:
        rate = self._stream.average_rate or self._stream.guessed_rate
        return Fraction(rate) if rate else None

    def decode(self, indices: Sequence[int]) -> torch.Tensor:
        """Decode the frames at ``indices`` (any order, repeats allowed).

        Args:
            indices: Frame indices, 0-based. Indices past the end get the last frame.

        Returns:
            uint8 tensor ``(len(indices), H, W, 3)``, RGB, in the order of ``indices``.

        Raises:
            DecodeError: Decoding fails or yields no frame.
        """
        indices = [int(i) for i in indices]
        if not indices:
            raise ValueError("decode() needs at least one frame index")
        if min(indices) < 0:
            raise ValueError(f"frame indices must be >= 0, got {min(indices)}")
        wanted = sorted(set(indices))
        try:
            found = self._decode_sorted(wanted)
        except DecodeError:
            raise
        except Exception as e:
            raise DecodeError(f"{self.path}: cannot decode ({_one_line(e)})") from None
        return torch.from_numpy(np.stack([found[i] for i in indices]))

    def _rgb(self, frame: av.VideoFrame) -> np.ndarray:
        return self._to_rgb.reformat(frame, format="rgb24").to_ndarray()

    def _decode_sorted(self, wanted: List[int]) -> Dict[int, np.ndarray]:
        stream = self._stream
        rate = self._frame_rate()
        time_base = stream.time_base
        start = stream.start_time or 0
        use_pts = rate is not None and time_base is not None
        if use_pts and wanted[0] > 0:
            # Aim half a frame early so that rounding never lands the seek after the frame.
            target = start + int((wanted[0] - 0.5) / (rate * time_base))
            self._container.seek(max(target, start), stream=stream, backward=True, any_frame=False)
        found: Dict[int, np.ndarray] = {}
        pos = 0  # next entry of ``wanted`` still to fill
        last_frame = None
        index = -1
        for frame in self._container.decode(stream):
            if use_pts and frame.pts is not None:
                index = round((frame.pts - start) * time_base * rate)
            else:
                index += 1  # no timestamp: count in decode order
            last_frame = frame
            if index < wanted[pos]:
                continue  # between the keyframe and the first needed frame: not converted
            image = self._rgb(frame)
            # A frame also fills needed indices it jumped over (a gap in the timestamps).
            while pos < len(wanted) and wanted[pos] <= index:
                found[wanted[pos]] = image
                pos += 1
            if pos == len(wanted):
                return found
        if last_frame is None:
            raise DecodeError(f"{self.path}: no frame could be decoded")
        # The stream ended early (frame count too high): repeat the last frame.
        image = self._rgb(last_frame)
        for i in wanted[pos:]:
            found[i] = image
        return found


def decode_frames(path: str, indices: Sequence[int]) -> torch.Tensor:
    """Decode the frames at ``indices`` of the video at ``path``.

    Args:
        path: Video file path.
        indices: 0-based frame indices; any order, repeats allowed.

    Returns:
        uint8 tensor ``(len(indices), H, W, 3)`` in RGB.

    Raises:
        DecodeError: One line naming the file and the reason.
    """
    with VideoFile(path) as video:
        return video.decode(indices)


def count_frames(path: str) -> int:
    """Number of frames of the video at ``path`` (container count, else a full decode count)."""
    with VideoFile(path) as video:
        return video.num_frames


def _one_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else error.__class__.__name__
