"""Windows of seconds along a video, for scoring (``zoo-predict --window``) or extracting features
(``zoo-extract-features --window``) a long video piece by piece, and the dataset that reads such
parts (or whole files) that no list of the run names."""

from __future__ import annotations

import csv
import math
import os
import tempfile
from typing import List, Sequence, Tuple

from ..data.decode.base import DecodeError
from ..data.decode.registry import open_video
from ..utils.errors import UsageError

# A file or part of one: (path, label, start seconds, end seconds); start < 0 = the whole file.
Part = Tuple[str, int, float, float]


def reads_images(cfg) -> bool:
    """Whether ``cfg``'s dataset is a source of images (its registered entry always uses the
    "image" decoder, as ImageFolderDataset and ImageListDataset do): its checkpoint scores
    image files, one frame and ``TEST_NUM_CROP`` views each."""
    from ..data.build import DATASET_REGISTRY  # registers the built-in datasets

    name = cfg.CONFIG.DATA.DATASET
    if name not in DATASET_REGISTRY:  # a user's dataset whose module is not imported
        return False
    return getattr(DATASET_REGISTRY.get(name), "fixed", {}).get("decoder") == "image"


def parts_dataset(cfg, split: str, parts: Sequence[Part]):
    """The ``split`` dataset of ``parts``, read as the run reads that split's list (its clip
    settings, decoder and views), whatever source the run trained on: the parts are written into
    a temporary CSV list (``path,label,start,end``, absolute paths) that the dataset reads when
    it is built. A run trained on extracted frames reads these files with ``auto``; a run
    trained on images (:func:`reads_images`) reads them as ImageListDataset does, with the
    "image" decoder and its ``TEST_NUM_CROP`` views, so an image scores as testing scored it.

    Raises:
        UsageError: A part of a run trained on images is a window of seconds.
    """
    from ..data import build_dataset

    images = reads_images(cfg)
    if images and any(a >= 0 for _, _, a, _ in parts):
        raise UsageError(f"{cfg.CONFIG.DATA.DATASET} (DATA.DATASET) is a source of images, "
                         "which have no seconds to cut into windows: leave out --window")
    with tempfile.TemporaryDirectory() as tmp:
        lst = os.path.join(tmp, "parts.csv")
        with open(lst, "w", encoding="utf-8", newline="") as f:
            out = csv.writer(f)
            if images:
                out.writerow(["path", "label"])
                out.writerows([os.path.abspath(path), label] for path, label, _, _ in parts)
            else:
                out.writerow(["path", "label", "start", "end"])
                out.writerows([os.path.abspath(path), label] + ([a, b] if a >= 0 else ["", ""])
                              for path, label, a, b in parts)
        cfg = cfg.clone()
        cfg.defrost()
        data = cfg.CONFIG.DATA
        data.SYNTHETIC.ENABLE, data.LIST_FORMAT = False, "auto"
        data.DATASET = "ImageListDataset" if images else "VideoListDataset"
        key = split.upper()
        data[f"{key}_ANNO_PATH"], data[f"{key}_DATA_PATH"] = lst, "/"
        if not images and data.DECODER in ("frames", "image"):
            data.DECODER = "auto"
        cfg.freeze()
        return build_dataset(cfg, split)


def video_span(path: str, decoder: str = "auto") -> Tuple[float, float]:
    """When ``path``'s video plays, ``(first, end)`` seconds of the container's presentation
    times: from its first frame's time (0, or later where the video stream starts after 0,
    behind an audio track) to the end of its last frame; its frames over its average rate where
    the reader knows no times.

    Raises:
        DecodeError: It cannot be read, or its frame rate is unknown.
    """
    if decoder in ("frames", "image"):
        decoder = "auto"
    with open_video(path, decoder) as video:
        if not video.fps:
            raise DecodeError(f"{path}: its frame rate is unknown, so it cannot be cut into "
                              "windows of seconds; read it whole (no --window)", "other")
        times = video.frame_times()
        if times is None or not len(times):
            return 0.0, video.num_frames / video.fps
        return max(float(times[0]), 0.0), float(times[-1]) + 1.0 / video.fps


def windows(first: float, end: float, window: float, stride: float) -> List[Tuple[float, float]]:
    """``(start, end)`` seconds (to the millisecond) of the windows that cover ``first`` to ``end``
    seconds of a video: one every ``stride`` seconds from ``first`` while it starts before
    ``end``, each ``window`` long or cut at ``end``; one window where ``end`` is not after
    ``first``."""
    if window <= 0 or stride <= 0:
        raise ValueError(f"window and stride must be > 0 seconds, got {window} and {stride}")
    seconds = max(end - first, 0.0)
    # Window k starts at k x stride, counted afresh (a sum of strides drifts: 20 x 0.3 s ends at
    # 5.9999 s, and a zero-length window would follow); a boundary within a microsecond of the
    # end is the end.
    count = max(1, math.ceil((seconds - window) / stride - 1e-6) + 1) if seconds > window else 1
    spans = []
    for k in range(count):
        start = k * stride
        stop = min(start + window, seconds)
        spans.append((round(first + start, 3), round(first + stop, 3)))
    return spans
