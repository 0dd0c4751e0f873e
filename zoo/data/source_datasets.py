"""Registered datasets for each source ``CONFIG.DATA.DATASET`` can name besides VideoListDataset.

All share :class:`~zoo.data.video_dataset.ClipDataset` (sampling, one decode per item, transforms,
bad-video handling) and differ only in where the list of videos comes from:

==================== ============================================= ==============================
DATASET              ``*_ANNO_PATH``                               ``*_DATA_PATH``
==================== ============================================= ==============================
KineticsDataset      Kinetics CSV (label,youtube_id,time_start,...) folder holding the videos
UCF101Dataset        trainlist0N.txt / testlist0N.txt, or the      the UCF-101 video folder
                     ucfTrainTestlist folder (+ OFFICIAL_SPLIT)
HMDB51Dataset        testTrainMulti_7030_splits folder             the HMDB51 video folder
                     (+ OFFICIAL_SPLIT)
VideoFolderDataset   folder with one sub-folder per class          (unused)
FrameFolderDataset   list of frame folders (gluoncv or MMAction2   folder the list is relative to
                     rawframes), or a class folder whose videos
                     are frame folders
ImageFolderDataset   folder with one sub-folder of images per class (unused)
ImageListDataset     ``path label`` per line (or CSV path,label)   folder the list is relative to
==================== ============================================= ==============================
"""

from __future__ import annotations

import logging
import os
from typing import List, Tuple

from .annotations import AnnotationError, VideoRecord, read_annotations, read_class_names
from .registry import DATASET_REGISTRY
from .sources import (
    class_folder_records,
    hmdb51_records,
    image_list_records,
    kinetics_records,
    ucf101_records,
    write_classes,
)
from .video_dataset import ClipDataset

logger = logging.getLogger(__name__)

Listing = Tuple[List[VideoRecord], List[str], str]


def _require_records(records: List[VideoRecord], where: str) -> List[VideoRecord]:
    if not records:
        raise AnnotationError(f"{where}: no videos found")
    return records


@DATASET_REGISTRY.register()
class KineticsDataset(ClipDataset):
    """Kinetics-400/600/700 from the official CSV; files found by the usual naming convention
    (see :func:`zoo.data.sources.kinetics_records`). Rows whose video is missing are left out
    with one warning that counts them."""

    def read_records(self, anno_path: str, data_path: str, split: str) -> Listing:
        records, classes, missing = kinetics_records(
            anno_path, data_path, frames=self.decoder == "frames"
        )
        if missing:
            logger.warning(
                "%s: %d of %d videos have no file under %s and are left out (e.g. %s)",
                anno_path, len(missing), len(missing) + len(records), data_path,
                ", ".join(missing[:3]),
            )
        return _require_records(records, f"{anno_path} with videos in {data_path}"), classes, \
            data_path


@DATASET_REGISTRY.register()
class UCF101Dataset(ClipDataset):
    """UCF101 from its official split files; ``official_split`` (1-3) picks the split when the
    annotation path is the ``ucfTrainTestlist`` folder. Training reads ``trainlist0N.txt``,
    validation and testing ``testlist0N.txt``."""

    def __init__(self, *args, official_split: int = 1, **kwargs) -> None:
        self.official_split = official_split
        super().__init__(*args, **kwargs)

    def read_records(self, anno_path: str, data_path: str, split: str) -> Listing:
        records, classes = ucf101_records(anno_path, split == "train", self.official_split)
        return _require_records(records, anno_path), classes, data_path


@DATASET_REGISTRY.register()
class HMDB51Dataset(ClipDataset):
    """HMDB51 from its official split folder (``<class>_test_split<N>.txt``); training reads the
    videos marked 1, validation and testing those marked 2."""

    def __init__(self, *args, official_split: int = 1, **kwargs) -> None:
        self.official_split = official_split
        super().__init__(*args, **kwargs)

    def read_records(self, anno_path: str, data_path: str, split: str) -> Listing:
        records, classes = hmdb51_records(anno_path, split == "train", self.official_split)
        return _require_records(records, anno_path), classes, data_path


@DATASET_REGISTRY.register()
class VideoFolderDataset(ClipDataset):
    """A folder with one sub-folder per class: class ids follow the sorted folder names, and
    ``classes.txt`` is written into the folder (when it is writable) so the names travel with it.
    """

    def read_records(self, anno_path: str, data_path: str, split: str) -> Listing:
        kind = "frames" if self.decoder == "frames" else "videos"
        records, classes = class_folder_records(anno_path, kind)
        write_classes(anno_path, classes)
        return records, classes, anno_path


@DATASET_REGISTRY.register()
class FrameFolderDataset(ClipDataset):
    """Videos stored as folders of extracted frames (``img_00001.jpg`` ..., named by
    ``frame_template``): a list whose paths are frame folders (gluoncv, or MMAction2 rawframes with
    or without offsets), or a class folder whose videos are frame folders. Always reads with the
    "frames" decoder."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["decoder"] = "frames"
        super().__init__(*args, **kwargs)

    def read_records(self, anno_path: str, data_path: str, split: str) -> Listing:
        if os.path.isdir(anno_path):
            records, classes = class_folder_records(anno_path, "frames")
            return records, classes, anno_path
        records = read_annotations(anno_path, self.list_format, data_path)
        return records, read_class_names(anno_path, max(r.label for r in records) + 1), data_path


class _ImageDataset(ClipDataset):
    """Images as one-frame clips: items are ``(C, 1, H, W)``, test items ``(num_crop, C, 1, H, W)``
    (the temporal settings do not apply). 2-D models fold the time axis into the batch."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.update(decoder="image", clip_len=1, frame_rate=1, test_num_segment=1,
                      sampling="dense", num_segment=1)
        super().__init__(*args, **kwargs)


@DATASET_REGISTRY.register()
class ImageFolderDataset(_ImageDataset):
    """torchvision's ImageFolder layout: one sub-folder of images per class (sorted names = ids)."""

    def read_records(self, anno_path: str, data_path: str, split: str) -> Listing:
        records, classes = class_folder_records(anno_path, "images")
        write_classes(anno_path, classes)
        return records, classes, anno_path


@DATASET_REGISTRY.register()
class ImageListDataset(_ImageDataset):
    """A list of images, ``relative/path label`` per line (paths may contain spaces) or a CSV with
    ``path,label``; class names from ``classes.txt`` beside the list."""

    def read_records(self, anno_path: str, data_path: str, split: str) -> Listing:
        records = image_list_records(anno_path)
        return records, read_class_names(anno_path, max(r.label for r in records) + 1), data_path
