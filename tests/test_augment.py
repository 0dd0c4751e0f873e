"""RandAugment and random erasing of training clips (CONFIG.DATA.RAND_AUGMENT / RANDOM_ERASE):
timm's ops and boxes, one draw per clip, off by default, and a function of (SEED, epoch, index)
only."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from helpers import mini_clip_cfg
from PIL import Image

from zoo.config import ConfigError, get_cfg
from zoo.config.validation import validate_config
from zoo.data import build_dataset, transforms
from zoo.data.build import dataset_kwargs
from zoo.data.clip_augment import ClipRandAugment, erase_box, random_erase
from zoo.data.synthetic import generate

timm_aa = pytest.importorskip("timm.data.auto_augment")
timm_re = pytest.importorskip("timm.data.random_erasing")

POLICY = "rand-m7-n4-mstd0.5-inc1"


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> dict:
    """A generated 2-class dataset of 16-frame, 32x32 videos (4 training videos)."""
    root = str(tmp_path_factory.mktemp("mini") / "motion")
    return generate(root, num_classes=2, train_per_class=2, val_per_class=1, num_frames=16, size=32)


def _clip(frames=4, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (frames, 3, size, size), generator=g, dtype=torch.uint8)


def _record_ops(augment):
    """Wrap each timm op of ``augment`` to log (op name, its arguments) per call."""
    log = []
    for op in augment.transform.ops:
        def logged(img, *args, _fn=op.aug_fn, _name=op.name, **kwargs):
            log.append((_name, args))
            return _fn(img, *args, **kwargs)
        op.aug_fn = logged
    return log


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rand_augment_is_timms_ops_frame_by_frame(seed):
    clip = _clip()
    augment = ClipRandAugment(POLICY, 32)
    out = augment(clip, torch.Generator().manual_seed(seed))
    # The reference: timm's transform built here, on each frame with the same seeded draws.
    draw = int(torch.randint(0, 2**32, (1,), generator=torch.Generator().manual_seed(seed)))
    hparams = {"translate_const": int(32 * 0.45), "interpolation": Image.BICUBIC}
    reference = timm_aa.rand_augment_transform(POLICY, hparams)
    for t in range(clip.shape[0]):
        random.seed(draw)
        np.random.seed(draw)
        frame = Image.fromarray(clip[t].permute(1, 2, 0).numpy())
        expected = torch.from_numpy(np.array(reference(frame))).permute(2, 0, 1)
        assert torch.equal(out[t], expected), t
    assert out.dtype == torch.uint8 and out.shape == clip.shape


def test_rand_augment_draws_once_per_clip():
    clip = _clip(frames=3)
    augment = ClipRandAugment(POLICY, 32)
    log = _record_ops(augment)
    state = random.getstate(), np.random.get_state()[1].copy()
    changed = 0
    for seed in range(6):
        log.clear()
        out = augment(clip, torch.Generator().manual_seed(seed))
        per_frame = len(log) // 3
        assert len(log) == 3 * per_frame
        # Every frame: the same ops with the same magnitudes (and signs).
        assert log[:per_frame] == log[per_frame:2 * per_frame] == log[2 * per_frame:]
        changed += int(not torch.equal(out, clip))
    assert changed >= 4  # it does augment (an op may be skipped: p = 0.5 each)
    # The same frame in every position gets the same pixels.
    still = clip[:1].expand(3, -1, -1, -1)
    out = augment(still, torch.Generator().manual_seed(3))
    assert torch.equal(out[0], out[1]) and torch.equal(out[0], out[2])
    # The global RNGs are as they were.
    assert random.getstate() == state[0] and np.array_equal(np.random.get_state()[1], state[1])


def test_a_policy_timm_rejects_is_one_line():
    with pytest.raises(ConfigError, match="CONFIG.DATA.RAND_AUGMENT = 'rand-q3'"):
        ClipRandAugment("rand-q3", 32)
    cfg = get_cfg()
    for policy in ("", POLICY, "rand-m9-n2", "rand-m9-mstd0.5-inc1-tweights"):
        cfg.CONFIG.DATA.RAND_AUGMENT = policy
        validate_config(cfg)
    for policy in ("rand-x7", "original-mstd0.5", "m9-n2"):
        cfg.CONFIG.DATA.RAND_AUGMENT = policy
        with pytest.raises(ConfigError, match="CONFIG.DATA.RAND_AUGMENT"):
            validate_config(cfg)
    cfg.CONFIG.DATA.RAND_AUGMENT = ""
    cfg.CONFIG.DATA.RANDOM_ERASE = 1.5
    with pytest.raises(ConfigError, match="CONFIG.DATA.RANDOM_ERASE = 1.5"):
        validate_config(cfg)


def _timm_box(seed, probability, height, width):
    """The box timm's RandomErasing (mode pixel, one box) erases after random.seed(seed)."""
    random.seed(seed)
    image = torch.zeros(3, height, width)
    timm_re.RandomErasing(probability, mode="pixel", device="cpu")(image)
    rows, cols = torch.nonzero(image.abs().sum(0), as_tuple=True)
    if not len(rows):
        return None
    top, left = int(rows.min()), int(cols.min())
    return top, left, int(rows.max()) - top + 1, int(cols.max()) - left + 1


@pytest.mark.parametrize("size", [(32, 32), (24, 40)])
def test_erase_box_is_timms_box(size):
    boxes = 0
    for seed in range(40):
        ours = erase_box(random.Random(seed), 0.6, *size)
        assert ours == _timm_box(seed, 0.6, *size), seed
        boxes += ours is not None
    assert 10 < boxes < 40  # both outcomes were checked


def test_random_erase_is_one_box_in_every_frame():
    clip = torch.full((3, 4, 32, 32), 5.0)
    erased = 0
    for seed in range(5):
        out = random_erase(clip.clone(), 1.0, torch.Generator().manual_seed(seed))
        mask = (out != 5.0).any(0)  # (T, H, W)
        assert all(torch.equal(mask[0], m) for m in mask[1:])
        if mask[0].any():
            erased += 1
            rows, cols = torch.nonzero(mask[0], as_tuple=True)
            box = (int(rows.min()), int(cols.min()),
                   int(rows.max()) - int(rows.min()) + 1, int(cols.max()) - int(cols.min()) + 1)
            # A full rectangle, of timm's shape range, with fresh noise in each frame.
            assert int(mask[0].sum()) == box[2] * box[3]
            assert 0.01 < box[2] * box[3] / (32 * 32) < 0.4
            assert not torch.equal(out[:, 0], out[:, 1])
    assert erased == 5
    assert torch.equal(random_erase(clip.clone(), 0.0), clip)


def test_both_are_off_by_default(mini):
    cfg = mini_clip_cfg(mini)
    assert (cfg.CONFIG.DATA.RAND_AUGMENT, cfg.CONFIG.DATA.RANDOM_ERASE) == ("", 0.0)
    kwargs = dataset_kwargs(cfg, "train")
    assert "rand_augment" not in kwargs and "random_erase" not in kwargs
    # A default training clip is the transform of before: scale jitter, crop, flip, then bytes.
    dataset = build_dataset(cfg, "train", uint8_train_clips=True)
    clip = dataset[(0, 1)][0]
    g = dataset._item_generator(0, 1)
    frames, _ = dataset._read(1, g)
    s = dataset.settings
    expected = transforms.train_transform(frames, s.crop_size, s.train_short_side_range,
                                          s.random_flip, s.mean, s.std, generator=g,
                                          as_uint8=True)
    assert clip.dtype == torch.uint8 and torch.equal(clip, expected)


def test_random_erase_changes_one_box_of_the_default_clip(mini):
    plain = build_dataset(mini_clip_cfg(mini, "DATA.NORMALIZE_ON", "loader"), "train")
    erased = build_dataset(mini_clip_cfg(mini, "DATA.RANDOM_ERASE", "1.0"), "train",
                           uint8_train_clips=True)
    assert not erased.settings.uint8_train_clips  # the loader normalises erased clips
    a, b = plain[(2, 3)][0], erased[(2, 3)][0]
    assert b.dtype == torch.float32
    # The erasing draws come last: outside its box the clip is the plain one.
    mask = (a != b).any(0).any(0)
    assert mask.any() and not mask.all()


def as_list(clip):
    """A training item's clips as a list (a tuple of clips with CLIPS_PER_VIDEO > 1)."""
    return list(clip) if isinstance(clip, tuple) else [clip]


@pytest.mark.parametrize("extra", [["DATA.RAND_AUGMENT", POLICY],
                                   ["DATA.RAND_AUGMENT", POLICY, "DATA.RANDOM_ERASE", "0.5",
                                    "DATA.CLIPS_PER_VIDEO", "2", "TRAIN.BATCH_SIZE", "2"]])
def test_the_same_sample_and_epoch_give_the_same_clip(mini, extra):
    cfg = mini_clip_cfg(mini, *extra)
    first = build_dataset(cfg, "train", uint8_train_clips=True)
    items = [first[(epoch, 2)][0] for epoch in range(3)]
    # Another dataset (another process or loader worker), with other global RNG states.
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    second = build_dataset(cfg, "train", uint8_train_clips=True)
    again = [second[(epoch, 2)][0] for epoch in (2, 1, 0)][::-1]
    for x, y in zip(items, again):
        assert all(torch.equal(u, v) for u, v in zip(as_list(x), as_list(y)))
    assert not all(torch.equal(u, v) for u, v in zip(as_list(items[0]), as_list(items[1])))


def test_loader_batches_do_not_depend_on_the_worker_count(mini):
    from zoo.data import build_loader

    batches = []
    for workers in ("0", "2"):
        cfg = mini_clip_cfg(mini, "DATA.RAND_AUGMENT", POLICY, "DATA.RANDOM_ERASE", "0.5",
                            "TRAIN.BATCH_SIZE", "2", "DATA.NUM_WORKERS", workers)
        loader = build_loader(cfg, "train")
        batches.append([batch[0] for batch in loader])
    assert batches[0][0].dtype == torch.float32  # erased clips come normalised
    assert len(batches[0]) == len(batches[1]) == 2
    assert all(torch.equal(a, b) for a, b in zip(*batches))
