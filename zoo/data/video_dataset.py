"""The dataset behind every source: sample frame indices, decode them once, transform, and replace
a video that cannot be read by another one."""

from __future__ import annotations

import logging
import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from . import sampling, transforms
from .annotations import AnnotationError, VideoRecord, read_annotations, read_class_names
from .decode_base import DecodeError, one_line, time_limit
from .decode_frames import DEFAULT_FRAME_TEMPLATE, FrameFolderReader, FrameTemplateMismatch
from .decoders import VideoReader, get_decoder, open_video
from .registry import DATASET_REGISTRY
from .robust import BadVideoTable

logger = logging.getLogger(__name__)

Item = Tuple[torch.Tensor, int, int, int]


class ClipDataset(Dataset):
    """Clips from a list of videos; subclasses say where the list comes from (:meth:`read_records`).

    Items are ``(clip, label, index, n_bad)``. For "train" and "val", ``clip`` is float
    ``(C, T, H, W)``; for "test" it is ``(V, C, T, H, W)`` with ``V = test_num_segment *
    test_num_crop`` views (segment-major), all cut from one decode of the video. A video that
    cannot be read (missing, empty, not a video, no video stream, an undecodable needed frame, far
    fewer frames than claimed, or slower than ``decode_timeout``) is replaced by another one: up to
    ``max_tries`` videos are tried, a warning names the file once, the video is remembered as bad
    by every loader worker, and ``n_bad`` is 1 (the item's own video was unreadable) or 0. ``label``
    and ``index`` then describe the video actually returned.

    Args:
        anno_path: The list (file or folder, depending on the source).
        data_path: Folder the list's paths are relative to.
        split: "train", "val" or "test".
        clip_len: Frames per clip ("dense", "uniform") or per snippet ("tsn").
        frame_rate: Stride between sampled frames.
        crop_size: Side of the square crop.
        short_side_size: Short side for val/test crops.
        train_short_side_range: ``[min, max]`` short side for training (scale jitter).
        random_flip: Randomly flip training clips left-right.
        mean: Per-channel mean (0..1 scale).
        std: Per-channel std (0..1 scale).
        test_num_segment: Temporal views per test video.
        test_num_crop: Spatial views per test video (1 or 3).
        seed: Seeds the choice of replacement videos for val/test, so evaluation is repeatable.
        max_tries: Videos tried for one item before giving up with an error.
        decoder: Reader name (see ``zoo.data.decoders.DECODERS``).
        decode_threads: Decoder threads per video, 0 = automatic.
        decode_timeout: Seconds allowed to open and decode one video (x ``test_num_segment`` for
            test items); 0 = no limit.
        sampling: "dense", "tsn" or "uniform" (see :mod:`zoo.data.sampling`).
        num_segment: Segments of the "tsn" scheme.
        color_jitter: ``[brightness, contrast, saturation, hue]`` for training clips.
        list_format: Format of text lists (``CONFIG.DATA.LIST_FORMAT``, see
            :mod:`zoo.data.list_formats`).
        frame_template: File name of frame ``i`` (from 1) in a frame folder, for the "frames"
            decoder (``CONFIG.DATA.FRAME_TEMPLATE``).
        frame_size: ``(height, width)`` every decoded frame is resized to before cropping,
            ignoring its aspect ratio (gluoncv's ``KEEP_ASPECT_RATIO: False``); empty = as
            decoded.

    Attributes:
        paths: Full video paths, in list order.
        labels: Integer labels, in list order.
        classes: Class names.
        num_classes_found: Largest label + 1.
        bad_videos: The shared table of videos found unreadable.
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
        decoder: str = "pyav",
        decode_threads: int = 0,
        decode_timeout: float = 0.0,
        sampling: str = "dense",
        num_segment: int = 1,
        color_jitter: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
        list_format: str = "auto",
        frame_template: str = DEFAULT_FRAME_TEMPLATE,
        frame_size: Sequence[int] = (),
        **unused: object,
    ) -> None:
        if split not in ("train", "val", "test"):
            raise ValueError(f"split must be train, val or test, got {split!r}")
        get_decoder(decoder)  # fail now, in the main process, on an unknown name
        self.anno_path = anno_path
        self.split = split
        self.decoder = decoder  # before read_records: a source may depend on it
        self.list_format = list_format
        self.frame_template = frame_template
        records, classes, root = self.read_records(anno_path, data_path, split)
        self.records: List[VideoRecord] = records
        self.paths: List[str] = [os.path.join(root, r.path) for r in records]
        self.labels: List[int] = [r.label for r in records]
        self.num_classes_found = max(self.labels) + 1
        self.classes = list(classes) + [str(i) for i in range(len(classes), self.num_classes_found)]
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
        self.decode_threads = decode_threads
        self.decode_timeout = float(decode_timeout)
        self.sampling = sampling
        self.num_segment = num_segment
        self.color_jitter = [float(v) for v in color_jitter]
        self.frame_size = tuple(int(v) for v in frame_size)
        self.bad_videos = BadVideoTable(len(records))
        # Frame counts that had to be counted (no count in the container): found once per worker.
        self._counted: Dict[int, int] = {}
        self._check_frames()

    def read_records(
        self, anno_path: str, data_path: str, split: str
    ) -> Tuple[List[VideoRecord], List[str], str]:
        """``(records, class names, folder the paths are relative to)``; override per source."""
        raise NotImplementedError

    def _reads_frames(self) -> bool:
        return issubclass(get_decoder(self.decoder), FrameFolderReader)

    def _check_frames(self) -> None:
        """Stop now, with one line, on what would otherwise make every video unreadable: offsets
        without the frames decoder, or frame files that FRAME_TEMPLATE does not name."""
        if not self._reads_frames():
            offset = next((r for r in self.records if r.offset), None)
            if offset is not None:
                raise AnnotationError(
                    f"{self.anno_path}: {offset.path!r} has a frame offset (an MMAction2 rawframe "
                    f"list) but CONFIG.DATA.DECODER is {self.decoder!r}: set it to 'frames' (or "
                    "CONFIG.DATA.DATASET FrameFolderDataset)"
                )
            return
        try:
            self._open(0).close()
        except FrameTemplateMismatch as e:
            raise AnnotationError(one_line(e)) from None
        except DecodeError:
            pass  # any other problem with the first video is handled like any bad video

    def _open(self, index: int) -> VideoReader:
        hint = self._counted.get(index, self.records[index].num_frames)
        if self._reads_frames():
            return get_decoder(self.decoder)(
                self.paths[index], num_frames_hint=hint, threads=self.decode_threads,
                template=self.frame_template, offset=self.records[index].offset,
            )
        return open_video(self.paths[index], self.decoder, hint, self.decode_threads)

    def __len__(self) -> int:
        return len(self.paths)

    # ------------------------------------------------------------------ bad videos

    def __getitem__(self, item: Union[int, Tuple[int, int]]) -> Item:
        # Training samplers hand over (epoch, index): the clip's random crop, flip, jitter and
        # window then depend only on (SEED, epoch, index), not on which process or data worker
        # loads it, so resumed runs and runs with other worker counts see the same clips.
        epoch, index = item if isinstance(item, tuple) else (0, item)
        generator = self._item_generator(epoch, index)
        failures: List[str] = []
        current: Optional[int] = index
        for attempt in range(self.max_tries):
            if self.bad_videos.is_bad(current):
                failures.append(f"{self.paths[current]} (found unreadable before)")
            else:
                try:
                    clip = self._load(current, generator)
                    return clip, self.labels[current], current, int(current != index)
                except Exception as e:  # any problem with this video: skip it, never stop
                    failures.append(f"{self.paths[current]} ({self._report(current, e)})")
            current = self._replacement(index, attempt, generator)
            if current is None:
                break
        raise RuntimeError(
            f"{len(failures)} videos in a row could not be read from {self.anno_path}: "
            + "; ".join(failures)
        )

    def _item_generator(self, epoch: int, index: int) -> torch.Generator:
        seed = np.random.SeedSequence([self.seed, epoch, index]).generate_state(1)[0]
        return torch.Generator().manual_seed(int(seed))

    def _report(self, index: int, error: Exception) -> str:
        kind = error.kind if isinstance(error, DecodeError) else "other"
        reason = one_line(error)
        prefix = f"{self.paths[index]}: "
        if reason.startswith(prefix):
            reason = reason[len(prefix):]  # the warning names the file already
        if not isinstance(error, DecodeError):
            reason = f"{error.__class__.__name__}: {reason}"
        if self.bad_videos.mark(index, kind):
            logger.warning("skipping unreadable video %s: %s", self.paths[index], reason)
        return reason

    def _replacement(self, index: int, attempt: int,
                     generator: torch.Generator) -> Optional[int]:
        """Another video to stand in for ``index``, preferring ones not known to be bad."""
        if len(self) == 1:
            return None
        if self.split != "train":
            # Evaluation is repeatable: the same bad video always gets the same stand-in.
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index * 31 + attempt)
        other = index
        for _ in range(16):
            other = int(torch.randint(0, len(self) - 1, (1,), generator=generator))
            other = other if other < index else other + 1  # never the bad video itself
            if not self.bad_videos.is_bad(other):
                break
        return other

    # ------------------------------------------------------------------ loading

    def _num_frames(self, index: int, video: VideoReader) -> int:
        if index in self._counted:
            return self._counted[index]
        count = video.num_frames
        if video.count_was_costly:
            self._counted[index] = count  # a count that needed a scan is paid once per worker
        return count

    def _frame_range(self, index: int, video: VideoReader, num_frames: int) -> Tuple[int, int]:
        """[first, end) frames to sample from: the record's start/end seconds, else all."""
        record = self.records[index]
        if (record.start < 0 and record.end < 0) or not video.fps:
            return 0, num_frames
        first = min(max(int(record.start * video.fps), 0), num_frames - 1)
        end = int(round(record.end * video.fps)) if record.end > 0 else num_frames
        end = min(max(end, first + 1), num_frames)
        return first, end

    def _time_limit(self) -> float:
        factor = self.test_num_segment if self.split == "test" else 1
        return self.decode_timeout * factor

    def _load(self, index: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        with time_limit(self._time_limit(), self.paths[index]):
            with self._open(index) as video:
                num_frames = self._num_frames(index, video)
                first, end = self._frame_range(index, video, num_frames)
                if self.split == "test":
                    segments = self._test_segments(end - first) + first
                    # Decode the union of every view's frames once, then index rows of it.
                    union, rows = np.unique(segments, return_inverse=True)
                    frames = video.decode(union.tolist())
                else:
                    indices = sampling.clip_indices(
                        end - first, self.clip_len, self.frame_rate, self.sampling,
                        self.num_segment, train=self.split == "train", generator=generator,
                    ) + first
                    frames = video.decode(indices.tolist())
        if self.frame_size:
            frames = transforms.resize_frames(frames, *self.frame_size)
        if self.split == "train":
            return transforms.train_transform(
                frames, self.crop_size, self.train_short_side_range, self.random_flip,
                self.mean, self.std, generator=generator, jitter=self.color_jitter,
            )
        if self.split == "val":
            return transforms.val_transform(
                frames, self.crop_size, self.short_side_size, self.mean, self.std
            )
        return transforms.test_views(
            frames, rows.reshape(segments.shape).tolist(), self.crop_size, self.short_side_size,
            self.test_num_crop, self.mean, self.std,
        )

    def _test_segments(self, num_frames: int) -> np.ndarray:
        return sampling.test_clip_indices(
            num_frames, self.clip_len, self.frame_rate, self.test_num_segment, self.sampling,
            self.num_segment,
        )

    def class_counts(self) -> List[int]:
        """Videos per class id, ``num_classes_found`` long."""
        counts = [0] * self.num_classes_found
        for label in self.labels:
            counts[label] += 1
        return counts


@DATASET_REGISTRY.register()
class VideoListDataset(ClipDataset):
    """A text list in ``list_format`` (gluoncv ``path num_frames label``, MMAction2, PySlowFast), a
    CSV with a header (``path,label[,start,end]``) or a folder of class sub-folders; class names
    from ``classes.txt`` beside the list.

    With ``decoder="frames"`` the list's paths are folders of extracted frames (the gluoncv /
    MMAction2 "rawframes" layout, files named by ``frame_template``). See :class:`ClipDataset`
    for the arguments and the items.
    """

    def read_records(
        self, anno_path: str, data_path: str, split: str
    ) -> Tuple[List[VideoRecord], List[str], str]:
        if os.path.isdir(anno_path):
            from .sources import class_folder_records

            kind = "frames" if self.decoder == "frames" else "videos"
            records, classes = class_folder_records(anno_path, kind)
            return records, classes, anno_path
        records = read_annotations(anno_path, self.list_format, data_path)
        classes = read_class_names(anno_path, max(r.label for r in records) + 1)
        return records, classes, data_path
