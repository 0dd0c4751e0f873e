"""Multigrid training (CONFIG.TRAIN.MULTIGRID): the long cycle's per-epoch (batch, frames, crop,
LR) against PySlowFast's rule for its stepwise multigrid config, the short cycle's per-iteration
shapes against PySlowFast's ShortCycleBatchSampler, exact resume, the model refusal, and (slow) a
long+short run on the generated motion data that learns as well as the plain schedule."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch
from helpers import run_tool

from zoo.config import ConfigError, get_cfg, load_config
from zoo.config.convert_pyslowfast import write_converted
from zoo.data.multigrid import MultigridBatchSampler
from zoo.solver.multigrid import EpochLRScheduler, MultigridPlan, multigrid_lr_function
from zoo.train.multigrid import check_model

STEPWISE = (pathlib.Path(__file__).parent / "data" / "pyslowfast" / "configs" / "Kinetics"
            / "SLOWFAST_8x8_R50_stepwise_multigrid.yaml")


# ------------------------------------------------------------ PySlowFast's rules, from its docs
def _pysf_schedule(steps, max_epoch, t, s, long_f, short_f, epoch_factor):
    """PySlowFast's get_long_cycle_schedule (multigrid.py): each shape of a step gets epochs in
    proportion to its mean batch (equal iterations), a fine-tuning phase saves iterations in the
    same ratio, then the whole is stretched to max_epoch x epoch_factor, rounded cumulatively."""
    size = t * s * s
    groups = []
    for ft, fs in long_f:
        bt, bs = round(t * ft), round(s * fs)
        dims = [(bt, s * short_f[0]), (bt, s * short_f[1]), (bt, bs)]
        groups.append([(round(size / (a * b * b)), a, b) for a, b in dims])
    mean = [np.mean([g[0] for g in group]) for group in groups]
    rows, iters = [], 0.0
    for k in range(len(steps) - 1):
        for group, m in zip(groups, mean):
            e = (steps[k + 1] - steps[k]) * m / sum(mean)
            iters += e / m
            rows.append((k, group[-1], e))
    rows.append((len(steps) - 1, groups[-1][2],
                 (max_epoch - steps[-1]) / (steps[-1] / iters) * mean[-1]))
    x = max_epoch * epoch_factor / sum(r[2] for r in rows)
    out, total = [], 0.0
    for k, shape, e in rows:
        total += e * x
        out.append((k, shape, int(round(total))))
    return out


def _pysf_lr(schedule, gamma, base_lr, warmup_epochs, warmup_start):
    """PySlowFast's init_multigrid STEPS / LRS and get_lr_at_epoch (steps_with_relative_lrs,
    linear warmup to the schedule's value at WARMUP_EPOCHS)."""
    steps = [0] + [r[-1] for r in schedule]
    steps[-1] = (steps[-2] + steps[-1]) // 2
    lrs = [gamma ** r[0] * r[1][0] for r in schedule]
    lrs = lrs[:-1] + [lrs[-2], lrs[-1]]
    max_epoch = schedule[-1][-1]

    def at(epoch):
        for ind, step in enumerate(steps + [max_epoch]):
            if epoch < step:
                break
        return lrs[ind - 1] * base_lr

    def lr(epoch):
        if epoch < warmup_epochs:
            end = at(warmup_epochs)
            return epoch * (end - warmup_start) / warmup_epochs + warmup_start
        return at(epoch)

    return lr, max_epoch


def _shape_at(schedule, epoch):
    for r in schedule:
        if epoch < r[-1]:
            return r[1]
    return schedule[-1][1]


@pytest.fixture(scope="module")
def stepwise(tmp_path_factory):
    out = tmp_path_factory.mktemp("mg") / "stepwise.yaml"
    write_converted(str(STEPWISE), str(out))
    return load_config(str(out))


def test_long_cycle_follows_pyslowfast_per_epoch(stepwise):
    t = stepwise.CONFIG.TRAIN
    assert t.MULTIGRID == "long+short"
    plan = MultigridPlan(stepwise)
    # The YAML's values: STEPS [0, 94, 154, 196], MAX_EPOCH 239, 32 frames, crop 224, BASE_LR 0.1,
    # 34 warmup epochs from 0.01, 64 clips over 8 GPUs; PySlowFast's default factors and GAMMA.
    ref = _pysf_schedule([0, 94, 154, 196], 239, 32, 224,
                         [(0.25, 0.5 ** 0.5), (0.5, 0.5 ** 0.5), (0.5, 1), (1, 1)],
                         [0.5, 0.5 ** 0.5], 1.5)
    lr, max_epoch = _pysf_lr(ref, 0.1, 0.1, 34.0, 0.01)
    assert plan.epochs == max_epoch == 358
    lr_fn = multigrid_lr_function(stepwise, plan, scale=1.0)
    shapes = set()
    for epoch in range(max_epoch):
        b, frames, crop = _shape_at(ref, epoch)
        assert plan.base_shape(epoch) == (b * 8, frames, crop), epoch
        shapes.add((b, frames, crop))
        for frac in (0.0, 0.5):
            assert lr_fn(epoch + frac) == pytest.approx(lr(epoch + frac), rel=1e-9), epoch
    assert shapes == {(8, 8, 158), (4, 16, 158), (2, 16, 224), (1, 32, 224)}
    # The long cycle's frame stride reaches SAMPLING_RATE x (32 // frames).
    assert plan.epoch_shape(0).frame_rate_max == 2 * 4


class _Indices:
    """A stand-in for the EpochSampler: n (epoch, index) pairs, shuffled by epoch."""

    def __init__(self, n):
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.epoch))
        return ((self.epoch, int(i)) for i in order)

    def __len__(self):
        return self.n


def _cfg(mode, **train):
    cfg = get_cfg()
    cfg.CONFIG.TRAIN.MULTIGRID = mode
    cfg.CONFIG.TRAIN.BATCH_SIZE = 2
    cfg.CONFIG.TRAIN.EPOCH_NUM = 8
    cfg.CONFIG.TRAIN.LR_POLICY = "Step"
    cfg.CONFIG.TRAIN.LR_MILESTONE = [4, 6]
    cfg.CONFIG.DATA.CLIP_LEN, cfg.CONFIG.DATA.CROP_SIZE = 8, 224
    cfg.CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE = [256, 320]
    for k, v in train.items():
        cfg.CONFIG.TRAIN[k] = v
    return cfg


def test_short_cycle_shapes_follow_pyslowfasts_sampler():
    cfg = _cfg("short")
    plan = MultigridPlan(cfg)
    assert plan.epochs == 12  # EPOCH_NUM x EPOCH_FACTOR
    batches = MultigridBatchSampler(_Indices(100), plan, [256, 320])
    got = [(len(b), b[0][3], b[0][4]) for b in batches]
    # ShortCycleBatchSampler: batch x round((224 / (f x 224))^2) for f in (0.5, 0.707), then the
    # batch; the dataset crops round(f x 224) with the jitter minimum x crop / 224.
    cycle = [(8, 112, 128), (4, 158, 181), (2, 224, 256)]
    want, left = [], 100
    while left >= cycle[len(want) % 3][0]:
        want.append(cycle[len(want) % 3])
        left -= want[-1][0]
    assert got == want and len(batches) == len(want)
    assert all(len({k[:2] for k in b}) == len(b) for b in batches)


def test_resume_mid_epoch_serves_the_same_batches_and_lr():
    cfg = _cfg("long+short", MULTIGRID_LONG_CYCLE_FACTORS=[[0.5, 0.5 ** 0.5], [1.0, 1.0]])
    plan = MultigridPlan(cfg)
    full = MultigridBatchSampler(_Indices(200), plan, [256, 320])
    for epoch in range(plan.epochs):
        full.set_epoch(epoch)
        whole = list(full)
        resumed = MultigridBatchSampler(_Indices(200), plan, [256, 320])
        resumed.set_epoch(epoch, 3)
        assert list(resumed) == whole[3:]
    steps = [full.batches_in_epoch(e) for e in range(plan.epochs)]
    assert len(set(steps)) > 1  # the long cycle's epochs differ in length
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    lr = multigrid_lr_function(cfg, plan, 1.0)
    a = EpochLRScheduler(opt, steps, lr, 0.1)
    for _ in range(sum(steps[:3]) + 2):
        a.step()
    b = EpochLRScheduler(opt, steps, lr, 0.1)
    b.load_state_dict(a.state_dict())
    for _ in range(sum(steps[3:]) - 2):
        a.step()
        b.step()
        assert a.get_last_lr() == b.get_last_lr() == opt.param_groups[0]["lr"]


def test_multigrid_is_off_by_default_and_validated():
    cfg = get_cfg()
    assert cfg.CONFIG.TRAIN.MULTIGRID == ""
    from zoo.config.validation import validate_config

    bad = _cfg("medium")
    with pytest.raises(ConfigError, match="CONFIG.TRAIN.MULTIGRID"):
        validate_config(bad)
    cosine = _cfg("long", LR_POLICY="Cosine")
    with pytest.raises(ConfigError, match="LR_POLICY"):
        validate_config(cosine)


def test_fixed_shape_models_refuse_multigrid():
    from zoo.models.mvit import MViT
    from zoo.models.videomae import VideoMAE

    cfg = _cfg("short")
    for cls in (MViT, VideoMAE):
        model = cls.__new__(cls)
        with pytest.raises(ConfigError, match=f"MULTIGRID.*{cls.__name__}"):
            check_model(cfg, model)
    check_model(cfg, torch.nn.Conv3d(3, 4, 1))  # CNN families take any shape


# ------------------------------------------------------------------ slow: a run that learns
def multigrid_run(tmp_path, cache, mode: str, epochs: int):
    """Train the quick-start SlowFast with ``mode`` ("" = plain) and the settings of
    benchmarks/multigrid.py; returns the last val record."""
    from benchmarks.multigrid import run_name, train_args

    r = run_tool("train_ddp.py", train_args(mode, epochs, str(tmp_path), cache), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = (tmp_path / run_name(mode) / "metrics.jsonl").read_text()
    return [x for x in map(json.loads, lines.splitlines()) if x.get("split") == "val"][-1]


@pytest.mark.slow
def test_long_short_run_learns_the_motion_classes(tmp_path, synth_root):
    # 24 multigrid epochs in 404 steps; the plain schedule beside it (93% on these settings) is
    # benchmarks/multigrid.py's, and the quick-start test holds the plain schedule to 95%.
    multi = multigrid_run(tmp_path, synth_root, "long+short", 16)
    assert multi["num_videos"] == 200 and multi["epoch"] == 24
    assert multi["top1"] >= 85.0, multi  # chance is 25%
