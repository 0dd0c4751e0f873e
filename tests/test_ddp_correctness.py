"""DDP correctness: 2 gloo processes with batch B/2 each end with the same weights as 1 process
with batch B on the same samples - for a model without BatchNorm, and for one with BatchNorm when
SyncBN is on (and, as a control, measurably different when it is off) - and, through the real
training loader, with several clips per decoded video (CONFIG.DATA.CLIPS_PER_VIDEO)."""

import logging

import pytest
import torch
import torch.nn as nn
from helpers import TINY_DATA

from zoo.config import load_config
from zoo.data import build_dataset, build_loader, normalization
from zoo.launch.job import resolve_job
from zoo.launch.launch import launch
from zoo.models import MODEL_REGISTRY
from zoo.solver import build_lr_scheduler, build_optimizer
from zoo.train.checkpoint import unwrap
from zoo.train.model_setup import prepare_model
from zoo.train.step import TrainStep
from zoo.utils import comm
from zoo.utils.env import seed_all

GLOBAL_BATCH, STEPS, CLASSES = 8, 5, 3


def _register():
    if "ddp_test_plain" in MODEL_REGISTRY:
        return

    @MODEL_REGISTRY.register()
    def ddp_test_plain(num_classes=3, **kwargs):
        return nn.Sequential(nn.Conv3d(3, 6, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1),
                             nn.Flatten(), nn.Linear(6, num_classes))

    @MODEL_REGISTRY.register()
    def ddp_test_bn(num_classes=3, **kwargs):
        return nn.Sequential(nn.Conv3d(3, 6, 3, padding=1), nn.BatchNorm3d(6), nn.ReLU(),
                             nn.Conv3d(6, 6, 3, padding=1), nn.BatchNorm3d(6), nn.ReLU(),
                             nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(6, num_classes))


@pytest.fixture(autouse=True)
def _test_models():
    """Register the two test models for this file only (registry-driven tests elsewhere must not
    see them)."""
    _register()
    yield
    for name in ("ddp_test_plain", "ddp_test_bn"):
        MODEL_REGISTRY._obj_map.pop(name, None)


def _worker(cfg, data_path, out_path):
    _register()  # spawned workers start with a fresh registry
    seed_all(cfg.CONFIG.SEED)  # same init everywhere; DDP also broadcasts rank 0's weights
    data = torch.load(data_path)
    device = torch.device("cpu")
    model = prepare_model(cfg, device, logging.getLogger("test"))
    opt = build_optimizer(cfg, unwrap(model))
    sched = build_lr_scheduler(cfg, opt, STEPS, comm.get_world_size())
    step = TrainStep(model, opt, sched, device, CLASSES)
    world, rank = comm.get_world_size(), comm.get_rank()
    per_rank = GLOBAL_BATCH // world
    for it in range(STEPS):
        lo = it * GLOBAL_BATCH + rank * per_rank
        step(data["clips"][lo:lo + per_rank], data["labels"][lo:lo + per_rank])
    if comm.is_main_process():
        torch.save(unwrap(model).state_dict(), out_path)


def _loader_worker(cfg, data_path, out_path):
    """As :func:`_worker`, but the batches come from ``build_loader`` (each rank its shard)."""
    _register()
    seed_all(cfg.CONFIG.SEED)
    device = torch.device("cpu")
    model = prepare_model(cfg, device, logging.getLogger("test"))
    opt = build_optimizer(cfg, unwrap(model))
    sched = build_lr_scheduler(cfg, opt, STEPS, comm.get_world_size())
    # The loader hands over uint8 clips (NORMALIZE_ON "device"): the step normalises them.
    step = TrainStep(model, opt, sched, device, CLASSES, normalization=normalization(cfg))
    loader = build_loader(cfg, "train")
    loader.sampler.set_epoch(1)
    batches = 0
    for clips, labels, _, _ in loader:
        step(clips, labels)
        batches += 1
        if batches == STEPS:
            break
    assert batches == STEPS, f"only {batches} batches"
    if comm.is_main_process():
        torch.save(unwrap(model).state_dict(), out_path)


def _train(tmp_path, name, model, world, sync_bn=False, extra=(), worker=_worker):
    data_path = tmp_path / "data.pt"
    if not data_path.exists():
        g = torch.Generator().manual_seed(0)
        torch.save({"clips": torch.randn(GLOBAL_BATCH * STEPS, 3, 4, 8, 8, generator=g),
                    "labels": torch.randint(0, CLASSES, (GLOBAL_BATCH * STEPS,), generator=g)},
                   data_path)
    out = tmp_path / f"{name}.pt"
    opts = ["MODEL.NAME", model, "DATA.NUM_CLASSES", str(CLASSES), "TRAIN.LR", "0.1",
            "TRAIN.W_DECAY", "0.0", "TRAIN.SYNC_BN", str(sync_bn),
            "DDP_CONFIG.DIST_URL", "tcp://127.0.0.1:0", "DDP_CONFIG.THREADS_PER_PROC", "1"]
    if world == 1:
        opts += ["DDP_CONFIG.DISTRIBUTED", "False"]
    else:
        opts += ["DDP_CONFIG.NUM_CPU_PROCS", str(world), "DDP_CONFIG.DIST_BACKEND", "gloo"]
    cfg = load_config(None, [*opts, *extra])
    launch(worker, resolve_job(cfg), cfg, str(data_path), str(out))
    return torch.load(out)


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a
               if a[k].is_floating_point())


def _changed(start, end):
    return _max_diff(start, end) > 1e-3


@pytest.mark.slow
def test_ddp_equals_single_process_without_batchnorm(tmp_path):
    single = _train(tmp_path, "single", "ddp_test_plain", 1)
    ddp = _train(tmp_path, "ddp", "ddp_test_plain", 2)
    seed_all(0)
    init = MODEL_REGISTRY.get("ddp_test_plain")(num_classes=CLASSES).state_dict()
    assert _changed(init, single), "training did not move the weights; the test would be vacuous"
    assert _max_diff(single, ddp) < 1e-5


@pytest.mark.slow
def test_ddp_with_syncbn_equals_single_process_batchnorm(tmp_path):
    single = _train(tmp_path, "single_bn", "ddp_test_bn", 1)
    synced = _train(tmp_path, "ddp_syncbn", "ddp_test_bn", 2, sync_bn=True)
    assert _max_diff(single, synced) < 1e-5
    # Control: with per-rank BN statistics the two runs do differ.
    local = _train(tmp_path, "ddp_localbn", "ddp_test_bn", 2, sync_bn=False)
    assert _max_diff(single, local) > 1e-4


@pytest.mark.slow
def test_ddp_equals_single_process_with_several_clips_per_video(tmp_path, synth_root):
    """CLIPS_PER_VIDEO 2, global batch 8 clips: 1 process takes 4 videos a step, 2 processes 2
    each (the same 4 videos, the same clips: a clip depends on (seed, epoch, video) only)."""
    data = [*TINY_DATA, "DATA.SYNTHETIC.ROOT", synth_root, "DATA.NUM_CLASSES", str(CLASSES),
            "DATA.SYNTHETIC.TRAIN_PER_CLASS", "7", "DATA.CLIPS_PER_VIDEO", "2"]
    build_dataset(load_config(None, data), "train")  # generate the videos once, before spawning

    def run(name, world):
        batch = ["TRAIN.BATCH_SIZE", str(GLOBAL_BATCH // world)]
        return _train(tmp_path, name, "ddp_test_plain", world, extra=[*data, *batch],
                      worker=_loader_worker)

    single, ddp = run("single_clips", 1), run("ddp_clips", 2)
    seed_all(0)
    init = MODEL_REGISTRY.get("ddp_test_plain")(num_classes=CLASSES).state_dict()
    assert _changed(init, single), "training did not move the weights; the test would be vacuous"
    assert _max_diff(single, ddp) < 1e-5


class _PartlyUsed(nn.Module):
    """A classifier with a layer no loss uses (a head left aside)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(3 * 2 * 4 * 4, CLASSES))
        self.aside = nn.Linear(4, CLASSES)

    def forward(self, x):
        return self.head(x)


def _unused_parameter_steps(rank):
    from torch.nn.parallel import DistributedDataParallel

    from zoo.config import ConfigError, get_cfg
    from zoo.train.model_setup import ddp_options

    results = {}
    for find in (False, True):
        cfg = get_cfg()
        cfg.CONFIG.TRAIN.FIND_UNUSED_PARAMETERS = find
        torch.manual_seed(0)
        ddp = DistributedDataParallel(_PartlyUsed(), **ddp_options(cfg))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        step = TrainStep(ddp, opt, sched, torch.device("cpu"), CLASSES, precision="fp32")
        x, y = torch.randn(2, 3, 2, 4, 4), torch.tensor([0, 1])
        try:
            for _ in range(3):
                step(x, y)
            results[str(find)] = "trained"
        except ConfigError as e:
            results[str(find)] = str(e)
    return results


@pytest.mark.slow
def test_ddp_with_a_parameter_no_loss_uses_names_it_and_trains_with_find_unused_parameters(
        tmp_path):
    from helpers import on_two_gloo_ranks

    for rank, results in enumerate(on_two_gloo_ranks(_unused_parameter_steps, tmp_path)):
        assert results["True"] == "trained"
        assert results["False"] == (
            f"the model has parameters that no loss used (parameter indices 2 3: aside.weight, "
            f"aside.bias, on rank {rank}), and DDP waits for a gradient of every parameter: set "
            "CONFIG.TRAIN.FIND_UNUSED_PARAMETERS True (slower) or use every parameter in the loss "
            "(or set requires_grad False on those it leaves out)")


def test_only_ddps_unfinished_reduction_error_is_explained():
    from zoo.train.step import unused_parameters_error

    model = _PartlyUsed()
    named = RuntimeError(
        "Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing "
        "loss.\nParameters which did not receive grad for rank 1: aside.weight, aside.bias\n"
        "Parameter indices which did not receive grad for rank 1: 2 3")
    line = unused_parameters_error(named, model)
    assert line.startswith("the model has parameters that no loss used (aside.weight, aside.bias, "
                           "on rank 1)") and "CONFIG.TRAIN.FIND_UNUSED_PARAMETERS True" in line
    assert "\n" not in line
    assert unused_parameters_error(RuntimeError("shape mismatch"), model) is None
