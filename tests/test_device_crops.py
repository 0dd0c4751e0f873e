"""CONFIG.DATA.RESIZE_ON "device": the loader hands over unresized cuts and their geometry, the
training step resizes and flips them; the clips the model sees are the loader's own resized
clips, up to one level of rounding."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn as nn
from helpers import TINY_DATA, mini_clip_cfg, run_tool

from zoo.config import ConfigError
from zoo.data import build_loader, transforms
from zoo.data.collate import collate_train
from zoo.data.dataset_recipes import VideoListDataset
from zoo.data.device_crops import (
    CropGeometry,
    batch_geometry,
    cut_side,
    resize_cuts,
    write_cut,
)
from zoo.data.synthetic import generate, write_video
from zoo.train.precise_bn import recompute_bn_stats
from zoo.train.step import TrainStep

MEAN, STD = [0.45, 0.45, 0.45], [0.225, 0.225, 0.225]


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> dict:
    """A generated 2-class dataset of 16-frame, 32x32 videos (6 training videos)."""
    root = str(tmp_path_factory.mktemp("mini") / "motion")
    return generate(root, num_classes=2, train_per_class=3, val_per_class=2, num_frames=16, size=32)


def _loader_and_device(frames: torch.Tensor, box, flip: bool, crop: int):
    """The loader's resized clip and the device path's, both uint8 ``(T, C, crop, crop)``."""
    expected = transforms.crop_resize(transforms.as_clip(frames), box, crop, flip=flip)
    side = cut_side(*frames.shape[1:3], crop, [crop, crop])
    square = torch.zeros((frames.shape[0], side, side, 3), dtype=torch.uint8)
    row = write_cut(frames, box, flip, crop, square)
    cuts = square.permute(3, 0, 1, 2).unsqueeze(0)  # (1, C, T, S, S), as a batch hands them over
    got = resize_cuts(cuts, CropGeometry(row.view(1, 3)))[0].transpose(0, 1)
    return expected, got, row


@pytest.mark.parametrize("side", [24, 28, 35])  # enlarged, the crop's own size, shrunk
@pytest.mark.parametrize("flip", [False, True])
def test_the_device_resize_is_the_loaders_up_to_one_level(side, flip):
    g = torch.Generator().manual_seed(side + 100 * flip)
    frames = torch.randint(0, 256, (5, 40, 52, 3), dtype=torch.uint8, generator=g)
    expected, got, row = _loader_and_device(frames, (3, 11, side, side), flip, 28)
    assert row.tolist() == [side, int(flip), 28]
    assert got.dtype == torch.uint8 and got.shape == expected.shape == (5, 3, 28, 28)
    diff = (got.int() - expected.int()).abs()
    assert diff.max() <= 1 and diff.float().mean() < 0.5
    if side == 28:  # nothing to resize: a copy (and a flip)
        assert torch.equal(got, expected)
    # The flip was applied once: the unflipped clip is far from it.
    other = transforms.crop_resize(transforms.as_clip(frames), (3, 11, side, side), 28,
                                   flip=not flip)
    assert (other.int() - got.int()).abs().float().mean() > 20


def test_a_cut_larger_than_the_square_is_resized_in_the_worker():
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (4, 48, 64, 3), dtype=torch.uint8, generator=g)
    square = torch.zeros((4, 30, 30, 3), dtype=torch.uint8)  # a batch's square of side 30
    row = write_cut(frames, (2, 5, 40, 40), True, 28, square)
    assert row.tolist() == [28, 0, 28]  # already resized and flipped: the device only copies
    expected = transforms.crop_resize(transforms.as_clip(frames), (2, 5, 40, 40), 28, flip=True)
    got = resize_cuts(square.permute(3, 0, 1, 2)[None], CropGeometry(row.view(1, 3)))[0]
    assert torch.equal(got.transpose(0, 1), expected)


def test_resize_cuts_refuses_a_geometry_of_another_batch():
    cuts = torch.zeros((2, 3, 4, 30, 30), dtype=torch.uint8)
    with pytest.raises(ValueError, match="crop geometry of 1 clips"):
        resize_cuts(cuts, CropGeometry(torch.tensor([[28, 0, 28]])))
    with pytest.raises(ValueError, match=r"crop sizes \[24, 28\]"):
        resize_cuts(cuts, CropGeometry(torch.tensor([[28, 0, 28], [24, 0, 24]])))


def test_the_square_is_the_largest_cut_the_frames_allow():
    assert cut_side(256, 340, 224, [256, 320]) == 224  # short side 256 at the minimum: 224
    assert cut_side(320, 427, 224, [256, 320]) == 280  # frames scaled to 320: up to 280
    assert cut_side(200, 300, 224, [256, 320]) == 224  # small frames: never below the crop
    assert cut_side(32, 48, 28, [32, 36]) == 28


def _batches(cfg, count: int):
    loader = build_loader(cfg, "train")
    loader.sampler.set_epoch(3)
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == count:
            break
    return out


@pytest.mark.parametrize("workers,per_video", [(0, 1), (2, 1), (2, 2)])
def test_the_loaders_batches_resized_on_the_device_are_its_resized_batches(mini, workers,
                                                                           per_video):
    extra = ["TRAIN.BATCH_SIZE", "4", "DATA.NUM_WORKERS", str(workers),
             "DATA.CLIPS_PER_VIDEO", str(per_video), "DATA.RANDOM_FLIP", "True"]
    resized = _batches(mini_clip_cfg(mini, *extra), 2 if per_video == 1 else 3)
    cut = _batches(mini_clip_cfg(mini, *extra, "DATA.RESIZE_ON", "device"), len(resized))
    flips = 0
    for plain, cuts in zip(resized, cut):
        geometry = batch_geometry(cuts)
        assert batch_geometry(plain) is None and geometry is not None
        assert len(cuts) == len(plain) + 1 and len(geometry) == cuts[0].shape[0] == 4
        for a, b in zip(plain[1:], cuts[1:4]):  # labels, indices, skipped videos: the same
            assert torch.equal(a, b)
        clips = resize_cuts(cuts[0], geometry)
        assert clips.shape == plain[0].shape == (4, 3, 8, 28, 28)
        assert clips.is_contiguous(memory_format=torch.channels_last_3d)
        assert (clips.int() - plain[0].int()).abs().max() <= 1
        flips += int(geometry.table[:, 1].sum())
    assert flips > 0  # the flip went to the device too


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory) -> dict:
    """Two videos of other sizes (32x48 and 48x64) in one list."""
    root = tmp_path_factory.mktemp("sizes")
    g = np.random.default_rng(0)
    for name, (h, w) in (("small.mp4", (32, 48)), ("large.mp4", (48, 64))):
        write_video(str(root / name), g.integers(0, 256, (12, h, w, 3), dtype=np.uint8))
    (root / "list.txt").write_text("small.mp4 12 0\nlarge.mp4 12 1\n")
    return {"root": str(root), "list": str(root / "list.txt")}


def test_a_batch_of_videos_of_two_sizes(two_sizes):
    def dataset(device: bool) -> VideoListDataset:
        ds = VideoListDataset(
            anno_path=two_sizes["list"], data_path=two_sizes["root"], split="train", clip_len=4,
            frame_rate=2, crop_size=28, short_side_size=32, train_short_side_range=[32, 36],
            random_flip=True, mean=MEAN, std=STD, decoder="pyav", decode_resize=False,
            uint8_train_clips=True, resize_on_device=device)
        ds.write_batches(None)
        return ds

    keys = [(1, 0), (1, 1)]  # the small video first: the batch's square is its own (28)
    plain = collate_train(dataset(False).__getitems__(keys))
    cuts = collate_train(dataset(True).__getitems__(keys))
    geometry = batch_geometry(cuts)
    assert cuts[0].shape[-1] == 28 and geometry.table[1, 0] == 28  # the large one: in the worker
    assert (resize_cuts(cuts[0], geometry).int() - plain[0].int()).abs().max() <= 1


@pytest.mark.parametrize("key,value,fix", [
    ("DATA.COLOR_JITTER", "[0.4, 0.4, 0.4, 0.0]", "COLOR_JITTER \\[0, 0, 0, 0\\]"),
    ("DATA.RAND_AUGMENT", "rand-m7-n4", 'RAND_AUGMENT ""'),
    ("DATA.RANDOM_ERASE", "0.25", "RANDOM_ERASE 0"),
    ("DATA.NORMALIZE_ON", "loader", "NORMALIZE_ON device"),
])
def test_what_needs_the_loaders_resized_crop_is_refused(mini, key, value, fix):
    with pytest.raises(ConfigError, match=f"RESIZE_ON = 'device' but CONFIG.{key} = .* works on "
                                          f"the crop the loader resizes: set {fix} or RESIZE_ON "
                                          "loader"):
        mini_clip_cfg(mini, "DATA.RESIZE_ON", "device", key, value)
    with pytest.raises(ConfigError, match="RESIZE_ON = 'gpu' is not allowed: expected loader or "
                                          "device"):
        mini_clip_cfg(mini, "DATA.RESIZE_ON", "gpu")


def _bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), nn.BatchNorm3d(4), nn.ReLU(),
                         nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(4, 2))


def test_the_step_and_precise_bn_take_cuts(mini):
    extra = ["TRAIN.BATCH_SIZE", "4", "DATA.RANDOM_FLIP", "True"]
    cfgs = [mini_clip_cfg(mini, *extra), mini_clip_cfg(mini, *extra, "DATA.RESIZE_ON", "device")]
    losses, stats = [], []
    for cfg in cfgs:
        model = _bn_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        step = TrainStep(model, opt, sched, torch.device("cpu"), 2, normalization=(MEAN, STD))
        batch = _batches(cfg, 1)[0]
        losses.append(float(step(batch[0], batch[1], batch_geometry(batch))))
        loader = build_loader(cfg, "train")
        loader.sampler.set_epoch(3)
        assert recompute_bn_stats(model, loader, 1, torch.device("cpu"), step.prepare) == 1
        stats.append(model[1].running_mean.clone())
    assert losses[0] == pytest.approx(losses[1], rel=1e-3)
    assert torch.allclose(stats[0], stats[1], atol=1e-3)


@pytest.mark.slow
def test_training_with_crops_resized_on_the_device(tmp_path, synth_root, toy_model_file):
    """The training tool end to end, a loader worker and two clips per video: the same losses
    as with the loader's resize, up to rounding."""
    common = ["--extra-modules", toy_model_file, "MODEL.NAME", "toy_conv3d",
              "DDP_CONFIG.NUM_CPU_PROCS", "1", "DATA.SYNTHETIC.ROOT", synth_root,
              "LOG.BASE_PATH", str(tmp_path), *TINY_DATA, "DATA.NUM_WORKERS", "1",
              "DATA.CLIPS_PER_VIDEO", "2", "TRAIN.BATCH_SIZE", "4",
              "DATA.SYNTHETIC.TRAIN_PER_CLASS", "8", "TRAIN.EPOCH_NUM", "2"]
    losses = {}
    for place in ("loader", "device"):
        r = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", place, "DATA.RESIZE_ON", place])
        assert r.returncode == 0, r.stdout[-3000:]
        said = "resized and flipped by the training step on its device (DATA.RESIZE_ON device)"
        assert (said in (tmp_path / place / "log_rank0.txt").read_text()) == (place == "device")
        records = [json.loads(line) for line in open(tmp_path / place / "metrics.jsonl")]
        losses[place] = [r["loss"] for r in records if r.get("split") == "train"]
    assert len(losses["device"]) == len(losses["loader"]) >= 8
    assert losses["device"] == pytest.approx(losses["loader"], rel=2e-3, abs=1e-4)


@pytest.mark.cuda
def test_a_cuda_step_resizes_staged_cuts_without_waiting():
    """On a GPU: cuts staged by the trainer's DeviceStaging (a copy stream), resized there as on
    the CPU (to one level), and a bf16 step on them under torch's sync debug mode "error"."""
    from zoo.data.device_staging import DeviceStaging

    device = torch.device("cuda")
    g = torch.Generator().manual_seed(0)
    cuts = torch.randint(0, 256, (4, 3, 8, 40, 40), dtype=torch.uint8, generator=g)
    geometry = CropGeometry(torch.tensor([[36, 1, 32], [32, 0, 32], [28, 1, 32], [40, 0, 32]]))
    labels = torch.tensor([0, 1, 0, 1])
    # As the loader hands it over on a GPU: pinned (the geometry stays as it is).
    batch = (cuts.pin_memory(), labels.pin_memory(), torch.arange(4),
             torch.zeros(4, dtype=torch.long), geometry)
    staged = list(DeviceStaging(device)([batch]))[0]
    assert staged[0].device == device and batch_geometry(staged) is geometry
    on_gpu = resize_cuts(staged[0], geometry)
    assert (on_gpu.cpu().int() - resize_cuts(cuts, geometry).int()).abs().max() <= 1
    model = _bn_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    step = TrainStep(model, opt, sched, device, 2, precision="bf16", channels_last=True,
                     nonfinite="skip", normalization=(MEAN, STD))
    step(staged[0], staged[1], geometry)  # the first update is checked at once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            loss = step(staged[0], staged[1], geometry)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    step.settle()
    assert torch.isfinite(loss) and step.steps == 3


def test_an_item_on_its_own_and_multigrid_shapes(mini, two_sizes):
    """``dataset[i]`` (no batch to write into) takes the square the settings allow for any
    frames; multigrid's smaller crops and shapes come out of the step as the loader's do."""
    common = dict(anno_path=two_sizes["list"], data_path=two_sizes["root"], split="train",
                  clip_len=4, frame_rate=2, crop_size=28, short_side_size=32,
                  train_short_side_range=[32, 36], random_flip=True, mean=MEAN, std=STD,
                  decoder="pyav", uint8_train_clips=True)
    plain = VideoListDataset(**common)[(2, 1)]
    item = VideoListDataset(**common, resize_on_device=True)[(2, 1)]
    assert len(item) == 5 and item[1:4] == plain[1:4]
    assert item[0].shape == (3, 4, 32, 32)  # cut_side(36, 36, 28, [32, 36]): 32
    clip = resize_cuts(item[0][None], item[4])[0]
    assert (clip.int() - plain[0].int()).abs().max() <= 1

    extra = ["TRAIN.BATCH_SIZE", "1", "TRAIN.MULTIGRID", "short", "TRAIN.EPOCH_NUM", "4"]
    batches = {}
    for place in ("loader", "device"):
        loader = build_loader(mini_clip_cfg(mini, *extra, "DATA.RESIZE_ON", place), "train")
        loader.batch_sampler.set_epoch(0, 0)
        batches[place] = [b for _, b in zip(range(2), loader)]
    sizes = set()
    for plain, cuts in zip(batches["loader"], batches["device"]):
        clips = resize_cuts(cuts[0], batch_geometry(cuts))
        assert clips.shape == plain[0].shape and (clips.int() - plain[0].int()).abs().max() <= 1
        sizes.add(clips.shape[-1])
    assert len(sizes) == 2  # two of the short cycle's crop sizes
