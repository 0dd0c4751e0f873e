"""Reading annotation lists: one-video-per-line text lists and CSV files with a header.

Text lists hold one video per line, in the format ``CONFIG.DATA.LIST_FORMAT`` names (``auto``
recognises it; see :mod:`zoo.data.lists.formats`). zoo's own format is gluoncv's::

    relative/path/to/video.mp4 300 12
    # comments and blank lines are skipped
    a folder with spaces/clip 1.mp4 -1 3

The last two whitespace-separated fields are the frame count (``-1`` = unknown) and the integer
class id; everything before them is the path, so paths may contain spaces. MMAction2
(``path label``, ``dir [offset] total_frames label``) and PySlowFast (``path label``,
``path,label``) lists are read too. CSV lists need a header with at least ``path`` and ``label``
columns; ``start`` and ``end`` (seconds: use only that part of the video) and ``num_frames`` are
optional, and a CSV label may be a class name. A ``classes.txt`` beside the list names the
classes, one per line, line ``i`` naming class ``i`` (a CSV's name labels are looked up there).
The other sources (Kinetics CSVs, UCF101 and HMDB51 split files, class folders) are read by
:mod:`zoo.data.lists.sources`.
"""

from __future__ import annotations

import csv
import logging
import os
import re
import unicodedata
from typing import Any, Dict, List, Optional, Sequence

from .formats import check_header, header_fields, is_int, parse_lines
from .records import (  # noqa: F401  (AnnotationError, VideoRecord, list_lines re-exported)
    AnnotationError,
    VideoRecord,
    list_lines,
    open_text,
)
from .sources import class_folder_records, class_names_of_folder

logger = logging.getLogger(__name__)

CSV_FORMAT = (
    "a header with 'path' and 'label' columns (optional 'start', 'end' in seconds and "
    "'num_frames'), one row per video"
)


def _parse_int(text: str, what: str, where: str, expected: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise AnnotationError(
            f"{where}: {what} {text!r} is not an integer; expected {expected}"
        ) from None
    if value < minimum:
        raise AnnotationError(f"{where}: {what} {value} is below {minimum}; expected {expected}")
    return value


def _parse_time(row: List[str], column: Optional[int], what: str, where: str) -> float:
    text = row[column].strip() if column is not None else ""
    if not text:
        return -1.0
    try:
        return float(text)
    except ValueError:
        raise AnnotationError(
            f"{where}: {what} {text!r} is not a number of seconds; expected {CSV_FORMAT}"
        ) from None


def _read_csv_list(anno_path: str) -> List[VideoRecord]:
    records = []
    with open_text(anno_path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return records
        columns = {name.strip().lower(): i for i, name in enumerate(header)}
        if "youtube_id" in columns:
            raise AnnotationError(
                f"{anno_path} is a Kinetics CSV (label,youtube_id,time_start,time_end,split): set "
                f"CONFIG.DATA.DATASET 'KineticsDataset' to read it{_REENCODE_HINT}"
            )
        if "path" not in columns or "label" not in columns:
            raise AnnotationError(
                f"{anno_path}:1: header {header!r} lacks 'path' or 'label'; expected {CSV_FORMAT}"
            )
        i_path, i_label = columns["path"], columns["label"]
        i_frames = columns.get("num_frames")
        i_start, i_end = columns.get("start"), columns.get("end")
        names: Dict[str, int] = {}  # classes.txt's ids by name, read at the first name label
        for row in reader:
            # csv.reader counts physical lines, which stays right for quoted multi-line fields.
            where = f"{anno_path}:{reader.line_num}"
            if not row or not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
                continue
            if len(row) < len(header):
                raise AnnotationError(
                    f"{where}: {len(row)} columns where the header has {len(header)}; "
                    f"expected {CSV_FORMAT}"
                )
            frames = row[i_frames].strip() if i_frames is not None else ""
            records.append(
                VideoRecord(
                    path=row[i_path].strip(),
                    num_frames=_parse_int(frames or "-1", "num_frames", where, CSV_FORMAT, -1),
                    label=_csv_label(row[i_label].strip(), where, anno_path, names),
                    start=_parse_time(row, i_start, "start", where),
                    end=_parse_time(row, i_end, "end", where),
                )
            )
    return records


def _csv_label(text: str, where: str, anno_path: str, names: Dict[str, int]) -> int:
    """A CSV row's class id: the integer given, or the line of ``classes.txt`` beside the list
    that names the class (``names`` caches that file's ids by name)."""
    if is_int(text):
        return _parse_int(text, "label", where, CSV_FORMAT, 0)
    if not names:
        path = os.path.join(os.path.dirname(os.path.abspath(anno_path)), "classes.txt")
        if not os.path.isfile(path):
            raise AnnotationError(
                f"{where}: label {text!r} is a class name, and {path} (one class name per line, "
                "line i naming class i) is missing: add it beside the list, or give integer "
                "class ids")
        listed = read_class_names(anno_path, 0)
        twice = sorted({n for n in listed if listed.count(n) > 1})
        if twice:
            raise AnnotationError(f"{path} names {twice[0]!r} more than once: the name labels "
                                  f"of {anno_path} would be ambiguous")
        names.update({name: i for i, name in enumerate(listed)})
    if text not in names:
        raise AnnotationError(
            f"{where}: label {text!r} is not a class id and classes.txt beside the list does not "
            "name it: add it there, or fix the label")
    return names[text]


# What zoo-reencode, which reads lists too, does with a dataset's own files instead.
_REENCODE_HINT = (" (zoo-reencode: re-encode the videos' folder without --list; the datasets read "
                  "the .mp4 files it writes in place of the listed ones)")


def _refuse_official_split_file(anno_path: str) -> None:
    """Stop on UCF101's and HMDB51's official split files read as plain lists: their second
    column is a 1-based class id (UCF101) or a train/test flag (HMDB51), which a list's label
    column would take as 0-based class ids."""
    folder, name = os.path.split(os.path.abspath(anno_path))
    if (re.fullmatch(r"(train|test)list0[1-3]\.txt", name)
            and os.path.isfile(os.path.join(folder, "classInd.txt"))):
        raise AnnotationError(
            f"{anno_path} is UCF101's official split file (1-based ids from classInd.txt): set "
            "CONFIG.DATA.DATASET 'UCF101Dataset' to read it, or turn it into lists with "
            f"datasets/build_split_lists.py ucf101{_REENCODE_HINT}")
    if re.search(r"_test_split[1-3]\.txt$", name):
        raise AnnotationError(
            f"{anno_path} is one of HMDB51's official split files (its numbers are train/test "
            "flags, not labels): set CONFIG.DATA.DATASET 'HMDB51Dataset' with the folder of "
            "them, or turn them into lists with datasets/build_split_lists.py hmdb51"
            f"{_REENCODE_HINT}")


def read_annotations(
    anno_path: str, list_format: str = "auto", data_root: Optional[str] = None
) -> List[VideoRecord]:
    """Parse an annotation list.

    A first line of plain words (``path,label``, ``video label``) is a header: with ``path`` and
    ``label`` columns (comma-separated) or in a ``.csv`` file the list is read as a CSV with a
    header, otherwise the line is skipped with a warning. Other lines are read in
    ``list_format`` (see :mod:`zoo.data.lists.formats`). A folder instead of a file is read as a
    folder of class sub-folders (see :func:`zoo.data.lists.sources.class_folder_records`).

    Args:
        anno_path: Path of the list file.
        list_format: ``CONFIG.DATA.LIST_FORMAT``: "auto", "gluoncv", "mmaction2",
            "mmaction2_rawframes" or "pyslowfast".
        data_root: Folder the list's paths are relative to; lets "auto" settle a list whose
            lines allow two readings by looking for the paths.

    Returns:
        One record per video, in file order.

    Raises:
        AnnotationError: The file is missing, empty, or a line does not parse (names file:line).
    """
    if os.path.isdir(anno_path):
        return class_folder_records(anno_path)[0]
    if not os.path.isfile(anno_path):
        raise AnnotationError(f"annotation list {anno_path!r} does not exist")
    _refuse_official_split_file(anno_path)
    if anno_path.lower().endswith(".json"):
        raise AnnotationError(
            f"{anno_path} is a JSON file (Something-Something's labels are): annotation lists "
            "are text or CSV; write its videos as 'path label' lines, ids from 0, with a "
            "classes.txt beside them (docs/datasets.md)")
    lines = list(list_lines(anno_path))
    fields = header_fields(lines[0][1]) if lines else None
    if fields:
        check_header(*lines[0])
        csv_columns = ("path" in fields and "label" in fields and "," in lines[0][1])
        if csv_columns or "youtube_id" in fields or anno_path.lower().endswith(".csv"):
            records = _read_csv_list(anno_path)
        else:
            logger.warning("%s: skipping the header line %r", lines[0][0], lines[0][1])
            records = parse_lines(lines[1:], list_format, anno_path, data_root)
    else:
        records = parse_lines(lines, list_format, anno_path, data_root)
    if not records:
        raise AnnotationError(f"annotation list {anno_path!r} has no videos in it")
    return records


def named_classes(names: Sequence[Any]) -> List[str]:
    """``names`` (entry ``i`` naming class ``i``) as strings when any of them names its class by
    more than its number, else ``[]`` (``str(i)`` is what a list without ``classes.txt`` gets)."""
    names = [str(name) for name in names]
    return names if any(name != str(i) for i, name in enumerate(names)) else []


def check_same_classes(names: Sequence[str], training: Sequence[str], where: str) -> None:
    """Stop when a split names a class id differently from the training data.

    Only ids that both sides name count: a name that is just the id's number (no ``classes.txt``,
    or a blank line in it) says nothing.

    Args:
        names: The split's class names, entry ``i`` naming id ``i``.
        training: The training data's class names (or a checkpoint's).
        where: The split's list, as the message names it (e.g. ``CONFIG.DATA.VAL_ANNO_PATH =
            '...'``).

    Raises:
        AnnotationError: One line naming the first id named differently, both names and the fix.
    """
    for i, (name, want) in enumerate(zip(names, training)):
        same = unicodedata.normalize("NFC", name) == unicodedata.normalize("NFC", want)
        if not same and name != str(i) and want != str(i):
            raise AnnotationError(
                f"{where}: class {i} is {name!r} there but {want!r} in the training data (when "
                "testing: the classes the checkpoint recorded): the labels would mean other "
                "classes. Give this list the training list's classes.txt and labels, or use "
                "class folders (matched by name)")


def read_class_names(anno_path: str, num_classes: int) -> List[str]:
    """Class names from ``classes.txt`` beside the list, else ``str(id)``.

    Args:
        anno_path: Path of the annotation list; ``classes.txt`` is looked for in its folder. For a
            folder of class sub-folders: its ``classes.txt``, else the sorted sub-folder names.
        num_classes: How many names are needed; missing names fall back to ``str(id)``.

    Returns:
        At least ``num_classes`` names (more when ``classes.txt`` lists more).
    """
    if os.path.isdir(anno_path):
        names_path = os.path.join(anno_path, "classes.txt")
        if not os.path.isfile(names_path):
            names = class_names_of_folder(anno_path)
            return names + [str(i) for i in range(len(names), num_classes)]
    else:
        names_path = os.path.join(os.path.dirname(os.path.abspath(anno_path)), "classes.txt")
    names: List[str] = []
    if os.path.isfile(names_path):
        with open_text(names_path) as f:
            names = [line.strip() for line in f]
        # Only trailing blank lines are dropped: one in the middle still stands for a class id.
        while names and not names[-1]:
            names.pop()
    names = [name or str(i) for i, name in enumerate(names)]
    return names + [str(i) for i in range(len(names), num_classes)]


# ----------------------------------------------------------------------------- image lists


def image_list_records(anno_path: str) -> List[VideoRecord]:
    """A list of images, ``path label`` per line (the label is the last field, so paths may
    contain spaces), or a CSV with ``path`` and ``label`` columns."""
    if anno_path.lower().endswith(".csv"):
        return read_annotations(anno_path)
    records = []
    for where, line in list_lines(anno_path):
        parts = line.rsplit(None, 1)
        if len(parts) != 2 or not re.fullmatch(r"\d+", parts[1]):
            raise AnnotationError(
                f"{where}: cannot parse {line!r}; expected 'path label' with an integer label >= 0"
            )
        records.append(VideoRecord(parts[0], 1, int(parts[1])))
    if not records:
        raise AnnotationError(f"image list {anno_path!r} has no images in it")
    return records
