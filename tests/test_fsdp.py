"""Sharded training (DDP_CONFIG.STRATEGY fsdp): which modules are sharded, what the strategy
refuses, and on 2 gloo processes with a small VideoMAE ViT: the same losses and weights as DDP,
checkpoints in DDP's layout that DDP resumes from, an exact resume after SIGKILL, and a checkpoint
that one process and DDP test to the same accuracy."""

import copy
import json
import logging
import os
import sys
import types

import pytest
import torch
import torch.nn as nn
from helpers import TINY_DATA, run_tool, train_killed_at

from zoo.config import ConfigError, cfg_to_yaml, load_config
from zoo.launch.job import resolve_job
from zoo.launch.launch import launch
from zoo.solver import build_lr_scheduler, build_optimizer
from zoo.train.checkpoint import (
    gather_rng_states,
    is_sharded,
    load_training_state,
    training_state,
    unwrap,
)
from zoo.train.model_setup import prepare_model
from zoo.train.sharding import ShardingUnavailable, shard_model, shard_units
from zoo.train.step import TrainStep
from zoo.utils import comm
from zoo.utils.env import seed_all

VIT = ["MODEL.NAME", "videomae_vit_s", "MODEL.KWARGS",
       "['embed_dim', 24, 'depth', 2, 'num_heads', 2, 'frames', 4, 'crop_size', 28, 'patch', 7]"]
VIT_KWARGS = dict(embed_dim=24, depth=2, num_heads=2, frames=4, crop_size=28, patch=7)
GLOBAL_BATCH, STEPS, CLASSES = 4, 5, 3


def test_shard_units_follow_each_family_layout():
    from zoo import create_model

    with torch.device("meta"):
        vit = create_model("videomae_vit_s", num_classes=2)
        swin = create_model("swin3d_t", num_classes=2)
        slowfast = create_model("slowfast_4x16_resnet50", num_classes=2)
        r3d = create_model("r3d_18", num_classes=2)
    assert shard_units(vit) == list(vit.blocks)
    assert shard_units(swin) == list(swin.features)  # 4 stages, 3 patch mergings
    assert len(shard_units(slowfast)) == 11  # slow_res2..5, fast_res2..5, fuse_res2..4
    assert shard_units(r3d) == [r3d.layer1, r3d.layer2, r3d.layer3, r3d.layer4]
    assert shard_units(nn.Sequential(nn.Linear(2, 2))) == []  # the root alone

    class Own(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def shard_units(self):
            return [self.b]

    own = Own()
    assert shard_units(own) == [own.b]


def test_strategy_refuses_what_only_ddp_does():
    with pytest.raises(ConfigError, match="DDP_CONFIG.STRATEGY = 'zero' is not allowed"):
        load_config(None, ["DDP_CONFIG.STRATEGY", "zero"])
    with pytest.raises(ConfigError, match="GRAD_COMPRESSION = 'bf16' is a DDP communication hook"):
        load_config(None, ["DDP_CONFIG.STRATEGY", "fsdp", "DDP_CONFIG.GRAD_COMPRESSION", "bf16"])
    with pytest.raises(ConfigError, match="EMA_DECAY = 0.99 keeps an unsharded copy"):
        load_config(None, ["DDP_CONFIG.STRATEGY", "fsdp", "TRAIN.EMA_DECAY", "0.99"])
    assert load_config(None, []).DDP_CONFIG.STRATEGY == "ddp"


def test_old_torch_without_fully_shard_is_one_line(monkeypatch):
    for name in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))  # no fully_shard in it
    with pytest.raises(ShardingUnavailable, match=r"needs torch >= 2.4 \(FSDP2's fully_shard\)"):
        shard_model(nn.Linear(2, 2), torch.device("cpu"), False, logging.getLogger("test"))


def test_one_process_trains_unsharded(caplog):
    cfg = load_config(None, [*VIT, "DDP_CONFIG.STRATEGY", "fsdp", "DDP_CONFIG.DISTRIBUTED",
                             "False", "DATA.NUM_CLASSES", "2"])
    with caplog.at_level(logging.INFO, logger="test"):
        model = prepare_model(cfg, torch.device("cpu"), logging.getLogger("test"))
    assert not is_sharded(model) and type(model).__name__ == "VideoMAE"
    assert "STRATEGY fsdp with one process: training unsharded" in caplog.text


def _worker(cfg, data_path, out_path, resume_from):
    """STEPS steps of batch GLOBAL_BATCH over the ranks (after resuming from the checkpoint
    ``resume_from`` when given); rank 0 saves every rank's losses and the training checkpoint
    (``resume_from`` "more": the same STEPS batches again after the checkpoint)."""
    seed_all(cfg.CONFIG.SEED + comm.get_rank())  # as the launcher seeds each rank
    data = torch.load(data_path)
    device = torch.device("cpu")
    model = prepare_model(cfg, device, logging.getLogger("test"))
    opt = build_optimizer(cfg, unwrap(model))
    sched = build_lr_scheduler(cfg, opt, 2 * STEPS, comm.get_world_size())
    # CLIP_GRAD_NORM and the non-finite check both read the (sharded) gradients.
    step = TrainStep(model, opt, sched, device, CLASSES, clip_grad_norm=1.0, nonfinite="stop")
    if resume_from and resume_from != "more":
        load_training_state(resume_from, cfg, model, opt, sched)
    world, rank = comm.get_world_size(), comm.get_rank()
    per_rank = GLOBAL_BATCH // world
    losses = []
    for it in range(STEPS):
        lo = it * GLOBAL_BATCH + rank * per_rank
        losses.append(float(step(data["clips"][lo:lo + per_rank],
                                 data["labels"][lo:lo + per_rank])))
    rng = gather_rng_states()
    state = None
    if comm.is_main_process() or is_sharded(model):
        state = training_state(model, opt, sched, None, None, 1, STEPS, cfg_to_yaml(cfg), rng, -1.)
        state = copy.deepcopy(state)  # as written now (some tensors are the live ones)
    for it in range(STEPS if resume_from == "more" else 0):  # on past the checkpoint
        lo = it * GLOBAL_BATCH + rank * per_rank
        losses.append(float(step(data["clips"][lo:lo + per_rank],
                                 data["labels"][lo:lo + per_rank])))
    losses = comm.all_gather_object(losses)
    if comm.is_main_process():
        torch.save({"losses": losses, "ckpt": state}, out_path)


def _run(tmp_path, name, strategy, resume_from=""):
    data_path = tmp_path / "data.pt"
    if not data_path.exists():
        g = torch.Generator().manual_seed(0)
        torch.save({"clips": torch.randn(GLOBAL_BATCH * STEPS, 3, 4, 28, 28, generator=g),
                    "labels": torch.randint(0, CLASSES, (GLOBAL_BATCH * STEPS,), generator=g)},
                   data_path)
    out = tmp_path / f"{name}.pt"
    cfg = load_config(None, [
        *VIT, "DATA.NUM_CLASSES", str(CLASSES), "TRAIN.OPTIMIZER", "AdamW", "TRAIN.LR", "0.01",
        "DDP_CONFIG.STRATEGY", strategy, "DDP_CONFIG.DIST_URL", "tcp://127.0.0.1:0",
        "DDP_CONFIG.THREADS_PER_PROC", "1", "DDP_CONFIG.NUM_CPU_PROCS", "2",
        "DDP_CONFIG.DIST_BACKEND", "gloo"])
    launch(_worker, resolve_job(cfg), cfg, str(data_path), str(out), str(resume_from))
    return torch.load(out, weights_only=True)


def _assert_close_states(a, b, tol):
    assert a["model"].keys() == b["model"].keys()
    for k, v in a["model"].items():
        assert not hasattr(v, "to_local") and v.device.type == "cpu", k
        assert (v.double() - b["model"][k].double()).abs().max() <= tol, k
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for i, s in a["optimizer"]["state"].items():
        for name, v in s.items():
            assert (v.double() - b["optimizer"]["state"][i][name].double()).abs().max() <= tol


@pytest.mark.slow
def test_fsdp_trains_as_ddp_and_writes_checkpoints_ddp_resumes(tmp_path):
    fsdp = _run(tmp_path, "fsdp", "fsdp", "more")  # checkpoint after STEPS, then STEPS more
    ddp = _run(tmp_path, "ddp", "ddp")
    for a, b in zip(fsdp["losses"], ddp["losses"]):  # each rank's first STEPS losses
        assert max(abs(x - y) for x, y in zip(a[:STEPS], b)) < 1e-5
    assert fsdp["losses"][0][0] != fsdp["losses"][0][STEPS - 1]  # training moved
    # The same layout as DDP's checkpoint (optimizer state by parameter index), the same values.
    _assert_close_states(fsdp["ckpt"], ddp["ckpt"], 1e-5)
    ckpt = tmp_path / "fsdp_ckpt.pth"
    torch.save(fsdp["ckpt"], ckpt)
    # DDP resumed from the FSDP checkpoint takes the steps the FSDP run took after it.
    on_ddp = _run(tmp_path, "ddp_resumed", "ddp", ckpt)
    for a, b in zip(fsdp["losses"], on_ddp["losses"]):
        assert max(abs(x - y) for x, y in zip(a[STEPS:], b)) < 1e-5


TRAIN = [*VIT, *TINY_DATA, "DDP_CONFIG.NUM_CPU_PROCS", "2", "DDP_CONFIG.DIST_BACKEND", "gloo",
         "DDP_CONFIG.THREADS_PER_PROC", "1", "DDP_CONFIG.DIST_URL", "tcp://127.0.0.1:0",
         "DATA.SYNTHETIC.TRAIN_PER_CLASS", "8", "TRAIN.EPOCH_NUM", "2", "TRAIN.AUTO_RESUME", "True",
         "TRAIN.OPTIMIZER", "AdamW", "TRAIN.LR", "0.01", "TRAIN.CLIP_GRAD_NORM", "1.0",
         "TRAIN.MIXUP_ALPHA", "0.4", "DDP_CONFIG.STRATEGY", "fsdp"]


@pytest.mark.slow
def test_fsdp_sigkill_resume_is_exact_and_its_checkpoint_tests_anywhere(tmp_path, synth_root):
    common = [*TRAIN, "DATA.SYNTHETIC.ROOT", synth_root, "LOG.BASE_PATH", str(tmp_path)]
    straight = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "straight"])
    assert straight.returncode == 0, straight.stdout[-3000:] + straight.stderr[-3000:]
    assert "weights sharded with FSDP2 over 2 units" in (
        tmp_path / "straight" / "log_rank0.txt").read_text()
    steps_per_epoch = torch.load(tmp_path / "straight" / "checkpoints" / "epoch_1.pth",
                                 weights_only=True)["iteration"]

    run_dir = train_killed_at(tmp_path, common, steps_per_epoch + 1)
    assert "epoch_2.pth" not in os.listdir(run_dir / "checkpoints")
    resumed = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "killed"])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "continuing at epoch 2" in (run_dir / "log_rank0.txt").read_text()

    path = tmp_path / "straight" / "checkpoints" / "epoch_2.pth"
    a = torch.load(path, weights_only=True)
    b = torch.load(run_dir / "checkpoints" / "epoch_2.pth", weights_only=True)
    assert a["iteration"] == b["iteration"] == 2 * steps_per_epoch
    _assert_close_states(a, b, 0.0)  # bit for bit

    # The FSDP checkpoint: one process and 2 DDP processes test it to the same numbers, and
    # create_model loads it.
    def test(name, *extra):
        r = run_tool("test_ddp.py", [*common, "LOG.EXP_NAME", name, "TEST.CHECKPOINT", str(path),
                                     "DDP_CONFIG.STRATEGY", "ddp", *extra])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return json.loads((tmp_path / name / "test_metrics.json").read_text())

    alone = test("alone", "DDP_CONFIG.DISTRIBUTED", "False")
    two = test("two")
    assert alone["num_videos"] == two["num_videos"] > 0
    for key in ("top1", "top5", "mean_class_acc"):
        assert abs(alone[key] - two[key]) < 1e-6, key

    from zoo import create_model

    model = create_model("videomae_vit_s", num_classes=2, pretrained=str(path), **VIT_KWARGS)
    for k, v in model.state_dict().items():
        assert torch.equal(v, a["model"][k]), k
