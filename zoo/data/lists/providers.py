"""Records providers: where one split's videos come from, as plain data.

A dataset is composed of two parts (see ``docs/datasets.md``):

* a **records provider** (:class:`RecordsProvider`) reads an annotation list, a folder or an
  official split file and returns a :class:`VideoList`: one
  :class:`~zoo.data.lists.annotations.VideoRecord` per video (path relative to a root folder, label,
  frame count, optional start/end seconds and frame offset) and the class names;
* one clip dataset (:class:`zoo.data.video_dataset.ClipDataset`) samples, decodes and transforms
  clips from those records, with typed settings (:class:`zoo.data.clip_settings.ClipSettings`).

A provider is told what to read by a :class:`ListSource` (the list, the data root, the split and
the list options of ``CONFIG.DATA``). Providers hold no state beyond their own options and never
import torch, so the preparation scripts in ``datasets/`` can use them as they are.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from .annotations import image_list_records, read_annotations, read_class_names
from .records import AnnotationError, VideoRecord
from .sources import (
    class_folder_records,
    hmdb51_records,
    kinetics_records,
    ucf101_records,
    write_classes,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListSource:
    """What a provider reads: one split's list and the ``CONFIG.DATA`` options that say how.

    Attributes:
        anno_path: The list (a file or a folder, depending on the provider).
        data_path: Folder the list's paths are relative to (the list's own folder when the
            config leaves it empty).
        split: "train", "val" or "test".
        list_format: Format of text lists (``CONFIG.DATA.LIST_FORMAT``, see
            :mod:`zoo.data.lists.formats`).
        official_split: Which official split (1-3) of UCF101 / HMDB51.
        decoder: The reader the clips will be decoded with (``CONFIG.DATA.DECODER``); "frames"
            means the list's paths are folders of extracted frames.
        classes: The training data's class names in id order, given for a validation or test
            split: a source whose labels are names (class folders, a Kinetics CSV) numbers them
            in this order, so every split's ids mean the same classes. Empty = the source's own
            order.
    """

    anno_path: str
    data_path: str
    split: str
    list_format: str = "auto"
    official_split: int = 1
    decoder: str = "pyav"
    classes: Tuple[str, ...] = ()

    @property
    def frames(self) -> bool:
        """The list's paths are frame folders (the "frames" decoder reads them)."""
        return self.decoder == "frames"


@dataclass
class VideoList:
    """One split's videos.

    Attributes:
        records: One record per video, in list order; paths relative to ``root``.
        classes: Class names, entry ``i`` naming class ``i`` (may be shorter than the labels:
            the dataset names the missing ones by their number).
        root: Folder the records' paths are relative to.
        where: The list or folder read, named in messages.
    """

    records: List[VideoRecord]
    classes: List[str] = field(default_factory=list)
    root: str = ""
    where: str = ""


class RecordsProvider:
    """Reads one split's videos; subclasses implement :meth:`read`.

    Register a provider as a dataset with :func:`zoo.data.dataset_recipes.register_dataset`.
    """

    def read(self, source: ListSource) -> VideoList:
        """The videos of ``source`` (raise :class:`~zoo.data.lists.annotations.AnnotationError`, one
        line naming the file, when the list cannot be read)."""
        raise NotImplementedError


def _labelled(records: List[VideoRecord], anno_path: str, root: str) -> VideoList:
    """``records`` with the class names of ``classes.txt`` beside ``anno_path``."""
    classes = read_class_names(anno_path, max(r.label for r in records) + 1)
    return VideoList(records, classes, root, anno_path)


def _given(source: ListSource) -> Optional[List[str]]:
    """The class names ``source`` was given (the training data's), or None."""
    return list(source.classes) or None


def _require(records: List[VideoRecord], where: str) -> List[VideoRecord]:
    if not records:
        raise AnnotationError(f"{where}: no videos found")
    return records


@dataclass(frozen=True)
class AnnotationListRecords(RecordsProvider):
    """A text list in ``source.list_format`` (gluoncv, MMAction2, PySlowFast), a CSV with a
    header, or a folder of class sub-folders (video files, or frame folders when the decoder is
    "frames"); class names from ``classes.txt`` beside the list."""

    def read(self, source: ListSource) -> VideoList:
        if os.path.isdir(source.anno_path):
            kind = "frames" if source.frames else "videos"
            records, classes = class_folder_records(source.anno_path, kind, _given(source))
            return VideoList(records, classes, source.anno_path, source.anno_path)
        records = read_annotations(source.anno_path, source.list_format, source.data_path)
        return _labelled(records, source.anno_path, source.data_path)


# (CSV, data root, rows without a file) already reported: the data check, the class count and
# the dataset each read the CSV.
_SAID_MISSING: set = set()


@dataclass(frozen=True)
class KineticsRecords(RecordsProvider):
    """A Kinetics CSV; files found by name under the data root (see
    :func:`zoo.data.lists.sources.kinetics_records`). Rows without a file are left out with one
    warning that counts them."""

    def read(self, source: ListSource) -> VideoList:
        anno, root = source.anno_path, source.data_path
        records, classes, missing = kinetics_records(anno, root, _given(source), source.frames)
        if missing and (anno, root, len(missing)) not in _SAID_MISSING:  # once, not per read
            _SAID_MISSING.add((anno, root, len(missing)))
            logger.warning(
                "%s: %d of %d videos have no file under %s and are left out (e.g. %s)",
                anno, len(missing), len(missing) + len(records), root, ", ".join(missing[:3]),
            )
        return VideoList(_require(records, f"{anno} with videos in {root}"), classes, root, anno)


@dataclass(frozen=True)
class UCF101Records(RecordsProvider):
    """UCF101's official split files: training reads ``trainlist0N.txt``, validation and testing
    ``testlist0N.txt`` (N = ``source.official_split`` when the path is the folder)."""

    def read(self, source: ListSource) -> VideoList:
        records, classes = ucf101_records(
            source.anno_path, source.split == "train", source.official_split
        )
        return VideoList(_require(records, source.anno_path), classes, source.data_path,
                         source.anno_path)


@dataclass(frozen=True)
class HMDB51Records(RecordsProvider):
    """HMDB51's official split folder: training reads the videos marked 1, validation and
    testing those marked 2."""

    def read(self, source: ListSource) -> VideoList:
        records, classes = hmdb51_records(
            source.anno_path, source.split == "train", source.official_split
        )
        return VideoList(_require(records, source.anno_path), classes, source.data_path,
                         source.anno_path)


@dataclass(frozen=True)
class ClassFolderRecords(RecordsProvider):
    """A folder with one sub-folder per class (ids follow the sorted names); ``classes.txt`` is
    written into it (when writable) so the names travel with it.

    Attributes:
        kind: "videos", "frames" or "images" (see
            :func:`zoo.data.lists.sources.class_folder_records`);
            empty = frame folders with the "frames" decoder, else video files.
    """

    kind: str = ""

    def read(self, source: ListSource) -> VideoList:
        kind = self.kind or ("frames" if source.frames else "videos")
        records, classes = class_folder_records(source.anno_path, kind, _given(source))
        write_classes(source.anno_path, classes)
        return VideoList(records, classes, source.anno_path, source.anno_path)


@dataclass(frozen=True)
class ImageListRecords(RecordsProvider):
    """A list of images, ``relative/path label`` per line (paths may contain spaces) or a CSV with
    ``path,label``; class names from ``classes.txt`` beside the list."""

    def read(self, source: ListSource) -> VideoList:
        return _labelled(image_list_records(source.anno_path), source.anno_path, source.data_path)
