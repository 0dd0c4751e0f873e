"""The one-video-per-line list formats of other projects, and how ``auto`` tells them apart.

``CONFIG.DATA.LIST_FORMAT`` names the format of a text list:

==================== ===================================== ====================================
format               a line                                from
==================== ===================================== ====================================
gluoncv              ``path num_frames label``             gluon-cv, zoo's own scripts; the
                                                           path may contain spaces; -1 = count
                                                           unknown
mmaction2            ``path label``                        MMAction2 ``VideoDataset``
mmaction2_rawframes  ``dir total_frames label`` or         MMAction2 ``RawframeDataset``
                     ``dir offset total_frames label``     (``with_offset``: a clip of a long
                                                           video's frame folder)
pyslowfast           ``path label`` or ``path,label``      PySlowFast ``Kinetics`` (its
                                                           ``train.csv``: no header)
==================== ===================================== ====================================

MMAction2 and PySlowFast split a line on its separator, so their paths cannot contain spaces
(commas, for PySlowFast's comma form); gluoncv lists can, because zoo reads the last two fields as
numbers and the rest as the path. Lines starting with ``#`` and blank lines are skipped in every
format. Multi-label lines (MMAction2's ``multi_class``: several labels after the path) are refused
with one error, in every format: zoo trains single-label classifiers.

``auto`` (the default) looks at the shape of every line of the file before it reads any of them,
and decides only when the whole file allows one meaning (see :func:`decide_format`). Otherwise it
stops with one line that names ``CONFIG.DATA.LIST_FORMAT`` and the candidates.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ...utils.logger import log_once
from .records import VIDEO_EXTS, AnnotationError, VideoRecord

logger = logging.getLogger(__name__)

LIST_FORMATS = ("auto", "gluoncv", "mmaction2", "mmaction2_rawframes", "pyslowfast")
KEY = "CONFIG.DATA.LIST_FORMAT"
EXPECTED = {
    "gluoncv": "'path num_frames label' (num_frames may be -1; label an integer >= 0)",
    "mmaction2": "'path label' (label an integer >= 0; no spaces in the path)",
    "mmaction2_rawframes": "'dir total_frames label' or 'dir offset total_frames label'",
    "pyslowfast": "'path label' or 'path,label' (label an integer >= 0)",
}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"[+-]?\d+")
# PySlowFast's frame lists (Something-Something, Charades): one row per frame, not per video.
_FRAME_LIST_COLUMNS = {"original_vido_id", "video_id", "frame_id", "path", "labels"}

Line = Tuple[str, str]  # (where = "file:line", text)


def is_int(text: str) -> bool:
    return bool(_INT.fullmatch(text))


def _is_video(path: str) -> bool:
    return path.lower().endswith(VIDEO_EXTS)


def _number(text: str, what: str, where: str, fmt: str, minimum: int) -> int:
    if not is_int(text):
        raise AnnotationError(
            f"{where}: {what} {text!r} is not an integer; expected {EXPECTED[fmt]} "
            f"({KEY} {fmt!r})"
        )
    value = int(text)
    if value < minimum:
        raise AnnotationError(
            f"{where}: {what} {value} is below {minimum}; expected {EXPECTED[fmt]} ({KEY} {fmt!r})"
        )
    return value


def multi_label_error(where: str, line: str, fmt: str) -> AnnotationError:
    """The one error for a line with several labels."""
    return AnnotationError(
        f"{where}: {line!r} has several labels after the path (a multi-label list, MMAction2's "
        f"multi_class): multi-label lists are not supported, give each video one label. If the "
        f"numbers mean something else, set {KEY} (now {fmt!r}) to the list's format: "
        "gluoncv, mmaction2, mmaction2_rawframes or pyslowfast"
    )


def _cannot_parse(where: str, line: str, fmt: str, why: str = "") -> AnnotationError:
    why = f" ({why})" if why else ""
    return AnnotationError(
        f"{where}: cannot parse {line!r}{why}; expected {EXPECTED[fmt]} ({KEY} {fmt!r})"
    )


# ----------------------------------------------------------------------------- header lines


def header_fields(line: str) -> Optional[List[str]]:
    """The column names when ``line`` is a header (two or more plain words such as ``path,label``
    or ``video label``: no field is a number or a file name), else None. Such a line is never a
    video in any format, since every format ends in an integer label."""
    fields = [f for f in re.split(r"[,\s;]+", line.strip()) if f]
    if len(fields) >= 2 and all(_WORD.fullmatch(f) for f in fields):
        return [f.lower() for f in fields]
    return None


def check_header(where: str, line: str) -> None:
    """Refuse the header of a PySlowFast frame list (one row per frame)."""
    fields = header_fields(line) or []
    if _FRAME_LIST_COLUMNS.issubset(fields):
        raise AnnotationError(
            f"{where}: {line!r} is the header of a PySlowFast frame list (one row per frame, as "
            "for Something-Something and Charades): frame lists are not supported, zoo reads one "
            "line per video. Write "
            "'dir total_frames label' lines with CONFIG.DATA.LIST_FORMAT mmaction2_rawframes and "
            "CONFIG.DATA.FRAME_TEMPLATE matching the frame file names"
        )


# ----------------------------------------------------------------------------- one format each


def parse_gluoncv(where: str, line: str) -> VideoRecord:
    """``path num_frames label``; the path is everything before the last two fields."""
    parts = line.rsplit(None, 2)
    if len(parts) != 3:
        raise _cannot_parse(where, line, "gluoncv")
    path, frames, label = parts
    num_frames = _number(frames, "num_frames", where, "gluoncv", -1)
    label_id = _number(label, "label", where, "gluoncv", 0)
    head, *rest = path.split()
    if rest and _is_video(head) and all(is_int(t) for t in rest):
        # "a.mp4 3 5 7" read as the path "a.mp4 3": a multi-label line, not a file name.
        raise multi_label_error(where, line, "gluoncv")
    return VideoRecord(path, num_frames, label_id)


def _path_label(where: str, line: str, fmt: str, sep: Optional[str]) -> VideoRecord:
    parts = [p.strip() for p in line.split(sep)]
    if len(parts) > 2 and all(is_int(p) for p in parts[1:]) and parts[0]:
        raise multi_label_error(where, line, fmt)
    if len(parts) != 2 or not parts[0]:
        why = "MMAction2 and PySlowFast split a line at each separator" if len(parts) > 2 else ""
        raise _cannot_parse(where, line, fmt, why)
    return VideoRecord(parts[0], -1, _number(parts[1], "label", where, fmt, 0))


def parse_mmaction2(where: str, line: str) -> VideoRecord:
    """``path label`` split on whitespace (MMAction2's VideoDataset)."""
    return _path_label(where, line, "mmaction2", None)


def parse_pyslowfast(where: str, line: str) -> VideoRecord:
    """``path label``, split at the comma when the line has one, else on whitespace (PySlowFast's
    ``DATA.PATH_LABEL_SEPARATOR``, " " by default, "," in several of its forks)."""
    return _path_label(where, line, "pyslowfast", "," if "," in line else None)


def parse_rawframes(where: str, line: str, columns: int) -> VideoRecord:
    """``dir total_frames label`` (``columns`` 3) or ``dir offset total_frames label`` (4)."""
    parts = line.split()
    if len(parts) > columns and all(is_int(p) for p in parts[1:]):
        raise multi_label_error(where, line, "mmaction2_rawframes")
    if len(parts) != columns:
        layout = "'dir offset total_frames label'" if columns == 4 else "'dir total_frames label'"
        raise _cannot_parse(
            where, line, "mmaction2_rawframes",
            f"{len(parts)} fields where this list's lines are {layout}",
        )
    fmt = "mmaction2_rawframes"
    offset = _number(parts[1], "offset", where, fmt, 0) if columns == 4 else 0
    total = _number(parts[-2], "total_frames", where, fmt, -1)
    return VideoRecord(parts[0], total, _number(parts[-1], "label", where, fmt, 0), offset=offset)


# ----------------------------------------------------------------------------- auto


def _shape(line: str) -> str:
    """What a line looks like: "PL" (``path label``, space or comma), "P3"/"P4"/"P5" (a first
    field then 2/3/4+ integers), "SP" (a path with spaces, then two integers) or "?"."""
    if line.count(",") == 1:
        path, label = line.split(",")
        if path.strip() and is_int(label.strip()):
            return "PL"  # PySlowFast's comma form; the path may then hold spaces
    parts = line.split()
    tail = 0
    while tail < len(parts) - 1 and is_int(parts[-1 - tail]):
        tail += 1
    if tail == len(parts) - 1 and tail >= 1:
        return {1: "PL", 2: "P3", 3: "P4"}.get(tail, "P5")
    return "SP" if tail >= 2 else "?"


def _gluoncv_paths_exist(lines: Sequence[Line], data_root: Optional[str]) -> bool:
    """Whether every line with more than two integers names an existing path when read as
    gluoncv (the path keeps the leading integers: ``sit/v 2 12 1`` is the folder ``sit/v 2``)."""
    if not data_root:
        return False
    for _, line in lines:
        if _shape(line) in ("P4", "P5"):
            path = line.rsplit(None, 2)[0]
            if not os.path.exists(os.path.join(data_root, path)):
                return False
    return True


def _decide_three_integers(shaped: Sequence[Tuple[str, str, str]]) -> str:
    """Every line ``path A B``: gluoncv, unless it can also be a two-label MMAction2 list."""
    pure = [line.split() for _, line, shape in shaped if shape == "P3"]
    if all(_is_video(p[0]) and 0 <= int(p[1]) < int(p[2]) for p in pure):
        where, line, _ = next(x for x in shaped if x[2] == "P3")
        raise AnnotationError(
            f"{where}: {line!r} can be read two ways: gluoncv 'path num_frames label' or an "
            "MMAction2 multi-label line 'path label label' (on every line the middle number "
            f"is the smaller, as with sorted labels): set {KEY} gluoncv (or mmaction2, which "
            "refuses multi-label lines)"
        )
    return "gluoncv"


def _decide_four_integers(
    lines: Sequence[Line], shaped: Sequence[Tuple[str, str, str]], data_root: Optional[str]
) -> str:
    """Every line ``path A B C``: multi-label for video files, else gluoncv folders named
    ``path A`` or MMAction2 rawframes with offsets."""
    for where, line, _ in shaped:
        if _is_video(line.split()[0]):
            raise multi_label_error(where, line, "auto")
    if _gluoncv_paths_exist(lines, data_root):
        return "gluoncv"  # folders named "v 1", "v 2", ...
    fields = [(where, line, line.split()) for where, line, _ in shaped]
    odd = next(((w, t) for w, t, p in fields if int(p[1]) < 0 or int(p[2]) < 1), None)
    if odd is None:
        return "mmaction2_rawframes"
    raise AnnotationError(
        f"{odd[0]}: {odd[1]!r} is no MMAction2 offset line 'dir offset total_frames label' "
        f"(offset >= 0, total_frames >= 1) and no path of that name exists for a gluoncv "
        f"line: set {KEY} to the list's format"
    )


def decide_format(lines: Sequence[Line], data_root: Optional[str] = None) -> str:
    """The format of a list under ``auto``, from the shapes of all its lines.

    * every line ``path label`` -> mmaction2 (pyslowfast when they are comma-separated: the
      meaning is the same);
    * any line with a space inside the path (``a dir/b c.mp4 -1 3``) -> gluoncv, the only format
      whose paths may hold spaces;
    * every line ``path A B`` -> gluoncv (= mmaction2_rawframes ``dir total label``, the same
      meaning), unless the paths are video files, no ``A`` is -1 and ``A < B`` on every line: that
      is also an MMAction2 multi-label list with two sorted labels per video, so it stops;
    * every line ``path A B C`` -> mmaction2_rawframes with offsets for folders (gluoncv when
      ``data_root`` holds the folders ``path A``; stops when an offset is negative or a count
      below 1 and no such folder exists); for video files it is a multi-label line (stops);
    * lines with different numbers of integers (``a.mp4 3`` and ``b.mp4 3 5``) -> a multi-label
      list (stops), unless ``data_root`` is given and every longer line names an existing path
      when read as gluoncv (a folder ``v 2``).

    Lines that fit no shape do not vote; the chosen format's parser then reports them.

    Raises:
        AnnotationError: The shapes allow more than one meaning (names the candidates and
            ``CONFIG.DATA.LIST_FORMAT``), or the list is multi-label.
    """
    shaped = [(where, line, _shape(line)) for where, line in lines]
    shapes = {shape for _, _, shape in shaped if shape != "?"}
    if not shapes:
        return "gluoncv"
    if shapes == {"PL"}:
        return "pyslowfast" if any("," in line for _, line, _ in shaped) else "mmaction2"
    if "SP" in shapes:
        return "gluoncv"
    if shapes == {"P3"}:
        return _decide_three_integers(shaped)
    if shapes == {"P4"}:
        return _decide_four_integers(lines, shaped, data_root)
    if "PL" not in shapes and _gluoncv_paths_exist(lines, data_root):
        return "gluoncv"
    voted = [(where, line, shape) for where, line, shape in shaped if shape != "?"]
    where0, line0, shape0 = voted[0]
    if shapes == {"P5"}:
        raise multi_label_error(where0, line0, "auto")
    where, line = next((w, text) for w, text, shape in voted if shape != shape0)
    raise AnnotationError(
        f"{where}: {line!r} has another number of integer fields than {where0} ({line0!r}): a "
        "multi-label list (MMAction2's multi_class, several labels after the path), which is not "
        f"supported, or lines of different formats. If the list is single-label, set {KEY} to "
        "its format (gluoncv for paths with spaces, mmaction2, mmaction2_rawframes, pyslowfast)"
    )


PARSERS: Dict[str, Callable[[str, str], VideoRecord]] = {
    "gluoncv": parse_gluoncv,
    "mmaction2": parse_mmaction2,
    "pyslowfast": parse_pyslowfast,
}


def _rawframe_columns(lines: Sequence[Line]) -> int:
    """3 or 4: MMAction2 decides it per dataset (``with_offset``), zoo from the first line."""
    return 4 if len(lines[0][1].split()) >= 4 else 3


def parse_lines(lines: Sequence[Line], list_format: str, name: str,
                data_root: Optional[str] = None) -> List[VideoRecord]:
    """Read the data lines of a list (comments, blank lines and the header already removed).

    Args:
        lines: ``(where, text)`` per line.
        list_format: A name from :data:`LIST_FORMATS`.
        name: The list's path, for the log line that says which format ``auto`` chose.
        data_root: Folder the paths are relative to; lets ``auto`` check paths on disk when the
            shapes alone leave two readings.

    Raises:
        AnnotationError: One line naming file:line, what was expected and the format key.
    """
    if list_format not in LIST_FORMATS:
        raise AnnotationError(
            f"{KEY} = {list_format!r} is not known: use one of {', '.join(LIST_FORMATS)}"
        )
    if not lines:
        return []
    fmt = decide_format(lines, data_root) if list_format == "auto" else list_format
    if list_format == "auto":
        log_once(logger, logging.INFO, "%s: %s auto reads it as %s", name, KEY, fmt)
    if fmt == "mmaction2_rawframes":
        columns = _rawframe_columns(lines)

        def parse(where: str, line: str) -> VideoRecord:
            return parse_rawframes(where, line, columns)
    else:
        parse = PARSERS[fmt]
    records = []
    for where, line in lines:
        try:
            records.append(parse(where, line))
        except AnnotationError:
            if header_fields(line):
                raise AnnotationError(
                    f"{where}: {line!r} looks like a header, but a header is only recognised as "
                    f"the first line ({KEY} {fmt!r}): remove it"
                ) from None
            raise
    return records
