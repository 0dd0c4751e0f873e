"""``auto``: per file, the fastest reader that is exact for its container and installed.

The container comes from the file's first bytes
(:func:`~zoo.data.decode.containers.sniff_container`); :data:`AUTO_ORDER` gives that container's
exact readers, fastest first. When the picked reader finds it cannot be exact for the file
(:class:`~zoo.data.decode.base.NotExact`), the next one takes over, so a file is never read
with neighbouring frames.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Set, Tuple, Type

from .base import NotExact, OutputSize, VideoReader
from .containers import sniff_container
from .frames import FrameFolderReader
from .opencv import OpenCVReader
from .pyav import PyAVReader
from .torchcodec import TorchCodecReader

if TYPE_CHECKING:
    import torch

# The readers auto chooses from, by name.
_READERS: Dict[str, Type[VideoReader]] = {
    "pyav": PyAVReader, "opencv": OpenCVReader, "torchcodec": TorchCodecReader,
    "frames": FrameFolderReader,
}

# ``auto``: the readers to try for a container, by the container sniff_container() recognises from
# the file's first bytes; the first installed one that is exact for the file wins. Each row is that
# container's exact readers, fastest first, measured with tools/benchmark_data.py --generate 8
# --containers mkv webm avi, at --gop 16 and --gop 250 (10-s 340x256 clips, 32 frames at stride 2,
# one worker, one thread; 2-core AMD EPYC Zen 5 VM, figures in docs/benchmarks.md). PyAV and
# OpenCV were within the run-to-run noise of each other; torchcodec was the slowest of the three
# in every row (0.46-0.96x PyAV; tied only on VP9 at GOP 250), so it is tried last, and never for
# AVI or MPEG-TS/PS, where it returns wrong frames. AVI (where both decode from the start, see
# docs/datasets.md) goes to PyAV first: measured on a quiet machine (both frame-exact) it was
# 57.3 / 64.6 clips/s against OpenCV's 56.8 / 55.4 (GOP 16 / 250), and it is the bit-exact
# reference. decord is left out (it shifts pixels on some widths). Measured end to end
# (tools/benchmark_data.py --end-to-end: decode + the training transform, 340x256 and 1080p
# H.264/HEVC MP4; docs/benchmarks.md), PyAV with its one-pass resize led torchcodec and decord on
# every set.
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
    (:class:`~zoo.data.decode.base.NotExact`, e.g. frames that share a timestamp), the next
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
                self._reader = _READERS[name](self.path, *self._args)
            except NotExact:
                if not self._left:
                    raise
                continue
            except ImportError:  # installed, but cannot load (e.g. torchcodec without FFmpeg)
                _UNUSABLE.add(name)
                if not self._left:
                    raise
                continue
            self.decoder = name
            if self._output_size is not None:  # a reader taking over scales as asked too
                self._reader.set_output_size(self._output_size)
            return

    @property
    def num_frames(self) -> int:
        return self._reader.num_frames

    @property
    def fps(self) -> Optional[float]:
        return self._reader.fps

    @property
    def count_was_costly(self) -> bool:
        return self._reader.count_was_costly

    def frame_times(self):
        times = getattr(self._reader, "frame_times", None)
        return times() if times is not None else None

    @property
    def decodes_from_start(self) -> bool:
        return getattr(self._reader, "decodes_from_start", False)

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
