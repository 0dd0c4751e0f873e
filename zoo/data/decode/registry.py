"""Decoders behind one interface, chosen with ``CONFIG.DATA.DECODER``.

``DECODERS`` maps a name to a reader class (see :class:`~zoo.data.decode.base.VideoReader` for the
contract):

* ``"auto"`` (default): per file, the fastest reader that is exact for its container and installed
  (:mod:`zoo.data.decode.auto`; a frame folder goes to ``"frames"``).
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

from typing import TYPE_CHECKING, Dict, Sequence, Type

from ...utils.registry import RegistryError
from .auto import AutoReader
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
from .decord import DecordReader
from .frames import FrameFolderReader, ImageReader
from .opencv import OpenCVReader
from .pyav import PyAVReader
from .torchcodec import TorchCodecReader

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
    "auto": AutoReader,
}


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
