"""RandAugment and random erasing for whole clips: one draw per clip, the same change in every
frame (``CONFIG.DATA.RAND_AUGMENT``, ``CONFIG.DATA.RANDOM_ERASE``).

RandAugment is timm's (``timm.data.auto_augment.rand_augment_transform``, the policy strings of
VideoMAE, PySlowFast's MViTv2 and MMAction2's fine-tuning recipes), driven frame by frame. timm's
ops work on one PIL image at a time and draw the op choice, the magnitude noise, the sign and the
skip from Python's and numpy's global RNGs; :class:`ClipRandAugment` seeds both from the clip's
generator before every frame (and puts the global states back after), so each frame replays the
same draws: the same ops with the same magnitudes, exactly timm's pixels. zoo depends on timm for
this instead of rewriting the ops: the PIL ops (rotate, shear, posterize, equalize, enhance...) are
what the published recipes ran, and a tensor rewrite would match them only approximately.

Random erasing follows timm's ``RandomErasing`` (mode "pixel", one box: area 2% to 1/3 of the
frame, aspect ratio log-uniform in 0.3..3.3, up to 10 tries) with PySlowFast's video rule: one box
per clip, the same in every frame, filled with fresh normal noise per pixel and frame, after the
normalisation. It is a few lines, written here so that its draws come from the clip's generator
(tests check its box against timm's for the same draws).
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any, Optional, Tuple

import numpy as np
import torch

from ..config import ConfigError

# RandAugment's settings as PySlowFast's create_random_augment makes them: translate_const = 45%
# of the frame side, bicubic interpolation (its AUG.INTERPOLATION default) and timm's grey (128)
# fill for the corners that rotations, shears and translations uncover.
_TRANSLATE_SHARE = 0.45

# timm's RandomErasing defaults, which PySlowFast's recipes use.
ERASE_AREA = (0.02, 1 / 3)
ERASE_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))
ERASE_TRIES = 10


class ClipRandAugment:
    """timm's RandAugment with one draw per clip, applied to every frame alike.

    Args:
        policy: timm's policy string, e.g. ``rand-m7-n4-mstd0.5-inc1``.
        crop_size: Side of the frames it sees (sets timm's ``translate_const``, as PySlowFast does).

    Raises:
        ConfigError: timm does not read ``policy``, or is not installed.
    """

    def __init__(self, policy: str, crop_size: int) -> None:
        from PIL import Image

        try:
            from timm.data.auto_augment import rand_augment_transform
        except ImportError as e:
            raise ConfigError(f"CONFIG.DATA.RAND_AUGMENT = {policy!r} needs timm, which does not "
                              f"import ({e}): pip install timm") from None

        bicubic = getattr(Image, "Resampling", Image).BICUBIC
        hparams = {"translate_const": int(crop_size * _TRANSLATE_SHARE), "interpolation": bicubic}
        try:
            self.transform = rand_augment_transform(policy, hparams)
        except (AssertionError, ValueError, KeyError, IndexError) as e:
            raise ConfigError(f"CONFIG.DATA.RAND_AUGMENT = {policy!r} is not a timm RandAugment "
                             f"policy ({type(e).__name__}: {e}); e.g. rand-m7-n4-mstd0.5-inc1"
                             ) from None
        self.policy = policy

    def __call__(self, clip: torch.Tensor, generator: Optional[torch.Generator] = None
                 ) -> torch.Tensor:
        """Augment uint8 ``(T, C, H, W)`` (RGB); returns a new uint8 ``(T, C, H, W)`` tensor."""
        seed = int(torch.randint(0, 2**32, (1,), generator=generator))
        return self.replay(clip, seed)

    def replay(self, clip: torch.Tensor, seed: int) -> torch.Tensor:
        """Apply timm's transform to each frame with the global RNGs seeded by ``seed``."""
        from PIL import Image

        frames = clip.permute(0, 2, 3, 1).contiguous().numpy()
        out = np.empty_like(frames)
        py_state, np_state = random.getstate(), np.random.get_state()
        try:
            for t, frame in enumerate(frames):
                random.seed(seed)
                np.random.seed(seed)
                out[t] = np.asarray(self.transform(Image.fromarray(frame)))
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
        return torch.from_numpy(out).permute(0, 3, 1, 2)

    def __repr__(self) -> str:
        return f"ClipRandAugment({self.policy!r})"


@functools.lru_cache(maxsize=8)
def rand_augment(policy: str, crop_size: int) -> ClipRandAugment:
    """The :class:`ClipRandAugment` of ``policy``, built once per process (timm imports slowly)."""
    return ClipRandAugment(policy, crop_size)


def erase_box(rng: Any, probability: float, height: int, width: int
              ) -> Optional[Tuple[int, int, int, int]]:
    """timm's RandomErasing draws for one box: ``(top, left, h, w)``, or None (no erasing).

    Args:
        rng: A ``random.Random`` (or the ``random`` module): the same calls in the same order as
            timm's ``RandomErasing`` with ``max_count`` 1.
        probability: Chance of erasing.
        height: Frame height.
        width: Frame width.
    """
    if rng.random() > probability:
        return None
    area = height * width
    for _ in range(ERASE_TRIES):
        target_area = rng.uniform(*ERASE_AREA) * area
        aspect_ratio = math.exp(rng.uniform(*ERASE_LOG_ASPECT))
        h = int(round(math.sqrt(target_area * aspect_ratio)))
        w = int(round(math.sqrt(target_area / aspect_ratio)))
        if w < width and h < height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return top, left, h, w
    return None


def random_erase(clip: torch.Tensor, probability: float,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Erase one random box of a normalised float ``(C, T, H, W)`` clip, in place: the same box
    in every frame, per-pixel normal noise (new for each frame).

    Args:
        clip: Normalised float ``(C, T, H, W)``.
        probability: Chance of erasing (0 = never).
        generator: Torch RNG for the draws; None = the global one.

    Returns:
        ``clip``.
    """
    if probability <= 0:
        return clip
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    box = erase_box(random.Random(seed), probability, clip.shape[-2], clip.shape[-1])
    if box is None:
        return clip
    top, left, h, w = box
    noise = torch.randn((clip.shape[0], clip.shape[1], h, w), generator=generator,
                        dtype=clip.dtype)
    clip[..., top:top + h, left:left + w] = noise
    return clip
