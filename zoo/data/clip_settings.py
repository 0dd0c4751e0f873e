"""The typed settings of :class:`~zoo.data.video_dataset.ClipDataset`: how clips are sampled,
decoded and transformed (``CONFIG.DATA``, filled by ``zoo.data.build.dataset_kwargs``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .decode.frames import DEFAULT_FRAME_TEMPLATE

__all__ = ["ClipSettings"]


@dataclass(frozen=True)
class ClipSettings:
    """How clips are sampled, decoded and transformed (``CONFIG.DATA``, see ``defaults.py``).

    Attributes:
        clip_len: Frames per clip ("dense", "uniform") or per snippet ("tsn").
        frame_rate: Stride between sampled frames.
        target_fps: Frame rate ``frame_rate`` counts in; 0 = each video's own frames
            (``CONFIG.DATA.TARGET_FPS``, see :func:`zoo.data.sampling.on_timeline`).
        crop_size: Side of the square crop.
        short_side_size: Short side of the val or test crops (the split's own).
        train_short_side_range: ``(min, max)`` short side for training (scale jitter).
        random_flip: Randomly flip training clips left-right.
        mean: Per-channel mean (0..1 scale).
        std: Per-channel std (0..1 scale).
        test_num_segment: Temporal views per test video.
        test_num_crop: Spatial views per test video (1 or 3).
        seed: Seeds the choice of replacement videos for val/test, so evaluation is repeatable.
        max_tries: Videos tried for one item before giving up with an error.
        decoder: Reader name (see ``zoo.data.decode.registry.DECODERS``).
        decode_threads: Decoder threads per video, 0 = automatic.
        decode_timeout: Seconds allowed to open and decode one video (x ``test_num_segment`` for
            test items, x ``clips_per_video`` for training items); 0 = no limit.
        sampling: "dense", "tsn" or "uniform" (see :mod:`zoo.data.sampling`).
        num_segment: Segments of the "tsn" scheme.
        color_jitter: ``(brightness, contrast, saturation, hue)`` for training clips.
        frame_template: File name of frame ``i`` (from 1) in a frame folder, for the "frames"
            decoder (``CONFIG.DATA.FRAME_TEMPLATE``).
        frame_size: ``(height, width)`` every decoded frame is resized to before cropping,
            ignoring its aspect ratio (gluoncv's ``KEEP_ASPECT_RATIO: False``); empty = as
            decoded.
        decode_resize: Let the reader scale frames to the transform's first size while it
            converts them (``CONFIG.DATA.DECODE_RESIZE``, see :meth:`ClipDataset.output_size`).
        clips_per_video: Training clips per item, each sampled and augmented on its own from
            one decode of the video (``CONFIG.DATA.CLIPS_PER_VIDEO``); val/test ignore it.
        clips_window: "independent" (each of the clips draws its own window) or "shared" (one
            window, N augmentations of it: PySlowFast's AUG.NUM_SAMPLE)
            (``CONFIG.DATA.CLIPS_WINDOW``).
        uint8_train_clips: Hand over training clips as uint8 pixels, for the training step to
            normalise on its device (``CONFIG.DATA.NORMALIZE_ON "device"``); val/test clips are
            always normalised here.
        rand_augment: timm RandAugment policy for training clips, one draw per clip, "" = off
            (``CONFIG.DATA.RAND_AUGMENT``).
        random_erase: Chance of erasing one box (the same in every frame) of a normalised
            training clip, 0 = off (``CONFIG.DATA.RANDOM_ERASE``; not with ``uint8_train_clips``).
        resize_on_device: Hand over training clips as unresized cuts with their geometry, for
            the training step to resize and flip on its device (``CONFIG.DATA.RESIZE_ON
            "device"``, see :mod:`zoo.data.device_crops`); needs ``uint8_train_clips`` and no
            colour jitter or RandAugment (they work on the resized crop).
    """

    clip_len: int
    frame_rate: int
    crop_size: int
    short_side_size: int
    train_short_side_range: Sequence[int]
    random_flip: bool
    mean: Sequence[float]
    std: Sequence[float]
    test_num_segment: int = 1
    test_num_crop: int = 1
    seed: int = 0
    max_tries: int = 10
    decoder: str = "pyav"
    decode_threads: int = 0
    decode_timeout: float = 0.0
    sampling: str = "dense"
    num_segment: int = 1
    color_jitter: Sequence[float] = (0.0, 0.0, 0.0, 0.0)
    frame_template: str = DEFAULT_FRAME_TEMPLATE
    frame_size: Sequence[int] = ()
    decode_resize: bool = True
    clips_per_video: int = 1
    clips_window: str = "independent"
    uint8_train_clips: bool = False
    rand_augment: str = ""
    random_erase: float = 0.0
    resize_on_device: bool = False
    target_fps: float = 0.0

    def __post_init__(self) -> None:
        # Sequences become tuples (the settings are shared by every loader worker, never edited).
        for name, kind in (("train_short_side_range", int), ("mean", float), ("std", float),
                           ("color_jitter", float), ("frame_size", int)):
            object.__setattr__(self, name, tuple(kind(v) for v in getattr(self, name)))
        object.__setattr__(self, "decode_timeout", float(self.decode_timeout))
        object.__setattr__(self, "random_erase", float(self.random_erase))
        object.__setattr__(self, "target_fps", float(self.target_fps))
        if self.random_erase and self.uint8_train_clips:
            raise ValueError("random_erase erases normalised clips: it cannot be combined with "
                             "uint8_train_clips")
        if self.resize_on_device and not (self.uint8_train_clips and not any(self.color_jitter)
                                          and not self.rand_augment):
            raise ValueError("resize_on_device needs uint8_train_clips and no color_jitter or "
                             "rand_augment (they work on the resized crop)")
