"""The one clip dataset: sample frame indices from a provider's records, decode them once,
transform, and replace a video that cannot be read by another one.

A dataset is a records provider (:mod:`zoo.data.lists.providers`: which videos, labels and class
names) plus :class:`ClipDataset` with typed :class:`~zoo.data.clip_settings.ClipSettings`.
:func:`~zoo.data.dataset_recipes.register_dataset` puts that pair in ``DATASET_REGISTRY`` under a
name ``CONFIG.DATA.DATASET`` can select.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from ..utils.moved import moved_attributes
from . import clip_augment, device_crops, sampling, transforms
from .batch_memory import BatchMemory, WrittenItems, batch_tensor
from .clip_settings import ClipSettings
from .decode.auto import AutoReader
from .decode.base import DecodeError, OutputSize, one_line, time_limit
from .decode.frames import FrameFolderReader, FrameTemplateMismatch
from .decode.registry import VideoReader, get_decoder
from .lists.annotations import AnnotationError, VideoRecord
from .lists.providers import VideoList
from .lists.records import local_path, reencoded_paths
from .robust import BadVideoTable, NoReadableVideo
from .time_ranges import frame_range

logger = logging.getLogger(__name__)

# (clip, label, index, n_bad), with resize_on_device and the clips' CropGeometry last.
Item = Tuple[Any, ...]
# Lists already said to be read from their re-encoded .mp4 files, in this process.
_SAID_REENCODED: set = set()
# Test items: the view rows into the decoded frames, ``(test_num_segment, frames per view)``.
Views = Optional[List[Optional[List[int]]]]
# A video whose clips decode from its start is worth re-encoding from this many frames: more
# than a Kinetics clip (10 s), where a clip's decode costs several times one with a seek.
_LONG_FROM_START = 300


def _reader_errors() -> Tuple[Type[BaseException], ...]:
    """What a reader may raise for a broken or unreachable file besides :class:`DecodeError`
    (the reader contract; zoo's readers convert everything else): the file system's errors and
    FFmpeg's, which a user's reader built on PyAV may let through."""
    errors: Tuple[Type[BaseException], ...] = (OSError,)
    try:
        import av
    except ImportError:  # pragma: no cover - PyAV is a dependency
        return errors
    return errors + (av.error.FFmpegError,)


READER_ERRORS = _reader_errors()

# What to do about a video its decoding library cannot open or decode.
_FIX = (" (a damaged or incomplete file: copy or download it again, or take it out of the "
        "list)")


class ClipDataset(Dataset):
    """Clips from the videos of a :class:`~zoo.data.lists.providers.VideoList`.

    Items are ``(clip, label, index, n_bad)``. For "train" and "val", ``clip`` is float
    ``(C, T, H, W)``; for "test" it is ``(V, C, T, H, W)`` with ``V = test_num_segment *
    test_num_crop`` views (segment-major), all cut from one decode of the video. With
    ``clips_per_video`` N > 1 a "train" clip is a tuple of N ``(C, T, H, W)`` clips, each with
    its own augmentation and (``clips_window`` "independent") its own random window, cut from one
    decode of the union of their frames
    (:func:`zoo.data.collate.collate_clips` flattens them into a batch of clips). A video that
    cannot be read (a :class:`~zoo.data.decode.base.DecodeError` from its reader: missing, empty,
    not a video, no video stream, an undecodable needed frame, far fewer frames than claimed, or
    slower than ``decode_timeout``) is replaced by another one: up to ``max_tries`` videos are
    tried, a warning names the file once, the video is remembered as bad by every loader worker,
    and ``n_bad`` is 1 (the item's own video was unreadable) or 0. ``label`` and ``index`` then
    describe the video actually returned. Any other exception (a bug in a transform, in a
    sampler, in a reader) propagates with its traceback.

    Args:
        videos: The records, class names and root folder, from a records provider.
        split: "train", "val" or "test".
        settings: Sampling, decoding and transform settings.

    Attributes:
        settings: The settings.
        anno_path: The list the videos came from (``videos.where``), named in messages.
        root: The folder the records' paths are relative to (``videos.root``).
        records: The records, in list order.
        paths: Full video paths, in list order.
        labels: Integer labels, in list order.
        classes: Class names (labels without a name are named by their number).
        num_classes_found: Largest label + 1.
        bad_videos: The shared table of videos found unreadable.
    """

    def __init__(self, videos: VideoList, split: str, settings: ClipSettings) -> None:
        if split not in ("train", "val", "test"):
            raise ValueError(f"split must be train, val or test, got {split!r}")
        if not videos.records:
            raise AnnotationError(f"{videos.where or 'the records provider'}: no videos found")
        # The reader class, resolved once (an unknown name fails here, in the main process).
        self.reader_class: Type[VideoReader] = get_decoder(settings.decoder)
        self.settings = settings
        self.split = split
        self.anno_path = videos.where
        self.root = videos.root
        self.records: List[VideoRecord] = list(videos.records)
        self.paths: List[str] = [local_path(videos.root, r.path) for r in self.records]
        paths = reencoded_paths(self.paths)
        if paths is not self.paths:
            if videos.where not in _SAID_REENCODED:  # once per list, not per dataset built
                _SAID_REENCODED.add(videos.where)
                logger.info("%s names %s; the folder holds its .mp4 (zoo-reencode's output): "
                            "reading the .mp4 files", videos.where,
                            os.path.basename(self.paths[0]))
            self.paths = paths
        self.labels: List[int] = [r.label for r in self.records]
        self.num_classes_found = max(self.labels) + 1
        self.classes = list(videos.classes) + [
            str(i) for i in range(len(videos.classes), self.num_classes_found)
        ]
        self.bad_videos = BadVideoTable(len(self.records))
        # Frame counts that had to be counted (no count in the container): found once per worker.
        self._counted: Dict[int, int] = {}
        # Training clips written straight into batches (write_batches), in which memory.
        self._write_batches = False
        self._batch_memory: Optional[BatchMemory] = None
        self._check_frames()
        if split == "train" and settings.rand_augment:
            # Built now, so that a policy timm does not read stops here, in the main process.
            clip_augment.rand_augment(settings.rand_augment, settings.crop_size)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The dataset API before records providers: a subclass overrides read_records and is
        # built as cls(**dataset_kwargs). It keeps working (see _init_from_list).
        if "read_records" in vars(cls) and "__init__" not in vars(cls):
            cls.__init__ = _init_from_list

    def read_records(
        self, anno_path: str, data_path: str, split: str
    ) -> Tuple[List[VideoRecord], List[str], str]:
        """``(records, class names, root)`` for a subclass built from ``dataset_kwargs`` (the
        dataset API before records providers; write a :class:`RecordsProvider` instead)."""
        raise NotImplementedError(f"{type(self).__name__} overrides no read_records")

    def _reads_frames(self, index: int = 0) -> bool:
        """Video ``index`` is a frame folder read with FRAME_TEMPLATE and its offset: the
        "frames" decoder, or a folder that "auto" reads (the AutoReader alone would read it
        with the default template and no offset)."""
        if issubclass(self.reader_class, FrameFolderReader):
            return True
        return (issubclass(self.reader_class, AutoReader) and index < len(self.paths)
                and os.path.isdir(self.paths[index]))

    def _check_frames(self) -> None:
        """Stop now, with one line, on what would otherwise make every video unreadable: offsets
        without the frames decoder, or frame files that FRAME_TEMPLATE does not name."""
        if not self._reads_frames():
            first = next((i for i, r in enumerate(self.records) if r.offset), None)
            if first is not None and not self._reads_frames(first):  # one look, not one per video
                offset = self.records[first]
                raise AnnotationError(
                    f"{self.anno_path}: {offset.path!r} has a frame offset (an MMAction2 rawframe "
                    f"list) but CONFIG.DATA.DECODER is {self.settings.decoder!r}: set it to "
                    "'frames' (or CONFIG.DATA.DATASET FrameFolderDataset)"
                )
            return
        if self.settings.target_fps > 0:
            logger.warning("%s: CONFIG.DATA.TARGET_FPS %g does not apply to frame folders (they "
                           "have no frame rate): their frames are sampled FRAME_RATE apart",
                           self.anno_path, self.settings.target_fps)
        try:
            self._open(0).close()
        except FrameTemplateMismatch as e:
            raise AnnotationError(one_line(e)) from None
        except DecodeError:
            pass  # any other problem with the first video is handled like any bad video

    def _open(self, index: int) -> VideoReader:
        s = self.settings
        hint = self._counted.get(index, self.records[index].num_frames)
        if self._reads_frames(index):
            folders = (self.reader_class if issubclass(self.reader_class, FrameFolderReader)
                       else FrameFolderReader)
            return folders(
                self.paths[index], num_frames_hint=hint, threads=s.decode_threads,
                template=s.frame_template, offset=self.records[index].offset,
            )
        video = self.reader_class(self.paths[index], num_frames_hint=hint,
                                  threads=s.decode_threads)
        size = self.output_size()
        if size is not None and hasattr(video, "set_output_size"):
            video.set_output_size(size)
        return video

    def output_size(self) -> Optional[OutputSize]:
        """The size readers may scale frames to while converting them: the first resize the
        split's transform makes (the largest training short side, the val/test short side, or
        ``frame_size``), so crops and flips then work on small frames. None = full frames.

        Frames that come back larger (readers that do not scale) or smaller (never enlarged) go
        through the same transform, which adapts to any size.
        """
        s = self.settings
        if not s.decode_resize:
            return None
        if s.frame_size:
            return OutputSize(height=s.frame_size[0], width=s.frame_size[1])
        if self.split == "train":
            return OutputSize(short_side=max(s.train_short_side_range))
        return OutputSize(short_side=s.short_side_size)

    def __len__(self) -> int:
        return len(self.paths)

    def probe(self, index: int) -> Optional[str]:
        """Open video ``index`` and decode the frames its item needs, as a loader worker would,
        without transforming them (the data check before training).

        Returns:
            Advice when such videos load slowly (a long file whose clips decode from its
            start), else None.

        Raises:
            DecodeError: The video cannot be read.
            DecoderLibraryError: The decoding library failed in a way no file explains.
        """
        seen: List[Tuple[bool, int]] = []  # (decodes from its start, frames) of the open video
        self._read(index, self._item_generator(0, index), opened=lambda video, frames: seen.append(
            (getattr(video, "decodes_from_start", False), frames)))
        from_start, frames = seen[0]
        if not from_start or frames < _LONG_FROM_START:
            return None
        return (f"{self.paths[index]} ({frames} frames) has no timestamps the reader can seek "
                "by (AVI, MPEG-TS, a raw stream), so each clip decodes from the file's start, "
                f"about {frames // 2} frames on average: re-encode such videos to MP4 "
                "(zoo-reencode) to decode each clip from the keyframe before it")

    # ------------------------------------------------------------------ bad videos

    def __getitem__(self, item: Union[int, Tuple[int, int]]) -> Item:
        return self._item(item)

    def write_batches(self, memory: Optional[BatchMemory] = None) -> None:
        """Have :meth:`__getitems__` write uint8 training clips straight into one batch tensor
        (in a loader worker: a buffer of ``memory``, else new shared memory), which the collate
        then hands over without copying the clips again (``zoo.data.build``). Each clip's pixels
        are the same as :meth:`__getitem__`'s."""
        self._write_batches, self._batch_memory = True, memory

    def __getitems__(self, keys: Sequence[Union[int, Tuple[int, int]]]) -> List[Item]:
        """The items of ``keys``, one batch (what a DataLoader asks its dataset for); see
        :meth:`write_batches`."""
        if not (self._write_batches and self.split == "train" and self.settings.uint8_train_clips
                and type(self).__getitem__ is ClipDataset.__getitem__):
            # (A subclass's own __getitem__ is what a DataLoader must call for each item.)
            return [self[key] for key in keys]
        n = self._clips()
        batch: Optional[torch.Tensor] = None
        slot: Optional[int] = None

        def rows(position: int, shape: Tuple[int, ...]) -> torch.Tensor:
            # The batch is made once the first video is decoded, when the clip shape is known.
            nonlocal batch, slot
            if batch is None:
                slot, batch = batch_tensor(self._batch_memory, (len(keys) * n, *shape),
                                           torch.uint8)
            if self.settings.resize_on_device and _same_but_square(batch.shape[1:], shape):
                pass  # cuts take the batch's square: write_cut resizes one that is larger
            elif tuple(batch.shape[1:]) != tuple(shape):
                raise ValueError(f"{self.anno_path}: clips of one batch differ in shape: "
                                 f"{tuple(batch.shape[1:])} and {tuple(shape)} (T, H, W, C)")
            return batch[position * n:(position + 1) * n]

        try:
            items = [self._item(key, functools.partial(rows, position))
                     for position, key in enumerate(keys)]
        except BaseException:
            if slot is not None:  # (a slot comes only from a BatchMemory)
                self._batch_memory.release(slot)  # no batch will be sent from it
            raise
        return WrittenItems(items, batch, slot)

    def _item(self, item: Union[int, Tuple[int, ...]],
              into: Optional[Callable[[Tuple[int, ...]], torch.Tensor]] = None,
              generator: Optional[torch.Generator] = None) -> Item:
        """One item; ``into(clip shape)``, when given, returns the ``(N, T, H, W, C)`` rows its N
        training clips are written to."""
        if isinstance(item, tuple) and len(item) == 6:
            return self._shaped_item(item, into)
        # Training samplers hand over (epoch, index): the clip's random crop, flip, jitter and
        # window then depend only on (SEED, epoch, index), not on which process or data worker
        # loads it, so resumed runs and runs with other worker counts see the same clips.
        epoch, index = item if isinstance(item, tuple) else (0, item)
        generator = generator or self._item_generator(epoch, index)
        failures: List[str] = []
        current: Optional[int] = index
        for attempt in range(self.settings.max_tries):
            if self.bad_videos.is_bad(current):
                failures.append(f"{self.paths[current]} (found unreadable before)")
            else:
                try:
                    frames, views = self._read(current, generator)
                except DecodeError as e:  # this video cannot be read: skip it, never stop
                    failures.append(f"{self.paths[current]} ({self._report(current, e)})")
                else:  # outside the try: an error in a transform is a bug, not a bad video
                    clip = self._transform(frames, views, generator, into)
                    if isinstance(clip, _Cuts):
                        return (clip.clips, self.labels[current], current,
                                int(current != index), clip.geometry)
                    return clip, self.labels[current], current, int(current != index)
            current = self._replacement(index, attempt, generator)
            if current is None:
                break
        raise NoReadableVideo(
            f"{len(failures)} videos in a row could not be read from {self.anno_path}: "
            + "; ".join(failures), failures)

    def _shaped_item(self, item: Tuple[int, ...],
                     into: Optional[Callable[[Tuple[int, ...]], torch.Tensor]] = None) -> Item:
        """A training item at a multigrid shape (``zoo.data.multigrid``): the key is ``(epoch,
        index, frames, crop, min short side, max frame stride)``; the stride is drawn from
        [FRAME_RATE, max] (PySlowFast's long-cycle sampling rate) when max is larger."""
        epoch, index, frames, crop, low, rate_max = (int(v) for v in item)
        plain = self.settings
        generator = self._item_generator(epoch, index)
        rate = plain.frame_rate
        if rate_max > rate:
            rate = int(torch.randint(rate, rate_max + 1, (1,), generator=generator))
        self.settings = dataclasses.replace(
            plain, clip_len=frames, crop_size=crop, frame_rate=rate,
            train_short_side_range=[low, max(low, int(plain.train_short_side_range[1]))])
        try:
            return self._item((epoch, index), into, generator)
        finally:
            self.settings = plain

    def _item_generator(self, epoch: int, index: int) -> torch.Generator:
        seed = np.random.SeedSequence([self.settings.seed, epoch, index]).generate_state(1)[0]
        return torch.Generator().manual_seed(int(seed))

    def _report(self, index: int, error: DecodeError) -> str:
        reason = one_line(error)
        prefix = f"{self.paths[index]}: "
        if reason.startswith(prefix):
            reason = reason[len(prefix):]  # the warning names the file already
        if self.bad_videos.mark(index, error.kind):
            # A library's own complaint ("cannot open (Invalid data ...)") says what, not why.
            fix = _FIX if reason.startswith(("cannot open (", "cannot decode")) else ""
            logger.warning("skipping unreadable video %s: %s%s", self.paths[index], reason, fix)
        return reason

    def _replacement(self, index: int, attempt: int,
                     generator: torch.Generator) -> Optional[int]:
        """Another video to stand in for ``index``, preferring ones not known to be bad."""
        if len(self) == 1:
            return None
        if self.split != "train":
            # Evaluation is repeatable: the same bad video always gets the same stand-in.
            generator = torch.Generator().manual_seed(
                self.settings.seed * 1_000_003 + index * 31 + attempt)
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

    def _frame_range(self, index: int, video: VideoReader, num_frames: int
                     ) -> Tuple[int, int, Optional[np.ndarray]]:
        """The record's frames and their times (:func:`~zoo.data.time_ranges.frame_range`)."""
        record = self.records[index]
        return frame_range(video, num_frames, record.start, record.end, self.paths[index],
                           with_times=self.settings.target_fps > 0)

    def _clips(self) -> int:
        """Clips per item: ``clips_per_video`` for training, else 1."""
        return self.settings.clips_per_video if self.split == "train" else 1

    def _time_limit(self) -> float:
        factor = self.settings.test_num_segment if self.split == "test" else self._clips()
        return self.settings.decode_timeout * factor

    def _read(self, index: int, generator: torch.Generator,
              opened: Optional[Callable[[VideoReader, int], None]] = None
              ) -> Tuple[torch.Tensor, Views]:
        """Open video ``index`` and decode the frames its item needs, once; ``opened`` (the data
        check's) is called with the open reader and the video's frame count.

        Returns:
            ``(frames, views)``: uint8 ``(T, H, W, 3)``; for test items and for training items
            of several clips ``views`` holds each view's (clip's) rows of ``frames`` (None = all
            of them, in order), else None.

        Raises:
            DecodeError: The video cannot be read (a file system or FFmpeg error that a reader
                let through becomes one too).
        """
        s = self.settings
        try:
            with time_limit(self._time_limit(), self.paths[index]):
                with self._open(index) as video:
                    num_frames = self._num_frames(index, video)
                    if opened is not None:
                        opened(video, num_frames)
                    first, end, times = self._frame_range(index, video, num_frames)
                    # Indices are drawn on the TARGET_FPS timeline (the video's own frames
                    # when it is 0), then mapped to the video's frames: by their times where
                    # they are shown at irregular times, else by the average rate.
                    steps = None
                    if (s.target_fps > 0 and times is not None
                            and not sampling.uniform(times[first:end])):
                        length, steps = sampling.on_times(times[first:end], s.target_fps)
                    else:
                        fps = video.fps if s.target_fps > 0 else None  # (a demux in MKV)
                        length, scale = sampling.on_timeline(end - first, fps, s.target_fps)
                    if self.split == "test":
                        segments = self._test_segments(length)
                    else:
                        # One clip per item, or several: each with its own random window, or
                        # all from one window ("shared": only their augmentations differ).
                        count = self._clips()
                        windows = 1 if s.clips_window == "shared" else count
                        segments = np.stack([sampling.clip_indices(
                            length, s.clip_len, s.frame_rate, s.sampling, s.num_segment,
                            train=self.split == "train", generator=generator,
                        ) for _ in range(windows)])
                    segments = (steps[segments] if steps is not None else
                                sampling.to_source(segments, scale, end - first)) + first
                    if self.split != "test" and windows == 1:
                        frames = video.decode(segments[0].tolist())
                        return frames, (None if count == 1 else [None] * count)
                    # Decode the union of every view's frames once, then index rows of it.
                    union, rows = np.unique(segments, return_inverse=True)
                    views = rows.reshape(segments.shape).tolist()
                    return video.decode(union.tolist()), views
        except DecodeError:
            raise
        except READER_ERRORS as e:
            raise DecodeError(
                f"{self.paths[index]}: {e.__class__.__name__}: {one_line(e)}", "other"
            ) from e

    def _transform(self, frames: torch.Tensor, views: Views, generator: torch.Generator,
                   into: Optional[Callable[[Tuple[int, ...]], torch.Tensor]] = None
                   ) -> torch.Tensor:
        s = self.settings
        if s.frame_size:
            frames = transforms.resize_frames(frames, *s.frame_size)
        if self.split == "train" and s.resize_on_device:
            return self._cuts(frames, views, generator, into)
        if self.split == "train":
            out = None
            if into is not None:
                length = _clip_length(frames, views)
                out = into((length, s.crop_size, s.crop_size, frames.shape[-1]))
            if views is None:
                return self._train_clip(frames, generator, out=None if out is None else out[0])
            # Each clip is augmented on its own, in order, from the one generator of the item. A
            # tuple, not a stacked tensor: the collate copies every clip into the batch once
            # (or, written into the batch already, not at all).
            return tuple(self._train_clip(
                frames, generator, None if rows is None else torch.as_tensor(rows),
                out=None if out is None else out[k])
                for k, rows in enumerate(views))
        if self.split == "val":
            return transforms.val_transform(frames, s.crop_size, s.short_side_size, s.mean, s.std)
        return transforms.test_views(
            frames, views, s.crop_size, s.short_side_size, s.test_num_crop, s.mean, s.std,
        )

    def _cuts(self, frames: torch.Tensor, views: Views, generator: torch.Generator,
              into: Optional[Callable[[Tuple[int, ...]], torch.Tensor]] = None) -> "_Cuts":
        """Training clips as unresized cuts in squares, and their geometry
        (:mod:`zoo.data.device_crops`): the same random draws as :meth:`_train_clip`."""
        s = self.settings
        height, width, channels = frames.shape[1:]
        length = _clip_length(frames, views)
        if into is not None:  # the batch's square (its first clip's), else this clip's
            side = device_crops.cut_side(height, width, s.crop_size, s.train_short_side_range)
            out = into((length, side, side, channels))
        else:  # a clip on its own: the square the settings allow for frames of any size
            side = device_crops.cut_side(s.train_short_side_range[1], s.train_short_side_range[1],
                                         s.crop_size, s.train_short_side_range)
            out = torch.empty((1 if views is None else len(views), length, side, side, channels),
                              dtype=torch.uint8)
        clips, geometry_rows = [], []
        for k, picked in enumerate([None] if views is None else views):
            box, flip = transforms.train_box(height, width, s.crop_size,
                                             s.train_short_side_range, s.random_flip, generator)
            geometry_rows.append(device_crops.write_cut(
                frames, box, flip, s.crop_size, out[k],
                None if picked is None else torch.as_tensor(picked)))
            clips.append(out[k].permute(3, 0, 1, 2))  # (C, T, S, S) view, as clips are handed
        geometry = device_crops.CropGeometry(torch.stack(geometry_rows))
        return _Cuts(clips[0] if views is None else tuple(clips), geometry)

    def _train_clip(self, frames: torch.Tensor, generator: torch.Generator,
                    rows: Optional[torch.Tensor] = None,
                    out: Optional[torch.Tensor] = None) -> torch.Tensor:
        s = self.settings
        return transforms.train_transform(
            frames, s.crop_size, s.train_short_side_range, s.random_flip, s.mean, s.std,
            generator=generator, jitter=s.color_jitter, rows=rows, as_uint8=s.uint8_train_clips,
            out=out, rand_augment=s.rand_augment, random_erase=s.random_erase,
        )

    def _test_segments(self, num_frames: int) -> np.ndarray:
        s = self.settings
        return sampling.test_clip_indices(
            num_frames, s.clip_len, s.frame_rate, s.test_num_segment, s.sampling, s.num_segment,
        )

    def class_counts(self) -> List[int]:
        """Videos per class id, ``num_classes_found`` long."""
        counts = [0] * self.num_classes_found
        for label in self.labels:
            counts[label] += 1
        return counts


def _clip_length(frames: torch.Tensor, views: Views) -> int:
    """Frames in each training clip: a view's rows, else all the decoded frames."""
    return len(views[0]) if views and views[0] is not None else len(frames)


class _Cuts:
    """A training item's clip(s) as cuts in squares and their geometry."""

    def __init__(self, clips: Any, geometry: device_crops.CropGeometry) -> None:
        self.clips, self.geometry = clips, geometry


def _same_but_square(batch_shape: Sequence[int], shape: Sequence[int]) -> bool:
    """Whether ``(T, S, S, C)`` clip shapes differ in the square's side only."""
    return (len(batch_shape) == len(shape) == 4 and batch_shape[0] == shape[0]
            and batch_shape[3] == shape[3])


def _init_from_list(
    self: ClipDataset, anno_path: str, data_path: str, split: str, *,
    list_format: str = "auto", official_split: int = 1, **settings: Any,
) -> None:
    """``cls(**dataset_kwargs)`` for a subclass that overrides ``read_records`` (the dataset API
    before records providers). ``settings`` are :class:`ClipSettings` fields: an unknown keyword
    is a TypeError, not ignored. ``read_records`` may use the attributes it could use then."""
    clip_settings = ClipSettings(**settings)
    self.anno_path, self.split = anno_path, split
    self.decoder, self.frame_template = clip_settings.decoder, clip_settings.frame_template
    self.list_format, self.official_split = list_format, official_split
    records, classes, root = self.read_records(anno_path, data_path, split)
    ClipDataset.__init__(self, VideoList(list(records), list(classes), root, anno_path), split,
                         clip_settings)


# Names that moved to zoo.data.dataset_recipes, importable from here for one more release.
__getattr__ = moved_attributes(__name__, {name: "zoo.data.dataset_recipes" for name in (
    "DatasetRecipe", "VideoListDataset", "register_dataset")})
