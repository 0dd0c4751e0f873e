"""Predict the classes of video files (or image files, for a checkpoint trained on images) with a
trained checkpoint (multi-view, like testing)."""

from __future__ import annotations

import logging
import os
from typing import Dict, List, Sequence

import torch
import torch.nn.functional as F

from ..config import ConfigError
from ..data import fill_normalization
from ..data.decode.base import DecodeError
from ..data.lists.annotations import read_class_names
from ..data.lists.records import IMAGE_EXTS
from ..data.robust import NoReadableVideo
from ..models import model_facts
from ..models.classifier import check_logits
from ..utils.errors import UsageError, UserError
from .checkpoint_model import checkpoint_model
from .windows import parts_dataset, reads_images, video_span, windows

logger = logging.getLogger("zoo")


def describe_views(cfg) -> str:
    """The clip and views each video is scored with, in config keys (for the log)."""
    data = cfg.CONFIG.DATA
    if reads_images(cfg):
        return (f"{data.CROP_SIZE} px crops of images resized to {data.SHORT_SIDE_SIZE} px, "
                f"{data.TEST_NUM_CROP} view(s) (DATA.CROP_SIZE, SHORT_SIDE_SIZE, TEST_NUM_CROP)")
    if data.SAMPLING == "tsn":
        frames = f"{data.NUM_SEGMENT} segments x {data.CLIP_LEN} frame(s)"
    elif data.SAMPLING == "uniform":
        frames = f"{data.CLIP_LEN} frames spread over the video"
    else:
        frames = f"{data.CLIP_LEN} frames {data.FRAME_RATE} apart"
    side = data.TEST_SHORT_SIDE_SIZE or data.SHORT_SIDE_SIZE
    return (f"clips of {frames} at {data.CROP_SIZE} px (short side {side}), "
            f"{data.TEST_NUM_SEGMENT} x {data.TEST_NUM_CROP} views per video (DATA.CLIP_LEN, "
            "FRAME_RATE, CROP_SIZE, TEST_NUM_SEGMENT x TEST_NUM_CROP)")


class Predictor:
    """Loads a checkpoint once and scores videos with the config's test views; a checkpoint
    trained on images (``DATA.DATASET`` ImageFolderDataset, ImageListDataset) scores image files
    as testing does, with the "image" decoder and ``TEST_NUM_CROP`` views.

    Args:
        cfg: The run's config (crop and test view settings); the model name, kwargs and class
            count are the checkpoint's. Class names are the ones the checkpoint recorded, else
            those of the training list's classes.txt (or class folders).
        checkpoint: Path of a zoo checkpoint (its EMA weights are used when it has them).
        device: Where to run.
        state: The checkpoint's contents when the caller has read them (None = read the file).
    """

    images = False  # the checkpoint was trained on images (set from its config when loaded)

    def __init__(self, cfg, checkpoint: str, device: str = "cpu", state=None) -> None:
        # Model name, kwargs and class count come from the checkpoint (a warning names
        # differences); MODEL.PRETRAINED is not read.
        cfg, self.model, recorded = checkpoint_model(cfg, checkpoint, state)
        self.cfg = cfg = fill_normalization(cfg, model_facts(cfg.CONFIG.MODEL.NAME))
        self.device = torch.device(device)
        self.model.to(self.device).eval()
        self.images = reads_images(cfg)
        num_classes = cfg.CONFIG.DATA.NUM_CLASSES
        anno = cfg.CONFIG.DATA.TRAIN_ANNO_PATH or cfg.CONFIG.DATA.VAL_ANNO_PATH
        if recorded:  # the names the checkpoint's training data gave
            self.classes = recorded + [str(i) for i in range(len(recorded), num_classes)]
        else:
            self.classes = read_class_names(anno, num_classes) if anno else [
                str(i) for i in range(num_classes)]
        logger.info("%s: %s", checkpoint, describe_views(cfg))

    def _views(self, path: str, start: float = -1.0, end: float = -1.0) -> torch.Tensor:
        """The test views of ``path`` (of its ``start``..``end`` seconds when they are given),
        read as testing reads them."""
        try:
            return parts_dataset(self.cfg, "test", [(path, 0, start, end)])[0][0]
        except NoReadableVideo as e:  # its reason alone, not the temporary list's name
            raise DecodeError(e.failures[0] if e.failures else str(e), "other") from None

    def _top(self, views: torch.Tensor, topk: int) -> List[Dict]:
        logits = self.model(views.to(self.device))
        check_logits(logits, self.cfg.CONFIG.DATA.NUM_CLASSES, self.cfg.CONFIG.MODEL.NAME)
        probs = F.softmax(logits.float(), dim=1).mean(dim=0)
        top = probs.topk(min(topk, probs.numel()))
        return [{"class": int(c), "name": self.classes[int(c)], "prob": float(p)}
                for p, c in zip(top.values, top.indices)]

    @torch.no_grad()
    def predict(self, paths: Sequence[str], topk: int = 5, window: float = 0.0,
                stride: float = 0.0) -> List[Dict]:
        """Score each video as a whole, or window by window.

        Args:
            paths: Video files.
            topk: Classes kept per score.
            window: Seconds per window; 0 = the whole video.
            stride: Seconds between window starts; 0 = ``window`` (windows side by side).

        Returns:
            For each path ``{"video", "top": [{"class", "name", "prob"}, ...]}``, with a window
            ``{"video", "windows": [{"start", "end", "top"}, ...]}``, or ``{"video", "error"}``
            for a video that cannot be read (or, for a checkpoint trained on images, a file
            that is not an image).

        Raises:
            UsageError: A window is asked of a checkpoint trained on images.
        """
        if window > 0 and self.images:
            raise UsageError(f"--window {window:g}: the checkpoint was trained on images "
                             f"(DATA.DATASET {self.cfg.CONFIG.DATA.DATASET}), which have no "
                             "seconds to cut into windows; leave out --window")
        results = []
        for path in paths:
            if not os.path.isfile(path):
                results.append({"video": path, "error": "no such file"})
                continue
            if self.images and not path.lower().endswith(IMAGE_EXTS):
                results.append({"video": path, "error": (
                    f"not an image ({' '.join(IMAGE_EXTS)}): the checkpoint was trained on "
                    f"images (DATA.DATASET {self.cfg.CONFIG.DATA.DATASET})")})
                continue
            try:
                if window > 0:
                    first, end = video_span(path, self.cfg.CONFIG.DATA.DECODER)
                    results.append({"video": path, "windows": [
                        {"start": a, "end": b, "top": self._top(self._views(path, a, b), topk)}
                        for a, b in windows(first, end, window, stride or window)]})
                else:
                    results.append({"video": path, "top": self._top(self._views(path), topk)})
            except ConfigError:  # the model's or the config's: the same for every video
                raise
            except UserError as e:  # a video that cannot be read stops no other; a bug does
                results.append({"video": path, "error": str(e).splitlines()[0]})
        return results

