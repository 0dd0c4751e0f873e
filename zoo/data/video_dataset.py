"""The dataset behind every annotation list: sample frame indices, decode them, transform."""

from __future__ import annotations

import logging
import os
from typing import Dict, List, Sequence, Set, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from . import sampling, transforms
from .annotations import read_annotations, read_class_names
from .build import DATASET_REGISTRY
from .decoders import VideoFile

logger = logging.getLogger(__name__)

# Bad videos already reported by this process: a broken file hit every epoch warns only once.
_WARNED: Set[str] = set()


@DATASET_REGISTRY.register()
class VideoListDataset(Dataset):
    """Clips from the videos of a gluoncv-style (or CSV) annotation list.

    Items are ``(clip, label, index, n_bad)``. For "train" and "val", ``clip`` is float
    ``(C, T, H, W)``; for "test" it is ``(V, C, T, H, W)`` with ``V = test_num_segment *
    test_num_crop`` views (segment-major), all cut from one decode of the video. A video that
    cannot be decoded is replaced by another one (up to ``max_tries`` attempts); ``label`` and
    ``index`` then describe the video actually returned, and ``n_bad`` says how many were skipped.

    Args:
        anno_path: Annotation list (text or ``.csv``).
        data_path: Folder the list's paths are relative to.
        split: "train", "val" or "test".
        clip_len: Frames per clip.
        frame_rate: Stride between sampled frames.
        crop_size: Side of the square crop.
        short_side_size: Short side for val/test resizing.
        train_short_side_range: ``[min, max]`` short side for training (scale jitter).
        random_flip: Randomly flip training clips left-right.
        mean: Per-channel mean (0..1 scale).
        std: Per-channel std (0..1 scale).
        test_num_segment: Temporal views per test video.
        test_num_crop: Spatial views per test video (1 or 3).
        seed: Seeds the choice of replacement videos for val/test, so evaluation is repeatable.
        max_tries: Videos tried for one item before giving up.

    Attributes:
        paths: Full video paths, in list order.
        labels: Integer labels, in list order.
        classes: Class names (``classes.txt`` beside the list, else the ids as strings).
        num_classes_found: Largest label + 1.
    """

    def __init__(
        self,
        anno_path: str,
        data_path: str,
        split: str,
        clip_len: int,
        frame_rate: int,
        crop_size: int,
        short_side_size: int,
        train_short_side_range: Sequence[int],
        random_flip: bool,
        mean: Sequence[float],
        std: Sequence[float],
        test_num_segment: int = 1,
        test_num_crop: int = 1,
        seed: int = 0,
        max_tries: int = 10,
        **unused: object,
    ) -> None:
        if split not in ("train", "val", "test"):
            raise ValueError(f"split must be train, val or test, got {split!r}")
        records = read_annotations(anno_path)
        self.anno_path = anno_path
        self.split = split
        self.paths: List[str] = [os.path.join(data_path, r.path) for r in records]
        self.labels: List[int] = [r.label for r in records]
        self._hints: List[int] = [r.num_frames for r in records]
        self.num_classes_found = max(self.labels) + 1
        self.classes = read_class_names(anno_path, self.num_classes_found)
        self.clip_len = clip_len
        self.frame_rate = frame_rate
        self.crop_size = crop_size
        self.short_side_size = short_side_size
        self.train_short_side_range = list(train_short_side_range)
        self.random_flip = random_flip
        self.mean = list(mean)
        self.std = list(std)
        self.test_num_segment = test_num_segment
        self.test_num_crop = test_num_crop
        self.seed = seed
        self.max_tries = max_tries
        # Frame counts that needed a full decode (no count in the container): found once per worker.
        self._counted: Dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int, int, int]:
        failures: List[str] = []
        current = index
        for attempt in range(self.max_tries):
            try:
                clip = self._load(current)
                return clip, self.labels[current], current, len(failures)
            except Exception as e:  # any decode problem: skip the video, never stop training
                reason = str(e).splitlines()[0] if str(e) else e.__class__.__name__
                failures.append(f"{self.paths[current]} ({reason})")
                if self.paths[current] not in _WARNED:
                    _WARNED.add(self.paths[current])
                    logger.warning("skipping unreadable video %s: %s", self.paths[current], reason)
                current = self._replacement(index, attempt)
        raise RuntimeError(
            f"{self.max_tries} videos in a row could not be read from {self.anno_path}: "
            + "; ".join(failures)
        )

    def _replacement(self, index: int, attempt: int) -> int:
        if len(self) == 1:
            return 0
        if self.split == "train":
            generator = None  # the worker's seeded global RNG: a different stand-in each epoch
        else:
            # Evaluation is repeatable: the same bad video always gets the same stand-in.
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index * 31 + attempt)
        other = int(torch.randint(0, len(self) - 1, (1,), generator=generator))
        return other if other < index else other + 1  # never the bad video itself

    def _load(self, index: int) -> torch.Tensor:
        hint = self._counted.get(index, self._hints[index])
        with VideoFile(self.paths[index], num_frames_hint=hint) as video:
            num_frames = video.num_frames
            if not video.stream_has_count:
                self._counted[index] = num_frames  # a full-decode count is paid once per worker
            if self.split == "test":
                return self._test_views(video, num_frames)
            if self.split == "train":
                indices = sampling.train_indices(num_frames, self.clip_len, self.frame_rate)
            else:
                indices = sampling.val_indices(num_frames, self.clip_len, self.frame_rate)
            frames = video.decode(indices)
        if self.split == "train":
            return transforms.train_transform(
                frames,
                self.crop_size,
                self.train_short_side_range,
                self.random_flip,
                self.mean,
                self.std,
            )
        return transforms.val_transform(
            frames, self.crop_size, self.short_side_size, self.mean, self.std
        )

    def _test_views(self, video: VideoFile, num_frames: int) -> torch.Tensor:
        segments = sampling.test_indices(
            num_frames, self.clip_len, self.frame_rate, self.test_num_segment
        )
        # Decode the union of every segment's frames once, then index rows of that decode.
        union, rows = np.unique(segments, return_inverse=True)
        frames = video.decode(union.tolist())
        rows = rows.reshape(segments.shape)
        return transforms.test_views(
            frames,
            rows.tolist(),
            self.crop_size,
            self.short_side_size,
            self.test_num_crop,
            self.mean,
            self.std,
        )

    def class_counts(self) -> List[int]:
        """Videos per class id, ``num_classes_found`` long."""
        counts = [0] * self.num_classes_found
        for label in self.labels:
            counts[label] += 1
        return counts
