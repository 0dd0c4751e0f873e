"""Which container a video file is, from its first bytes: the readers' exactness depends on it
(``auto`` picks readers by it, torchcodec refuses the containers it gets wrong)."""

from __future__ import annotations

import os

# Top-level boxes that can open an ISO base media file (MP4, MOV, 3GP, M4V).
_ISO_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip", b"pnot")
# Extensions of each container family, for files whose first bytes are not recognised.
_EXTENSIONS = {
    ".mp4": "mp4", ".m4v": "mp4", ".mov": "mp4", ".3gp": "mp4", ".mkv": "matroska",
    ".webm": "matroska", ".gif": "gif", ".avi": "avi", ".ts": "mpegts", ".mts": "mpegts",
    ".m2ts": "mpegts", ".mpg": "mpeg", ".mpeg": "mpeg", ".flv": "flv",
}


def sniff_container(path: str) -> str:
    """The container family of ``path`` from its first bytes; the extension when they are unknown.

    Returns:
        "mp4" (MP4/MOV/3GP), "matroska" (MKV/WebM), "avi", "gif", "mpegts", "mpeg", "flv", or the
        lower-case extension without its dot ("" when none) for anything else.

    Raises:
        OSError: The file cannot be read.
    """
    with open(path, "rb") as f:
        head = f.read(12)
    if head[4:8] in _ISO_BOXES:
        return "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    if head[:4] == b"GIF8":
        return "gif"
    if head[:3] == b"FLV":
        return "flv"
    if head[:4] == b"\x00\x00\x01\xba":
        return "mpeg"
    if head[:1] == b"\x47":
        return "mpegts"
    ext = os.path.splitext(path)[1].lower()
    return _EXTENSIONS.get(ext, ext.lstrip("."))
