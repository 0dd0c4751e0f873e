"""What an annotation list is made of, as plain data: :class:`VideoRecord` (one video of a list),
:class:`AnnotationError`, the file extensions zoo reads, and the lines of a text list. Every other
module of zoo/data/lists builds on this one, which imports nothing of zoo but the ``UserError``
base class (and no numpy or torch: the command-line parsers read the extensions here).
"""

from __future__ import annotations

import codecs
import io
import os
import unicodedata
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

from ...utils.errors import UserError

# File extensions of the videos and images zoo reads (lower case).
VIDEO_EXTS = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv",
              ".3gp", ".ts", ".mts", ".m2ts", ".ogv", ".mxf")
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


class AnnotationError(UserError, ValueError):
    """An annotation list is missing or has a line that does not parse."""


@dataclass(frozen=True)
class VideoRecord:
    """One line of an annotation list.

    Attributes:
        path: Video path exactly as written in the list (relative to the data root).
        num_frames: Frame count from the list; -1 when unknown (the decoder then finds it).
        label: Integer class id, >= 0.
        start: Use the video from this time (seconds); < 0 = from the start.
        end: Use the video up to this time (seconds); < 0 = to the end.
        offset: Frames of a frame folder before this video's first one (MMAction2 rawframe lists
            with offsets); frame ``i`` is the file numbered ``offset + i + 1``.
    """

    path: str
    num_frames: int
    label: int
    start: float = -1.0
    end: float = -1.0
    offset: int = 0


def open_text(path: str, newline: Optional[str] = None) -> io.StringIO:
    """A list, split or names file's text, to read like ``open(path, newline=newline)``: UTF-8
    (a byte-order mark, which spreadsheet tools like to add, dropped), or UTF-16 with its
    byte-order mark (Excel's "Unicode Text").

    Raises:
        AnnotationError: The file is neither (Latin-1 or Windows-1252 text: one line naming the
            file, the line and the byte), or not text at all.
    """
    with open(path, "rb") as f:
        data = f.read()
    utf16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    if not utf16 and b"\0" in data[:4096]:
        raise AnnotationError(f"{path} holds binary data, not text (a video, an archive?): give "
                              "the annotation list, or the folder of class folders")
    try:
        text = data.decode("utf-16" if utf16 else "utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise AnnotationError(
            f"{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x}): save it as UTF-8 (a "
            "spreadsheet's 'CSV UTF-8'), or convert it, e.g. iconv -f latin1 -t utf-8") from None
    return io.StringIO(text, newline=newline)


def local_path(root: str, path: str) -> str:
    """``root/path``; a path with Windows separators (``a\\b.mp4``, a list written on Windows)
    names the file with ``/`` where only that one exists (a backslash is a legal character of a
    file name here, so a file named with one is kept). A name with accents names the file
    written in the other Unicode form where only that one exists (``café`` composed in the list,
    decomposed on a disk that macOS wrote)."""
    full = os.path.join(root, path)
    if "\\" in path and os.sep == "/" and not os.path.exists(full):
        posix = os.path.join(root, path.replace("\\", "/"))
        if os.path.exists(posix):
            return posix
    if not path.isascii() and not os.path.exists(full):
        for form in ("NFD", "NFC"):
            other = os.path.join(root, unicodedata.normalize(form, path))
            if other != full and os.path.exists(other):
                return other
    return full


def reencoded_name(path: str) -> str:
    """The file ``zoo-reencode`` writes for ``path``: the same name, ``.mp4`` (``a/b.avi`` ->
    ``a/b.mp4``)."""
    return os.path.splitext(path)[0] + ".mp4"


def reencoded_paths(paths: List[str], sample: int = 20) -> List[str]:
    """``paths``, each video file named :func:`reencoded_name` instead, when the list's first
    videos are missing and their ``.mp4`` exists: a list of the original files (UCF101's official
    ``.avi`` splits) read from the re-encoded folder. Decided on the first ``sample`` videos, so a
    long list costs no look at every file; when any of them exists as listed, or lacks an
    ``.mp4``, ``paths`` are returned as they are."""
    def renamed(path: str) -> bool:  # a video zoo-reencode writes under another name
        name = path.lower()
        return name.endswith(VIDEO_EXTS) and not name.endswith(".mp4")

    first = [p for p in paths[:sample] if renamed(p)]
    if not first or any(os.path.exists(p) for p in first) or not all(
            os.path.exists(reencoded_name(p)) for p in first):
        return paths
    return [reencoded_name(p) if renamed(p) else p for p in paths]


def list_lines(anno_path: str) -> Iterator[Tuple[str, str]]:
    """``(where, line)`` for every line of a text list that is not blank or a ``#`` comment;
    ``where`` is ``path:line_number`` for error messages."""
    with open_text(anno_path) as f:
        for line_no, raw in enumerate(f, start=1):
            line = raw.strip()
            if line and not line.startswith("#"):
                yield f"{anno_path}:{line_no}", line
