"""Decoders behind one interface, chosen with ``CONFIG.DATA.DECODER``.

``DECODERS`` maps a name to a reader class (see :class:`~zoo.data.decode.base.VideoReader` for the
contract):

* ``"auto"`` (default): per file, the fastest reader that is exact for its container and installed
  (:data:`AUTO_ORDER`; a frame folder goes to ``"frames"``).
* ``"pyav"``: PyAV/FFmpeg; seeks, decodes only the needed range, converts only the kept frames
  (:mod:`zoo.data.decode.pyav`).
* ``"opencv"``: OpenCV's FFmpeg backend.
* ``"torchcodec"``: PyTorch's torchcodec, when it is installed (exact seek mode; MP4/MOV, MKV/WebM
  and GIF only, see :mod:`zoo.data.decode.torchcodec`).
* ``"decord"``: decord, when it is installed.
* ``"frames"``: a folder of extracted frames (``img_00001.jpg`` ..., ``CONFIG.DATA.FRAME_TEMPLATE``)
  instead of a video file (:mod:`zoo.data.decode.frames`).
* ``"image"``: one image file as a one-frame video (used by the image datasets).

All give the same frames for the same indices (frame ``i`` = the ``i``-th in presentation order),
up to codec rounding. A user's reader registers with ``register_decoder("name", cls)``.

Nothing here imports torch until a tensor is asked for (``decode``, ``decode_frames``) or a file is
opened with torchcodec (which imports torch itself); the readers' ``decode_array`` returns numpy.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Set, Tuple, Type

from ...utils.registry import RegistryError
from .base import (  # noqa: F401  (re-exported: the public names of the decoders)
    BAD_KINDS,
    KIND_NAMES,
    DecodeError,
    DecodeTimeout,
    OutputSize,
    VideoReader,
    check_deadline,
    time_limit,
)
from .frames import FrameFolderReader, ImageReader
from .opencv import DecordReader, OpenCVReader
from .pyav import PyAVReader
from .torchcodec import NotExact, TorchCodecReader, sniff_container

if TYPE_CHECKING:
    import torch

# The PyAV reader under its first name (kept for code written against the first version).
VideoFile = PyAVReader

DECODERS: Dict[str, Type[VideoReader]] = {
    "pyav": PyAVReader,
    "opencv": OpenCVReader,
    "torchcodec": TorchCodecReader,
    "decord": DecordReader,
    "frames": FrameFolderReader,
    "image": ImageReader,
}


# ``auto``: the readers to try for a container, by the container sniff_container() recognises from
# the file's first bytes; the first installed one that is exact for the file wins. Each row is that
# container's exact readers, fastest first, measured with tools/benchmark_data.py --generate 8
# --containers mkv webm avi, at --gop 16 and --gop 250 (10-s 340x256 clips, 32 frames at stride 2,
# one worker, one thread; 2-core AMD EPYC Zen 5 VM, figures in docs/benchmarks.md). PyAV and
# OpenCV were within the run-to-run noise of each other; torchcodec was the slowest of the three
# in every row (0.46-0.96x PyAV; tied only on VP9 at GOP 250), so it is tried last, and never for
# AVI or MPEG-TS/PS, where it returns wrong frames. AVI (where both decode from the start, see
# docs/datasets.md) goes to PyAV first: re-measured on a quiet machine after PyAV's AVI fix it was
# 57.3 / 64.6 clips/s against OpenCV's 56.8 / 55.4 (GOP 16 / 250), and it is the bit-exact
# reference. decord is left out (it shifts pixels on some widths). Re-measured end to end for
# issue 15 (tools/benchmark_data.py --end-to-end: decode + the training transform, 340x256 and
# 1080p H.264/HEVC MP4), PyAV with its one-pass resize led torchcodec and decord on every set.
AUTO_ORDER: Dict[str, Tuple[str, ...]] = {
    "mp4": ("pyav", "opencv", "torchcodec"),
    "matroska": ("pyav", "opencv", "torchcodec"),
    "avi": ("pyav", "opencv"),
}
# Any other container (MPEG-TS, FLV, GIF, ...): PyAV, the most thoroughly checked reader.
AUTO_FALLBACK: Tuple[str, ...] = ("pyav", "opencv")
# The package each optional reader needs (a reader whose package is missing is skipped by auto).
_NEEDS = {"torchcodec": "torchcodec", "decord": "decord", "opencv": "cv2"}
_UNUSABLE: Set[str] = set()  # readers that failed to import here (missing FFmpeg libraries, ...)


def _installed(name: str) -> bool:
    module = _NEEDS.get(name)
    if name in _UNUSABLE:
        return False
    return module is None or importlib.util.find_spec(module) is not None


def auto_candidates(path: str) -> Tuple[str, ...]:
    """The readers ``auto`` tries for ``path``, in order (installed ones only)."""
    if os.path.isdir(path):
        return ("frames",)
    try:
        container = sniff_container(path)
    except OSError:
        container = ""  # missing or unreadable: the first reader reports it
    names = AUTO_ORDER.get(container, AUTO_FALLBACK)
    return tuple(n for n in names if _installed(n)) or ("pyav",)


class AutoReader(VideoReader):
    """The reader ``auto`` picks for the file (see :data:`AUTO_ORDER`), behind the same interface.

    When the picked reader finds that it cannot be exact for this file
    (:class:`~zoo.data.decode.torchcodec.NotExact`, e.g. frames that share a timestamp), the next
    reader of the row takes over, so a file is never read with neighbouring frames.

    Attributes:
        decoder: The name of the reader in use.
    """

    def __init__(self, path: str, num_frames_hint: int = -1, threads: int = 0) -> None:
        self.path = path
        self._args = (num_frames_hint, threads)
        self._left = list(auto_candidates(path))
        self._reader: Optional[VideoReader] = None
        self._output_size: Optional[OutputSize] = None
        self._next_reader()

    def _next_reader(self) -> None:
        while True:
            name = self._left.pop(0)
            try:
                self._reader = get_decoder(name)(self.path, *self._args)
            except NotExact:
                if not self._left:
                    raise
                continue
            except ImportError:  # installed, but cannot load (e.g. torchcodec without FFmpeg)
                _UNUSABLE.add(name)
                if not self._left:
                    raise
                continue
            self.decoder, self.fps = name, self._reader.fps
            if self._output_size is not None:  # a reader taking over scales as asked too
                self._reader.set_output_size(self._output_size)
            return

    @property
    def num_frames(self) -> int:
        return self._reader.num_frames

    @property
    def count_was_costly(self) -> bool:
        return self._reader.count_was_costly

    def set_output_size(self, size: Optional[OutputSize]) -> bool:
        self._output_size = size
        return self._reader.set_output_size(size)

    def decode_array(self, indices: Sequence[int]):
        return self._call("decode_array", indices)

    def decode(self, indices: Sequence[int]) -> torch.Tensor:
        # The picked reader's own decode(), not decode_array() wrapped here: a reader (or a test
        # spying on one) that overrides decode() sees the call.
        return self._call("decode", indices)

    def _call(self, method: str, indices: Sequence[int]):
        while True:
            try:
                return getattr(self._reader, method)(indices)
            except NotExact:
                if not self._left:
                    raise
                self._reader.close()
                self._next_reader()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()


DECODERS["auto"] = AutoReader


def register_decoder(name: str, reader: Type[VideoReader]) -> Type[VideoReader]:
    """Add a reader class under ``name`` (an error if the name is taken).

    Args:
        name: The value ``CONFIG.DATA.DECODER`` will use.
        reader: Called as ``reader(path, num_frames_hint=-1, threads=0)``; see
            :class:`~zoo.data.decode.base.VideoReader`.
    """
    if name in DECODERS:
        raise RegistryError(f"a decoder named {name!r} is already registered ({DECODERS[name]})")
    DECODERS[name] = reader
    return reader


def get_decoder(name: str) -> Type[VideoReader]:
    """The reader class registered as ``name``; a miss lists the known names."""
    try:
        return DECODERS[name]
    except KeyError:
        raise RegistryError(
            f"unknown decoder {name!r} (CONFIG.DATA.DECODER): known are "
            f"{', '.join(sorted(DECODERS))}; a decoder from your own file registers with "
            "zoo.data.decode.registry.register_decoder and is loaded with CONFIG.EXTRA_MODULES"
        ) from None


def open_video(
    path: str, decoder: str = "auto", num_frames_hint: int = -1, threads: int = 0
) -> VideoReader:
    """Open ``path`` with the named decoder.

    Raises:
        DecodeError: The file cannot be opened (one line naming the file and the reason).
    """
    return get_decoder(decoder)(path, num_frames_hint=num_frames_hint, threads=threads)


def decode_frames(path: str, indices: Sequence[int], decoder: str = "auto") -> torch.Tensor:
    """Decode the frames at ``indices`` of the video at ``path``.

    Args:
        path: Video file path (a folder for the "frames" decoder).
        indices: 0-based frame indices; any order, repeats allowed.
        decoder: A name from :data:`DECODERS`.

    Returns:
        uint8 tensor ``(len(indices), H, W, 3)`` in RGB.

    Raises:
        DecodeError: One line naming the file and the reason.
    """
    with open_video(path, decoder) as video:
        return video.decode(indices)


def count_frames(path: str, decoder: str = "auto") -> int:
    """Number of frames of the video at ``path``."""
    with open_video(path, decoder) as video:
        return video.num_frames
