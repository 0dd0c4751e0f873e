"""What every video reader shares: the reader contract, its errors, and the decode time limit.

A reader opens one video and hands back chosen frames as uint8 RGB. Frame ``i`` is the ``i``-th
frame in presentation order, for every reader, so the same indices give the same pictures whichever
decoder is configured (up to the codec's own rounding).

The readers do not need torch: ``decode_array`` returns a numpy array, and only ``decode`` (the
tensor the datasets use) imports torch, when it is first called. A process that only decodes
(``from zoo.data.decode.pyav import PyAVReader``) stays free of torch's ~500 MB of imports.

The time limit (:func:`time_limit`) has two layers, because no single one can stop everything:

* In the main thread of a POSIX process (a DataLoader worker, or the training process itself with
  ``NUM_WORKERS`` 0) a ``SIGALRM`` timer raises :class:`DecodeTimeout` at the limit. Python runs
  the handler between bytecodes, and a blocking system call inside FFmpeg (a read from a stalled
  mount or a pipe) returns early with EINTR, so a slow or stuck read, a long decode loop and a
  ``time.sleep`` are all cut off.
* Everywhere (other threads, Windows) the readers call :func:`check_deadline` once per decoded
  frame, and a decode that returns after the limit is counted as timed out anyway.

What neither layer can stop is a single C call that never returns and never makes a system call
(a codec stuck in a loop): nothing short of killing the process can. The loader's per-batch timeout
(``CONFIG.DATA.LOADER_TIMEOUT``) turns that case into a clear error instead of a silent hang.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ...utils.errors import UserError

if TYPE_CHECKING:
    import torch

# Why a video could not be read; the code is what the shared bad-video table stores (0 = fine).
BAD_KINDS = {
    "missing": 1,  # no such file or folder
    "empty": 2,  # zero bytes, or a frame folder without images
    "open": 3,  # the container cannot be opened: not a video, truncated header, ...
    "no_video": 4,  # a container without a video stream (audio only, subtitles, ...)
    "decode": 5,  # a frame that is needed cannot be decoded
    "short": 6,  # the stream ends well before the frame count its container (or list) claims
    "timeout": 7,  # opening + decoding took longer than CONFIG.DATA.DECODE_TIMEOUT
    "other": 8,  # anything else (the message says what)
}
KIND_NAMES = {code: name for name, code in BAD_KINDS.items()}


class DecodeError(UserError, RuntimeError):
    """A video cannot be read. The message is one line that names the file.

    Attributes:
        kind: One of :data:`BAD_KINDS` ("missing", "empty", "open", "no_video", "decode", "short",
            "timeout", "other").
    """

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind if kind in BAD_KINDS else "other"


class DecodeTimeout(DecodeError):
    """Opening and decoding a video took longer than the time limit."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="timeout")


class DecoderLibraryError(UserError, RuntimeError):
    """A decoding library failed in a way no broken file explains: a call its installed release
    does not have (``TypeError``, ``AttributeError``), a part of it that does not load
    (``ImportError``, a missing codec library). It is never counted as a bad video: it stops the
    job at the first video, with one line naming the library, its version and the call."""


# What a library raises when zoo calls it in a way its installed release does not support, or
# when a part of it cannot load: never a property of one file.
LIBRARY_API_ERRORS: Tuple[type, ...] = (TypeError, AttributeError, ImportError, NameError)


@dataclass(frozen=True)
class DecodingLibrary:
    """A library a reader calls, and which of its exceptions mean "this file is broken".

    Attributes:
        name: As users know it ("PyAV", "OpenCV").
        module: Its import name, for the version ("av", "cv2").
        file_errors: What it raises for a broken, truncated or unreadable file. Checked before
            :data:`LIBRARY_API_ERRORS`, so a library's own error class that also derives from one
            of those (PyAV's errors from FFmpeg) still means the file.
    """

    name: str
    module: str
    file_errors: Tuple[type, ...]

    def version(self) -> str:
        """The installed release (``"unknown"`` when the module has no ``__version__``)."""
        import importlib

        try:
            return str(getattr(importlib.import_module(self.module), "__version__", "unknown"))
        except ImportError:
            return "not importable"

    def failure(self, error: BaseException) -> DecoderLibraryError:
        """The :class:`DecoderLibraryError` for ``error``, naming the call that raised it."""
        return DecoderLibraryError(
            f"{self.name} {self.version()}: {_failed_call(error)} raised "
            f"{type(error).__name__}: {one_line(error)} - this {self.name} does not work with zoo "
            f"(an API change or a broken install, not a bad video): install a {self.name} release "
            "that zoo supports (README, Supported versions) or report it"
        )

    @contextmanager
    def reading(self, path: str, what: str, kind: Union[str, Callable[[str], str]] = "decode",
                reason: Optional[Callable[[BaseException], str]] = None) -> Iterator[None]:
        """Turn what the block raises into the reader contract's errors.

        A file error becomes ``DecodeError(f"{path}: {what} ({reason})", kind)`` (``kind`` may be
        a function of the reason), an API error becomes :class:`DecoderLibraryError`, and
        anything else (zoo's own errors included) passes unchanged.
        """
        try:
            yield
        except DecodeError:
            raise
        except self.file_errors as e:
            message = (reason or one_line)(e)
            raise DecodeError(f"{path}: {what} ({message})",
                              kind(message) if callable(kind) else kind) from None
        except LIBRARY_API_ERRORS as e:
            raise self.failure(e) from e


def open_kind(reason: str) -> str:
    """The bad-video kind of a failed open, from the library's message."""
    return "no_video" if "video stream" in reason.lower() else "open"


def _failed_call(error: BaseException) -> str:
    """The line of zoo's code that made the failed call, quoted, with its file and line."""
    import linecache

    where = None
    tb = error.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(_PACKAGE_DIR + os.sep):
            where = (filename, tb.tb_lineno)
        tb = tb.tb_next
    if where is None:
        return "a call"
    filename, lineno = where
    source = linecache.getline(filename, lineno).strip()
    short = os.path.relpath(filename, os.path.dirname(_PACKAGE_DIR))
    return f"`{source}` ({short}:{lineno})" if source else f"{short}:{lineno}"


# zoo's package folder: the frames of a traceback that are zoo's own code are under it.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class OutputSize:
    """The size a reader may scale frames to while it converts them to RGB (one pass, instead of a
    full-size conversion followed by a resize in the transform).

    The datasets ask for the first resize their transform would make anyway (see
    ``ClipDataset.output_size``); the transform then crops and resizes whatever size it gets, so a
    reader that ignores the request gives the same clips up to interpolation details.

    Attributes:
        short_side: > 0: scale so that the short side becomes this, keeping the aspect ratio; a
            frame whose short side is already this or less is left as it is (never enlarged).
        height: With ``width``, > 0: exactly this size, whatever the aspect ratio (gluoncv's
            ``KEEP_ASPECT_RATIO: False``); takes precedence over ``short_side``.
        width: See ``height``.
    """

    short_side: int = 0
    height: int = 0
    width: int = 0

    def target(self, height: int, width: int) -> Tuple[int, int]:
        """``(height, width)`` a frame of ``height`` x ``width`` (as displayed) is scaled to."""
        if self.height > 0 and self.width > 0:
            return self.height, self.width
        short = min(height, width)
        if self.short_side <= 0 or short <= self.short_side:
            return height, width
        # The long side rounded down, as torchvision's and PySlowFast's short-side resizes do.
        return (max(height * self.short_side // short, 1),
                max(width * self.short_side // short, 1))


class VideoReader:
    """The reader contract; subclasses register in ``zoo.data.decode.registry.DECODERS``.

    A reader is built as ``cls(path, num_frames_hint=-1, threads=0)`` and used as a context
    manager. Constructing it opens the file and raises :class:`DecodeError` when it cannot.

    Attributes:
        path: The file (or frame folder) read.
        fps: Average frames per second, or None when unknown (frame folders).
    """

    path: str
    fps: Optional[float] = None

    @property
    def num_frames(self) -> int:
        """Frames in the video (the container's count, else the hint, else counted)."""
        raise NotImplementedError

    @property
    def count_was_costly(self) -> bool:
        """True when ``num_frames`` had to be counted (worth caching per video by the caller)."""
        return False

    @property
    def decodes_from_start(self) -> bool:
        """True when this file's clips are decoded from its first frame (it has no timestamps
        the reader can seek by: AVI, MPEG-TS, raw streams), so a clip costs more the further
        into the file it lies."""
        return False

    def frame_times(self) -> Optional[np.ndarray]:
        """The presentation time of each frame in seconds, as the container stores it (in a file
        whose streams start at 0, what players and ``ffmpeg -ss`` count), where it stores them;
        None (the default) where frame ``i`` is taken to be shown at ``i / fps``. Time ranges of
        a list, prediction windows and ``CONFIG.DATA.TARGET_FPS`` use them: a variable frame
        rate, or a video stream that starts after 0 (behind an audio track), moves frames away
        from ``i / fps``."""
        return None

    def decode_array(self, indices: Sequence[int]) -> np.ndarray:
        """Decode the frames at ``indices`` (any order, repeats allowed); needs no torch.

        A reader implements this (or, for a reader written against the first contract, only
        :meth:`decode`).

        Args:
            indices: 0-based frame indices. Indices a few frames past the end get the last frame
                (frame counts are often off by one or two); far past the end is an error.

        Returns:
            uint8 array ``(len(indices), H, W, 3)``, RGB, in the order of ``indices``.

        Raises:
            DecodeError: A needed frame cannot be decoded, or the stream is far shorter than its
                claimed frame count.
        """
        if type(self).decode is VideoReader.decode:
            raise NotImplementedError(f"{type(self).__name__} implements neither decode_array "
                                      "nor decode")
        return self.decode(indices).numpy()

    def decode(self, indices: Sequence[int]) -> torch.Tensor:
        """:meth:`decode_array` as a uint8 tensor ``(len(indices), H, W, 3)`` sharing its memory."""
        return as_tensor(self.decode_array(indices))

    def set_output_size(self, size: Optional[OutputSize]) -> bool:
        """Ask for frames scaled to ``size`` while they are converted (None = as decoded).

        Returns:
            Whether this reader does it; a reader that does not (the default) returns frames at
            their decoded size, and the transform resizes them.
        """
        return False

    def close(self) -> None:
        """Release the file."""

    def __enter__(self) -> "VideoReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# How far (frames) past the real end a needed index may lie and still get the last frame.
END_SLACK = 4


def as_tensor(array: np.ndarray) -> torch.Tensor:
    """A numpy array as a torch tensor sharing its memory (torch is imported here, on first use)."""
    import torch

    return torch.from_numpy(array)


def check_file(path: str) -> None:
    """Raise a one-line :class:`DecodeError` when ``path`` is missing or empty (0 bytes)."""
    if not os.path.isfile(path):
        raise DecodeError(f"{path}: file does not exist", "missing")
    if os.path.getsize(path) == 0:
        raise DecodeError(f"{path}: file is empty (0 bytes)", "empty")


def check_indices(indices: Sequence[int]) -> list:
    """Validate and convert frame indices to a list of ints (shared by the readers)."""
    out = [int(i) for i in indices]
    if not out:
        raise ValueError("decode() needs at least one frame index")
    if min(out) < 0:
        raise ValueError(f"frame indices must be >= 0, got {min(out)}")
    return out


def upright(image: np.ndarray, ccw_degrees: float) -> np.ndarray:
    """Turn a decoded picture upright the way players do, from its display matrix.

    Args:
        image: ``(H, W, C)`` as stored in the stream.
        ccw_degrees: The display matrix's rotation, degrees counter-clockwise (FFmpeg's
            ``av_display_rotation_get``, PyAV's ``VideoFrame.rotation``); 0 = as stored. Multiples
            of 90 only (phones write 90, 180, 270); mirroring is not applied.

    Returns:
        The picture as a player shows it (``(W, H, C)`` for 90 and 270), contiguous.
    """
    k = int(round(ccw_degrees / 90.0)) % 4
    return np.ascontiguousarray(np.rot90(image, k)) if k else image


def index_rows(indices: Sequence[int]) -> Dict[int, List[int]]:
    """Frame index -> the output rows that want it (indices may repeat, in any order)."""
    rows: Dict[int, List[int]] = {}
    for row, i in enumerate(indices):
        rows.setdefault(i, []).append(row)
    return rows


def fill_rows(out: Optional[np.ndarray], n: int, rows: List[int], image: np.ndarray) -> np.ndarray:
    """Put ``image`` into ``rows`` of the ``n``-frame output ``out`` (created on first use),
    resizing a frame whose size differs from the first one (a resolution change mid-stream, or an
    extraction tool that changed size)."""
    if out is None:
        out = np.empty((n, *image.shape), np.uint8)
    elif image.shape != out.shape[1:]:
        import cv2

        image = cv2.resize(image, (out.shape[2], out.shape[1]), interpolation=cv2.INTER_AREA)
    for row in rows:
        out[row] = image
    return out


def one_line(error: BaseException) -> str:
    """The first line of an exception's message (or its class name when it has none)."""
    text = str(error).strip().splitlines()
    return text[0] if text else error.__class__.__name__


# ----------------------------------------------------------------------------- time limit

_state = threading.local()


def check_deadline() -> None:
    """Raise :class:`DecodeTimeout` when the innermost :func:`time_limit` of this thread expired.

    Readers call this once per decoded frame; it costs one clock read.
    """
    deadline = getattr(_state, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise DecodeTimeout(f"{getattr(_state, 'what', 'decode')}: took longer than the time limit")


def remaining_time() -> Optional[float]:
    """Seconds left before this thread's deadline (None when no limit is active)."""
    deadline = getattr(_state, "deadline", None)
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _alarm_available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise :class:`DecodeTimeout` from the block when it runs longer than ``seconds``.

    Args:
        seconds: The limit; <= 0 disables it.
        what: Names the work in the error message (usually the video path).

    Raises:
        DecodeTimeout: The block was interrupted at the limit, failed after the limit (an
            interrupted system call surfaces as the library's own error), or finished late.
    """
    if seconds <= 0:
        yield
        return
    start = time.monotonic()
    deadline = start + seconds
    outer = (getattr(_state, "deadline", None), getattr(_state, "what", None))
    _state.deadline, _state.what = deadline, what
    message = f"{what}: took longer than the {seconds:g} s time limit (CONFIG.DATA.DECODE_TIMEOUT)"
    alarm = _alarm_available()
    active = [True]
    if alarm:

        def on_alarm(signum: int, frame: object) -> None:
            if active[0]:  # a late, already-disarmed alarm must not raise elsewhere
                active[0] = False
                raise DecodeTimeout(message)

        old_handler = signal.signal(signal.SIGALRM, on_alarm)
        old_timer = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except DecodeTimeout:
        raise
    except Exception:
        if time.monotonic() >= deadline:
            raise DecodeTimeout(message) from None
        raise
    finally:
        if alarm:
            _disarm(old_handler, old_timer, start, active)
        _state.deadline, _state.what = outer
    if time.monotonic() > deadline:
        raise DecodeTimeout(message)


def _disarm(old_handler: object, old_timer: tuple, start: float, active: list) -> None:
    # The alarm may fire between the end of the block and this point: its exception is swallowed
    # here and the timer stopped again until it is certainly off.
    while True:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
            active[0] = False
            break
        except DecodeTimeout:
            continue
    signal.signal(signal.SIGALRM, old_handler)
    if old_timer[0] > 0:  # someone else's timer was running: give it back what is left of it
        left = old_timer[0] - (time.monotonic() - start)
        signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), old_timer[1])


class NotExact(DecodeError):
    """A reader cannot give this file's frames exactly (torchcodec on frames that share a timestamp,
    a container it gets wrong); ``auto`` then uses another reader."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="open")


def short_error(path: str, needed: int, last: int, claimed: int) -> DecodeError:
    """The error of a video that ends before frame ``needed`` although it claims ``claimed``."""
    return DecodeError(
        f"{path}: frame {needed} was needed but the video ends after frame {last} although "
        f"{claimed} frames are claimed (truncated file, or a wrong num_frames in the list)",
        "short",
    )
