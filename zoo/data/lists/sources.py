"""The dataset sources besides gluoncv lists and CSVs: Kinetics CSVs, the UCF101 and HMDB51 official
split files, folders of class sub-folders (videos, frame folders or images) and image lists.

Each reader returns ``(records, classes)``: :class:`~zoo.data.lists.records.VideoRecord` per
video (paths relative to the data root) and the class names, line ``i`` naming class ``i``. They are
plain functions so that the preparation scripts in ``datasets/`` use the very same parsing.
"""

from __future__ import annotations

import csv
import logging
import os
import re
import unicodedata
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from .records import (  # noqa: F401  (VIDEO_EXTS re-exported)
    IMAGE_EXTS,
    VIDEO_EXTS,
    AnnotationError,
    VideoRecord,
    list_lines,
    open_text,
)

logger = logging.getLogger(__name__)

KINETICS_COLUMNS = ("label", "youtube_id", "time_start", "time_end")
Records = Tuple[List[VideoRecord], List[str]]


def _names_file(path: str) -> Optional[List[str]]:
    if not os.path.isfile(path):
        return None
    with open_text(path) as f:
        names = [line.strip() for line in f]
    while names and not names[-1]:
        names.pop()
    return names


class ClassIds(dict):
    """``{name: id}`` whose names are compared in Unicode's composed form (NFC): a class folder
    named on macOS (decomposed, NFD: ``o`` + a combining diaeresis) is the training data's
    ``ö`` written elsewhere."""

    def __getitem__(self, name: str) -> int:
        return super().__getitem__(unicodedata.normalize("NFC", name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(unicodedata.normalize("NFC", name))

    def __setitem__(self, name: str, value: int) -> None:
        super().__setitem__(unicodedata.normalize("NFC", name), value)


def class_ids(classes: Sequence[str], where: str) -> Dict[str, int]:
    """``{name: id}`` of ``classes`` (entry ``i`` naming id ``i``), for data that labels by name;
    names compare in their composed Unicode form (:class:`ClassIds`).

    Raises:
        AnnotationError: A name stands for two ids (which of them a label means is unknowable).
    """
    ids: Dict[str, int] = ClassIds()
    for i, name in enumerate(classes):
        if name in ids:
            raise AnnotationError(
                f"{where}: the class name {name!r} stands for ids {ids[name]} and {i} (lines "
                f"{ids[name] + 1} and {i + 1} of the classes.txt that names them): labels by name "
                "need each name once")
        ids[name] = i
    return ids


# ----------------------------------------------------------------------------- Kinetics


def kinetics_stem(youtube_id: str, start: float, end: float) -> str:
    """The usual Kinetics file name without extension: ``<youtube_id>_<start>_<end>`` with the
    times as 6-digit whole seconds (``abc_000010_000020``), as the ActivityNet downloader and
    MMAction2 write them."""
    return f"{youtube_id}_{int(float(start)):06d}_{int(float(end)):06d}"


def visible_walk(root: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    """``os.walk(root)`` in sorted order without hidden folders and files (a leading ".": a trash
    folder, notebook checkpoints, macOS's ``._`` resource forks): ``(folder, its sub-folders,
    its files)``; emptying the sub-folder list stops the walk going below.

    Linked folders are followed (a class folder that links to a network share, as ``glob`` and
    torchvision's ImageFolder do), each real folder once: a second way to a folder already
    walked (a second link to it, or a link back to a folder above) is passed over, so nothing is
    listed twice and no loop runs forever.
    """
    entered = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in entered:
            dirnames.clear()
            continue
        entered.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        yield dirpath, dirnames, sorted(f for f in filenames if not f.startswith("."))


def index_files(
    root: str, exts: Sequence[str] = VIDEO_EXTS, folders: bool = False
) -> Dict[str, str]:
    """Map file name stems (or, with ``folders``, leaf folder names) under ``root`` to their path
    relative to ``root``; a stem that ends in yt-dlp's `` [<YouTube id>]`` is also found by that
    id. The first one found (sorted walk) wins for a stem seen twice. Hidden
    files and folders (a leading ".": a trash folder, macOS's ``._`` resource forks) are passed
    over."""
    found: Dict[str, str] = {}
    for dirpath, dirnames, filenames in visible_walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if folders:
            if not dirnames and dirpath != root:
                found.setdefault(os.path.basename(dirpath), rel_dir)
            continue
        for name in filenames:
            stem, ext = os.path.splitext(name)
            if ext.lower() in exts:
                path = os.path.normpath(os.path.join(rel_dir, name))
                found.setdefault(stem, path)
                tagged = _YT_DLP_ID.search(stem)
                if tagged:  # also found by its YouTube id alone
                    found.setdefault(tagged.group(1), path)
    return found


# yt-dlp's default file name, "<title> [<YouTube id>].<ext>": an 11-character id in brackets.
_YT_DLP_ID = re.compile(r" \[([A-Za-z0-9_-]{11})\]$")


def kinetics_rows(csv_path: str) -> List[Dict[str, str]]:
    """The rows of a Kinetics CSV (``label,youtube_id,time_start,time_end,split[,is_cc]``) as
    ``{column: value}``, names and values with the spaces around them dropped (a header written
    ``label, youtube_id, time_start, ...`` reads as the official one).

    Raises:
        AnnotationError: The CSV has no rows, or lacks a column (the test split has no labels).
    """
    with open_text(csv_path, newline="") as f:
        reader = csv.reader(f)
        header = [name.strip() for name in next(reader, [])]
        rows = [{name: value.strip() for name, value in zip(header, values + [""] * len(header))}
                for values in reader if any(value.strip() for value in values)]
    if not rows:
        raise AnnotationError(f"{csv_path}: no rows")
    lacking = [c for c in KINETICS_COLUMNS if c not in header]
    if lacking:
        raise AnnotationError(
            f"{csv_path}: a Kinetics CSV needs the columns {', '.join(KINETICS_COLUMNS)} "
            f"(missing: {', '.join(lacking)}; the test split has no labels and cannot be used)"
        )
    return rows


def kinetics_records(
    csv_path: str, data_root: str, classes: Optional[Sequence[str]] = None, frames: bool = False,
    *, rows: Optional[List[Dict[str, str]]] = None, index: Optional[Dict[str, str]] = None,
) -> Tuple[List[VideoRecord], List[str], List[str]]:
    """Read a Kinetics CSV (``label,youtube_id,time_start,time_end,split[,is_cc]``; spaces around
    names and values are dropped, :func:`kinetics_rows`).

    Files are found by name anywhere under ``data_root``: first the trimmed clip
    ``<id>_<start:06d>_<end:06d>.<ext>`` (any video extension, any sub-folder layout), else an
    untrimmed ``<id>.<ext>``, whose record then carries ``start``/``end`` so only that part is read.
    Rows without a file are left out (Kinetics downloads always miss some videos).

    Args:
        csv_path: The CSV.
        data_root: Folder holding the videos (any layout below it).
        classes: Class names in id order; None = ``classes.txt`` beside the CSV, else the sorted
            labels of this CSV (the standard Kinetics order).
        frames: Look for frame folders (named by the same stems) instead of video files.
        rows: The CSV's :func:`kinetics_rows`, when the caller has read them already.
        index: ``index_files(data_root, folders=frames)``, when the caller has walked the folder
            already (several CSVs of one folder: a Kinetics folder holds ~300k files).

    Returns:
        ``(records, classes, missing)``: ``missing`` lists the stems that had no file.

    Raises:
        AnnotationError: The CSV lacks a column, has no label column (the test split), has a time
            that is not a number, or a label is not among ``classes``; or no row has a file (one
            line naming the folder, a file found there and the names looked for).
    """
    if rows is None:
        rows = kinetics_rows(csv_path)
    if classes is None:
        classes = _names_file(os.path.join(os.path.dirname(os.path.abspath(csv_path)),
                                           "classes.txt"))
    if classes is None:
        classes = sorted({row["label"] for row in rows})
    label_ids = class_ids(classes, csv_path)
    if index is None:
        index = index_files(data_root, folders=frames)
    records, missing = [], []
    for line_no, row in enumerate(rows, start=2):
        name = row["label"]
        if name not in label_ids:
            raise AnnotationError(
                f"{csv_path}:{line_no}: label {name!r} is not among the {len(label_ids)} classes "
                "(the training data's for a validation or test CSV, else classes.txt beside the "
                "CSV or the CSV's own labels)")
        try:
            start, end = float(row["time_start"]), float(row["time_end"])
        except ValueError:
            raise AnnotationError(
                f"{csv_path}:{line_no}: time_start {row['time_start']!r} and time_end "
                f"{row['time_end']!r} must be numbers of seconds") from None
        stem = kinetics_stem(row["youtube_id"], start, end)
        if stem in index:
            records.append(VideoRecord(index[stem], -1, label_ids[name]))
        elif row["youtube_id"] in index:
            records.append(VideoRecord(index[row["youtube_id"]], -1, label_ids[name], start, end))
        else:
            missing.append(stem)
    if not records:
        raise AnnotationError(_none_found(csv_path, data_root, index, missing[0], frames))
    return records, list(classes), missing


def _none_found(csv_path: str, data_root: str, index: Dict[str, str], stem: str,
                frames: bool) -> str:
    """The message for a Kinetics CSV none of whose rows has a file under ``data_root``: the
    folder, one of its files (or that it holds none) and the names looked for, with the first
    row's ``stem`` as the example."""
    kind = "frame folders" if frames else "video files"
    found = sorted(set(index.values()))
    if not found:
        return (f"{csv_path}: none of its videos is under {data_root!r}, which holds no {kind}"
                f"{'' if frames else ' (' + ' '.join(VIDEO_EXTS) + ')'}: give the folder that "
                "holds them")
    if frames:
        names = (f"<youtube_id>_<start:06d>_<end:06d> (e.g. {stem!r}) or <youtube_id> "
                 "(untrimmed)")
    else:
        names = (f"<youtube_id>_<start:06d>_<end:06d>.<ext> (e.g. {stem + '.mp4'!r}), "
                 "<youtube_id>.<ext> (untrimmed) or yt-dlp's '<title> [<youtube_id>].<ext>'")
    return (f"{csv_path}: none of its videos is under {data_root!r}, which holds {len(found)} "
            f"{kind}, e.g. {found[0]!r}, but none named as the rows say: {names}, in any "
            "sub-folder: rename them to one of these names, or give the folder that holds them")


# ----------------------------------------------------------------------------- UCF101 / HMDB51


def _split_file(anno_path: str, pattern: str, split_id: int) -> str:
    if os.path.isdir(anno_path):
        path = os.path.join(anno_path, pattern.format(split_id))
        if not os.path.isfile(path):
            raise AnnotationError(f"{anno_path}: no {pattern.format(split_id)} in this folder")
        return path
    _check_split_number(anno_path, re.search(r"list0*(\d+)\.txt$", anno_path), split_id)
    return anno_path


def _check_split_number(path: str, named: Optional["re.Match"], split_id: int) -> None:
    """Stop when an official split file given by its path names another split than
    ``CONFIG.DATA.OFFICIAL_SPLIT`` (``named``: the match of its number in the file name)."""
    if named is not None and int(named.group(1)) != split_id:
        raise AnnotationError(
            f"{path} is split {int(named.group(1))}'s file, and CONFIG.DATA.OFFICIAL_SPLIT is "
            f"{split_id}: set OFFICIAL_SPLIT {int(named.group(1))}, or give the folder of the "
            "split files and OFFICIAL_SPLIT picks them")


def ucf101_records(anno_path: str, train: bool, split_id: int = 1) -> Records:
    """Read an official UCF101 split file (``trainlist0N.txt`` / ``testlist0N.txt``).

    Lines are ``Class/v_Class_g08_c01.avi [label]`` with 1-based labels (test lists have none);
    ids come from ``classInd.txt`` beside the file (``1 ApplyEyeMakeup``), shifted to 0-based.

    Args:
        anno_path: A split file, or the ``ucfTrainTestlist`` folder (then ``split_id`` and
            ``train`` pick the file).
        train: Which file to pick when ``anno_path`` is the folder.
        split_id: 1, 2 or 3.
    """
    name = "trainlist{:02d}.txt" if train else "testlist{:02d}.txt"
    path = _split_file(anno_path, name, split_id)
    class_file = os.path.join(os.path.dirname(os.path.abspath(path)), "classInd.txt")
    if not os.path.isfile(class_file):
        raise AnnotationError(f"{path}: UCF101 needs classInd.txt beside the split file")
    ids: Dict[str, int] = {}
    with open_text(class_file) as f:
        for line in f:
            if line.strip():
                number, cls = line.split()
                ids[cls] = int(number) - 1
    classes = [c for c, _ in sorted(ids.items(), key=lambda item: item[1])]
    lowered = {c.lower(): i for c, i in ids.items()}
    records = []
    with open_text(path) as f:
        for line_no, line in enumerate(f, start=1):
            parts = line.split()
            if not parts:
                continue
            video = parts[0].replace("\\", "/")
            # The class is the folder; some UCF101 names differ in case (HandStandPushups).
            folder = video.split("/")[0].lower()
            if folder not in lowered:
                raise AnnotationError(f"{path}:{line_no}: class {folder!r} is not in classInd.txt")
            records.append(VideoRecord(video, -1, lowered[folder]))
    return records, classes


def hmdb51_records(split_dir: str, train: bool, split_id: int = 1) -> Records:
    """Read the official HMDB51 splits (``<class>_test_split<N>.txt``, lines ``video.avi 1|2|0``:
    1 = train, 2 = test, 0 = not used). Classes are the sorted class names; paths are
    ``<class>/<video>``.

    Args:
        split_dir: The ``testTrainMulti_7030_splits`` folder (or any one of its files).
        train: Read the training (1) or the test (2) videos.
        split_id: 1, 2 or 3.
    """
    if os.path.isfile(split_dir):
        _check_split_number(split_dir, re.search(r"_test_split(\d+)\.txt$", split_dir),
                            split_id)
        split_dir = os.path.dirname(os.path.abspath(split_dir))
    suffix = f"_test_split{split_id}.txt"
    # Sorted by class name (as MMAction2's and gluoncv's HMDB51 ids are), not by file name:
    # "climb_stairs_test_split1.txt" sorts before "climb_test_split1.txt".
    classes = sorted(n[: -len(suffix)] for n in os.listdir(split_dir) if n.endswith(suffix))
    if not classes:
        raise AnnotationError(f"{split_dir}: no *{suffix} files (HMDB51 split folder expected)")
    wanted = "1" if train else "2"
    records = []
    for label, cls in enumerate(classes):
        with open_text(os.path.join(split_dir, cls + suffix)) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[-1] == wanted:
                    video = " ".join(parts[:-1])
                    records.append(VideoRecord(f"{cls}/{video}", -1, label))
    return records, classes


# ----------------------------------------------------------------------------- class folders


def _some(names: Sequence[str], quote: bool = True) -> str:
    """The first three of ``names``, joined for a message ("..." when there are more)."""
    shown = [repr(n) if quote else n for n in names[:3]]
    return ", ".join(shown + (["..."] if len(names) > 3 else []))


def class_names_of_folder(root: str) -> List[str]:
    """Sorted names of the sub-folders of ``root`` (the classes of a class-folder dataset); hidden
    ones (``.ipynb_checkpoints``, ``.git``: a leading ".") are not classes."""
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))
                  and not d.startswith("."))


def class_folder_records(root: str, kind: str = "videos",
                         classes: Optional[Sequence[str]] = None) -> Records:
    """A folder with one sub-folder per class; class ids follow the sorted folder names, or
    ``classes``.

    Hidden files and folders (a leading ".": macOS's ``._clip.mp4`` resource forks, notebook
    checkpoints) are passed over at every depth. A class folder without items keeps its id, with a
    warning.

    Args:
        root: The folder.
        kind: "videos" (video files at any depth), "frames" (each folder of images is one video)
            or "images" (each image file is one item).
        classes: The class names in id order, when they are known already (the training data's,
            for a validation or test folder): each sub-folder's items get its name's id there, a
            class may have no folder, and a folder whose name is not among them is an error.
            None = the sorted sub-folder names.

    Returns:
        ``(records, classes)`` with paths relative to ``root``, sorted within each class.
    """
    if not os.path.isdir(root):
        raise AnnotationError(f"{root!r} is not a folder")
    folders = class_names_of_folder(root)
    if not folders:
        raise AnnotationError(f"{root!r} has no class sub-folders")
    if classes is None:
        classes = folders
    ids = class_ids(classes, root)
    unknown = [name for name in folders if name not in ids]
    if unknown:
        raise AnnotationError(
            f"{root!r}: the class folder(s) {_some(unknown)} are not among the {len(ids)} "
            f"classes of the training data ({_some(list(ids))}): rename them to a training "
            "class, or move them out of the folder")
    records = []
    exts = IMAGE_EXTS if kind in ("images", "frames") else VIDEO_EXTS
    empty, passed_over = [], []
    entered: Dict[str, Tuple[str, str]] = {}  # real folder -> (class, the path it was found at)
    for name in folders:
        items = _class_items(root, name, kind, exts, passed_over, entered)
        if not items:
            empty.append(name)
        records += [VideoRecord(path, -1, ids[name]) for path in sorted(items)]
    if not records:
        raise AnnotationError(f"{root!r}: no {kind} found in its class sub-folders")
    _refuse_names_not_utf8(root, [*folders, *(r.path for r in records)])
    if empty:
        logger.warning("%s: %d class folder(s) hold no %s (%s): their classes have no examples "
                       "here (%s files count)", root, len(empty), kind, _some(empty, quote=False),
                       ", ".join(exts))
    if passed_over:
        _warn_passed_over(root, kind, exts, passed_over)
    return records, list(classes)


def _class_items(root: str, name: str, kind: str, exts: Sequence[str], passed_over: List[str],
                 entered: Dict[str, Tuple[str, str]]) -> List[str]:
    """The items of class folder ``name`` (paths relative to ``root``); files that are not items
    (neither hidden nor of ``exts``) are appended to ``passed_over``.

    A folder that two classes reach (one of them through a link) would give its videos two
    labels, so that stops with one line (within a class, :func:`visible_walk` reads each folder
    once). ``entered`` maps the real path of every folder read so far to its class and path.
    """
    items = []
    for dirpath, dirnames, files in visible_walk(os.path.join(root, name)):
        rel_dir = os.path.relpath(dirpath, root)
        first = entered.setdefault(os.path.realpath(dirpath), (name, rel_dir))
        if first[0] != name:
            raise AnnotationError(
                f"{root!r}: {first[1]!r} (class {first[0]!r}) and {rel_dir!r} (class {name!r}) "
                "are the same folder through a link, so its videos would have two classes: "
                "remove the link from the class they do not belong to")
        hits = [f for f in files if f.lower().endswith(exts)]
        passed_over += [os.path.relpath(os.path.join(dirpath, f), root)
                        for f in files if f not in hits]
        if kind == "frames":
            if hits:
                items.append(os.path.relpath(dirpath, root))
                dirnames.clear()  # a frame folder is a leaf
        else:
            items += [os.path.relpath(os.path.join(dirpath, f), root) for f in hits]
    return items


def _refuse_names_not_utf8(root: str, paths: Sequence[str]) -> None:
    """Stops when a name is not UTF-8 (an archive made with another encoding, e.g. Latin-1):
    lists and classes.txt are UTF-8 text, so such a name cannot be written into them."""
    bad = []
    for path in paths:
        if not path.isascii():
            try:
                path.encode("utf-8")
            except UnicodeEncodeError:
                bad.append(path)
    if bad:
        raise AnnotationError(
            f"{root!r}: {len(bad)} path(s) are not UTF-8, e.g. {os.fsencode(bad[0])!r}, so lists "
            "and classes.txt cannot hold them: rename them to UTF-8 (e.g. convmv -f latin1 -t "
            f"utf-8 -r --notest {root})")


def _warn_passed_over(root: str, kind: str, exts: Sequence[str], paths: List[str]) -> None:
    """One warning naming the files of the class folders that are not read, by extension."""
    counts: Dict[str, int] = {}
    for path in paths:
        ext = os.path.splitext(path)[1].lower() or "no extension"
        counts[ext] = counts.get(ext, 0) + 1
    by_ext = ", ".join(f"{ext} x{n}" for ext, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    logger.warning("%s: %d file(s) in the class folders are not read as %s (%s; e.g. %s): only "
                   "%s files count; list other files in an annotation list, which reads any file "
                   "the decoder opens", root, len(paths), kind, by_ext, _some(paths),
                   ", ".join(exts))


def write_classes(folder: str, classes: Sequence[str], required: bool = False) -> Optional[str]:
    """Write ``classes.txt`` into ``folder`` (atomically) unless it already says the same.

    Returns:
        The path written or already correct, or None when the folder is not writable (with
        ``required``, the OSError is raised instead).
    """
    path = os.path.join(folder, "classes.txt")
    text = "".join(f"{c}\n" for c in classes)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if required:
            raise
        logger.debug("could not write %s: %s", path, e)
        return None
    return path
