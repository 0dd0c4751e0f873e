"""CONFIG.DATA.NORMALIZE_ON: the training loader hands over uint8 clips ("device", the default)
and the training step normalises them after the move to its device; the model sees the same
numbers as with the float clips of NORMALIZE_ON "loader"."""

from __future__ import annotations

import pytest
import torch
from helpers import mini_clip_cfg

from zoo.config import ConfigError
from zoo.data import build_loader, normalization, transforms
from zoo.data.build import _takes
from zoo.data.collate import collate_train
from zoo.data.synthetic import generate
from zoo.train.step import TrainStep

MEAN, STD = [0.43, 0.45, 0.47], [0.2, 0.225, 0.25]


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> dict:
    """A generated 2-class dataset of 16-frame, 32x32 videos (6 training videos)."""
    root = str(tmp_path_factory.mktemp("mini") / "motion")
    return generate(root, num_classes=2, train_per_class=3, val_per_class=2, num_frames=16, size=32)


def _cfg(mini: dict, *extra: str):
    return mini_clip_cfg(mini, "DATA.MEAN", str(MEAN), "DATA.STD", str(STD),
                         "TRAIN.BATCH_SIZE", "4", *extra)


def _batches(cfg, epoch: int = 1):
    loader = build_loader(cfg, "train")
    loader.sampler.set_epoch(epoch)
    return list(loader)


def _step(normalization_=None) -> TrainStep:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 28 * 28, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return TrainStep(model, optimizer, None, torch.device("cpu"), 2,
                     normalization=normalization_)


def test_normalize_batch_is_normalize_value_for_value():
    g = torch.Generator().manual_seed(0)
    clips = torch.randint(0, 256, (2, 5, 3, 9, 7), dtype=torch.uint8, generator=g)  # (B,T,C,H,W)
    # The loader's float clips, one by one: (x / 255 - mean) / std in float64, then float32.
    want = (clips.double() / 255 - torch.tensor(MEAN, dtype=torch.float64).view(1, 1, 3, 1, 1)) \
        / torch.tensor(STD, dtype=torch.float64).view(1, 1, 3, 1, 1)
    want = want.transpose(1, 2)  # (B, C, T, H, W)
    per_clip = torch.stack([transforms.normalize(c, MEAN, STD) for c in clips])
    assert torch.allclose(per_clip.double(), want, atol=1e-5)
    for layout in (clips.transpose(1, 2), clips.transpose(1, 2).contiguous()):
        got = transforms.normalize_batch(layout, MEAN, STD)
        assert got.dtype == torch.float32 and torch.equal(got, per_clip)


@pytest.mark.parametrize("per_video", ["1", "2"])
def test_device_normalisation_feeds_the_model_the_loaders_numbers(mini, per_video):
    extra = ["DATA.CLIPS_PER_VIDEO", per_video, "DATA.CLIPS_WINDOW", "shared"]
    on_device = _batches(_cfg(mini, *extra))
    in_loader = _batches(_cfg(mini, "DATA.NORMALIZE_ON", "loader", *extra))
    assert len(on_device) == len(in_loader) > 0
    step = _step(normalization(_cfg(mini)))
    for (raw, labels, index, bad), (ref, ref_labels, ref_index, ref_bad) in zip(on_device,
                                                                               in_loader):
        assert raw.dtype == torch.uint8 and ref.dtype == torch.float32
        assert raw.shape == ref.shape == (4, 3, 8, 28, 28)
        # the batch is stored in pixel order (B, T, H, W, C): one straight copy per clip
        assert raw.permute(0, 2, 3, 4, 1).is_contiguous()
        assert torch.equal(labels, ref_labels) and torch.equal(index, ref_index)
        assert torch.equal(bad, ref_bad)
        assert torch.equal(step.prepare(raw), ref)


def test_validation_clips_stay_float(mini):
    clips = next(iter(build_loader(_cfg(mini, "VAL.BATCH_SIZE", "2"), "val")))[0]
    assert clips.dtype == torch.float32


def test_a_uint8_batch_without_normalization_is_refused():
    with pytest.raises(ValueError, match="normalization"):
        _step().prepare(torch.zeros(1, 3, 8, 28, 28, dtype=torch.uint8))
    floats = torch.randn(1, 3, 8, 28, 28)
    assert torch.equal(_step().prepare(floats), floats)  # float batches are taken as they are


def test_only_entries_that_take_the_keyword_get_it():
    def old_entry(anno_path, data_path, split, clip_len):  # a user's entry from before the key
        return None

    def open_entry(anno_path, **kwargs):
        return None

    assert not _takes(old_entry, "uint8_train_clips")
    assert _takes(open_entry, "uint8_train_clips")
    # float items (what such an entry returns) are collated as before
    batch = [(torch.ones(3, 2, 4, 4), 1, 0, 0), (torch.zeros(3, 2, 4, 4), 0, 1, 0)]
    clips, labels, index, bad = collate_train(batch)
    assert clips.dtype == torch.float32 and clips.is_contiguous()
    assert torch.equal(clips[0], batch[0][0]) and labels.tolist() == [1, 0]


def test_unknown_value_is_refused(mini):
    with pytest.raises(ConfigError, match="CONFIG.DATA.NORMALIZE_ON"):
        _cfg(mini, "DATA.NORMALIZE_ON", "gpu")
