"""Registered datasets for each source ``CONFIG.DATA.DATASET`` can name besides VideoListDataset.

Each is a records provider of :mod:`zoo.data.lists.providers` composed with the one
:class:`~zoo.data.video_dataset.ClipDataset` (sampling, one decode per item, transforms, bad-video
handling): they differ only in where the list of videos comes from.

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

from .dataset_recipes import register_dataset
from .lists.providers import (
    AnnotationListRecords,
    ClassFolderRecords,
    HMDB51Records,
    ImageListRecords,
    KineticsRecords,
    UCF101Records,
)

# Images are one-frame clips: items are ``(C, 1, H, W)``, test items ``(num_crop, C, 1, H, W)``
# (the temporal settings do not apply). 2-D models fold the time axis into the batch.
IMAGE_SETTINGS = dict(decoder="image", clip_len=1, frame_rate=1, test_num_segment=1,
                      sampling="dense", num_segment=1)

register_dataset("KineticsDataset", KineticsRecords())
register_dataset("UCF101Dataset", UCF101Records())
register_dataset("HMDB51Dataset", HMDB51Records())
register_dataset("VideoFolderDataset", ClassFolderRecords())
# A list of frame folders or a class folder of frame folders: always the "frames" decoder.
register_dataset("FrameFolderDataset", AnnotationListRecords(), decoder="frames")
register_dataset("ImageFolderDataset", ClassFolderRecords("images"), **IMAGE_SETTINGS)
register_dataset("ImageListDataset", ImageListRecords(), **IMAGE_SETTINGS)
