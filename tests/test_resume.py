"""Exact resume: 2 epochs straight == 1 epoch, SIGKILL mid-epoch 2, same command again
(auto-resume), bit for bit. Two gloo ranks with a data worker each, random crops, RandAugment,
random erasing, Mixup and 2 clips per decoded video on, so every random stream of the job
matters."""

import copy
import json
import os

import pytest
import torch
from helpers import TINY_DATA, run_tool, train_killed_at

ARGS = [
    "DDP_CONFIG.NUM_CPU_PROCS", "2",
    "MODEL.NAME", "toy_conv3d",
    "TRAIN.EPOCH_NUM", "2",
    "TRAIN.AUTO_RESUME", "True",
    "TRAIN.MIXUP_ALPHA", "0.4",
    # per-clip RandAugment and random erasing: their draws come from each item's generator
    "DATA.RAND_AUGMENT", "rand-m7-n4-mstd0.5-inc1", "DATA.RANDOM_ERASE", "0.25",
    "TRAIN.OPTIMIZER", "AdamW", "TRAIN.LR", "0.01",
    *TINY_DATA,
    "DATA.SYNTHETIC.TRAIN_PER_CLASS", "60",
    # a persistent data worker per rank: its RNG is not in any checkpoint, so the clips must not
    # depend on it
    "DATA.NUM_WORKERS", "1",
]


def _records(path):
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by the kill
    return out


# Two clips per decoded video (CLIPS_PER_VIDEO, so the union decode and the collate are in the
# loop too): a batch of 4 clips is 2 videos; 60 videos keep an epoch at 15 steps of 2 ranks.
CLIPS = ["DATA.CLIPS_PER_VIDEO", "2", "TRAIN.BATCH_SIZE", "4", "DATA.SYNTHETIC.TRAIN_PER_CLASS",
         "30"]


@pytest.mark.slow
def test_sigkill_then_auto_resume_is_bitwise_identical(tmp_path, synth_root, toy_model_file):
    common = ["--extra-modules", toy_model_file, *ARGS, *CLIPS, "DATA.SYNTHETIC.ROOT",
              synth_root, "LOG.BASE_PATH", str(tmp_path)]
    straight = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "straight"])
    assert straight.returncode == 0, straight.stdout[-3000:]
    steps_per_epoch = torch.load(tmp_path / "straight" / "checkpoints" / "epoch_1.pth",
                                 weights_only=True)["iteration"]
    kill_at = steps_per_epoch + 3  # the 3rd optimizer step of epoch 2

    # The same job, killed with SIGKILL by a hook.
    run_dir = train_killed_at(tmp_path, common, kill_at)
    ckpts = sorted(os.listdir(run_dir / "checkpoints"))
    assert ckpts == ["best.pth", "epoch_1.pth"], f"killed at the wrong moment: {ckpts}"
    trained = [r for r in _records(run_dir / "metrics.jsonl") if r.get("split") == "train"]
    assert trained[-1]["epoch"] == 2 and trained[-1]["iter"] == kill_at  # DISPLAY_FREQ 1

    resumed = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "killed"])
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    log = (run_dir / "log_rank0.txt").read_text()
    assert "resumed from" in log and "continuing at epoch 2" in log

    a = torch.load(tmp_path / "straight" / "checkpoints" / "epoch_2.pth", weights_only=True)
    b = torch.load(run_dir / "checkpoints" / "epoch_2.pth", weights_only=True)
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["iteration"] == b["iteration"]
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for k, s in a["optimizer"]["state"].items():
        for name, v in s.items():
            assert torch.equal(v, b["optimizer"]["state"][k][name]), (k, name)


@pytest.mark.slow
def test_resume_refuses_a_checkpoint_from_another_config(tmp_path, synth_root, toy_model_file):
    common = ["--extra-modules", toy_model_file, "MODEL.NAME", "toy_conv3d",
              "TRAIN.EPOCH_NUM", "1", *TINY_DATA, "DATA.SYNTHETIC.ROOT", synth_root,
              "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "run",
              "DDP_CONFIG.DISTRIBUTED", "False"]
    first = run_tool("train_ddp.py", common)
    assert first.returncode == 0, first.stdout[-3000:]
    again = run_tool("train_ddp.py", [*common, "TRAIN.EPOCH_NUM", "2", "TRAIN.AUTO_RESUME",
                                      "True", "TRAIN.LR", "0.5"])
    assert again.returncode != 0
    # The error line goes to stderr (zoo/utils/errors.py), the log lines before it to stdout.
    err = [ln for ln in again.stderr.splitlines() if "different config" in ln]
    assert err and "CONFIG.TRAIN.LR: 0.1 -> 0.5" in err[0]


def _state(seed):
    """A small model, its AdamW optimizer, LR schedule and EMA after two steps from ``seed``."""
    from zoo.train.ema import ModelEMA

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Linear(8, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ema = ModelEMA(model, 0.9)
    for _ in range(2):
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        ema.update(model)
    return model, opt, sched, ema


def test_load_training_state_restores_everything_a_checkpoint_holds(tmp_path):
    from zoo.config import cfg_to_yaml, get_cfg
    from zoo.train.checkpoint import (
        gather_rng_states,
        load_training_state,
        save_checkpoint,
        training_state,
    )

    cfg = get_cfg()
    model, opt, sched, ema = _state(0)
    torch.manual_seed(123)
    rng = gather_rng_states()
    after_save = torch.rand(3)  # what the random stream gives next at save time
    state = training_state(model, opt, sched, None, ema, 4, 40, cfg_to_yaml(cfg), rng, 55.5)
    path = save_checkpoint(str(tmp_path), state, 4)

    model2, opt2, sched2, ema2 = _state(1)  # other weights, moments, LR and EMA
    torch.manual_seed(999)
    resumed = load_training_state(path, cfg, model2, opt2, sched2, None, ema2)
    assert (resumed.epoch, resumed.iteration, resumed.best_top1) == (4, 40, 55.5)
    assert torch.equal(torch.rand(3), after_save)
    for a, b in ((model, model2), (ema.module, ema2.module)):
        for (k, v), v2 in zip(a.state_dict().items(), b.state_dict().values()):
            assert torch.equal(v, v2), k
    assert sched2.get_last_lr() == sched.get_last_lr() == [0.0025]
    for k, s in opt.state_dict()["state"].items():
        for name, v in s.items():
            assert torch.equal(v, opt2.state_dict()["state"][k][name]), (k, name)


def test_load_training_state_refuses_another_config_and_warns_on_another_world(tmp_path, caplog):
    import logging

    from zoo.config import cfg_to_yaml, get_cfg
    from zoo.train.checkpoint import CheckpointError, load_training_state, training_state

    cfg = get_cfg()
    model, opt, sched, ema = _state(0)
    two_ranks = [{"python": None}, {"python": None}]  # states of a 2-process run
    path = str(tmp_path / "c.pth")
    torch.save(training_state(model, opt, sched, None, None, 1, 5, cfg_to_yaml(cfg), two_ranks,
                              -1.0), path)
    other = cfg.clone()
    other.CONFIG.TRAIN.LR = 0.5
    other.CONFIG.TRAIN.HOOKS = ["x.py:Y"]  # hooks may change between a run and its resumption
    with pytest.raises(CheckpointError, match=r"different config \(CONFIG.TRAIN.LR: 0.1 -> 0.5\)"):
        load_training_state(path, other, model, opt, sched)
    with caplog.at_level(logging.WARNING, logger="test_resume"):
        resumed = load_training_state(path, cfg, model, opt, sched,
                                      logger=logging.getLogger("test_resume"))
    assert resumed.epoch == 1
    assert "holds RNG states for 2 ranks, not 1: random streams restart" in caplog.text



def _layout_steps(model, opt, sched, fmt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(2, 3, 2, 5, 5, generator=g).contiguous(memory_format=fmt)
        torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1])).backward()
        opt.step()
        opt.zero_grad()
        sched.step()


def _layout_model(fmt, name, checkpoint=None):
    """A small model (Conv3d + Linear) in layout ``fmt``, zoo's fused ``name`` optimizer and a
    schedule, resumed from ``checkpoint`` when given."""
    from zoo.config import get_cfg
    from zoo.solver.optimizer import make_optimizer, param_groups
    from zoo.train.checkpoint import load_training_state

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv3d(3, 6, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool3d(1), torch.nn.Flatten(),
                                torch.nn.Linear(6, 2)).to(memory_format=fmt)
    opt = make_optimizer(name, param_groups(model, 0.05), 0.01)
    from zoo.utils.env import torch_at_least

    if torch_at_least(2, 4):  # torch 2.4 brought the CPU fused kernels, which read the state
        assert opt.defaults.get("fused")  # as flat memory; older torch runs foreach
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
    if checkpoint is not None:
        load_training_state(checkpoint, get_cfg(), model, opt, sched)
    return model, opt, sched


@pytest.mark.parametrize("name", ["AdamW", "SGD"])
@pytest.mark.parametrize("weights,saved", [
    (torch.channels_last_3d, torch.contiguous_format),  # e.g. an FSDP2 checkpoint resumed by DDP
    (torch.contiguous_format, torch.channels_last_3d),  # a DDP checkpoint resumed by FSDP2
])
def test_resume_into_another_weight_layout_is_exact(tmp_path, name, weights, saved):
    """Optimizer state saved in one memory layout and loaded into weights in another continues
    bit for bit: the fused kernels read the state in its parameter's layout."""
    from zoo.config import cfg_to_yaml, get_cfg
    from zoo.train.checkpoint import gather_rng_states, training_state

    model, opt, sched = _layout_model(weights, name)
    _layout_steps(model, opt, sched, weights, 2, seed=0)
    state = copy.deepcopy(training_state(model, opt, sched, None, None, 1, 2,
                                         cfg_to_yaml(get_cfg()), gather_rng_states(), -1.0))
    for s in state["optimizer"]["state"].values():  # as a model in the other layout wrote it
        for k, v in s.items():
            if v.dim() == 5:
                s[k] = v.contiguous(memory_format=saved)
                assert s[k].stride() != model[0].weight.stride()
    torch.save(state, tmp_path / "c.pth")
    _layout_steps(model, opt, sched, weights, 3, seed=1)  # the straight run goes on

    resumed, opt2, sched2 = _layout_model(weights, name, str(tmp_path / "c.pth"))
    _layout_steps(resumed, opt2, sched2, weights, 3, seed=1)
    for (k, v), v2 in zip(model.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(v, v2), k
    for p in resumed.parameters():
        for v in opt2.state[p].values():
            assert v.dim() == 0 or v.stride() == p.stride()


def test_a_warmup_end_spelled_out_or_unused_is_not_a_config_difference():
    # A config that writes WARMUP_END_LR as the LR the warmup ends on anyway (or sets it with no
    # warmup) trains the schedule of one that leaves it 0: its checkpoints resume there.
    from zoo.config import cfg_to_yaml, get_cfg, load_config
    from zoo.train.checkpoint import config_differences

    warm = ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "0.003", "TRAIN.WARMUP_START_LR", "0.0003"]
    spelled = load_config(None, [*warm, "TRAIN.WARMUP_END_LR", "0.003"])
    assert config_differences(cfg_to_yaml(spelled), load_config(None, warm)) == []
    unused = get_cfg()
    unused.CONFIG.TRAIN.WARMUP_END_LR = 0.1
    assert config_differences(cfg_to_yaml(unused), load_config(None, [])) == []
    # A warmup that really ends elsewhere is a different schedule.
    other = get_cfg()
    other.CONFIG.TRAIN.USE_WARMUP, other.CONFIG.TRAIN.WARMUP_END_LR = True, 0.5
    assert config_differences(cfg_to_yaml(other), load_config(None, ["TRAIN.USE_WARMUP", "True"]))


# ------------------------------------------- where the LR schedule continues after a resume
class _LrUsed:
    """A hook: the LR each optimizer step uses (read before the step)."""

    def __init__(self):
        self.lrs = []

    def before_step(self):
        self.lrs.append(self.trainer.optimizer.param_groups[0]["lr"])


def _schedule_cfg(epochs, resume_epoch=-1, extra=()):
    from zoo.config import load_config

    return load_config(None, ["TRAIN.USE_WARMUP", "True", "TRAIN.WARMUP_EPOCHS", "1",
                              "TRAIN.WARMUP_START_LR", "0.0", "TRAIN.LR", "0.1",
                              "TRAIN.EPOCH_NUM", str(epochs), "TRAIN.RESUME_EPOCH",
                              str(resume_epoch), *extra])


def _schedule_trainer(tmp_path, cfg, batches, world=1):
    """A Trainer with what its loop and resume use: a linear model, ``batches`` batches an epoch
    (fewer with more processes), warmup for one epoch, then cosine, LRs scaled as for ``world``
    processes."""
    import logging

    from zoo.solver import build_lr_scheduler
    from zoo.train.step import TrainStep
    from zoo.train.trainer import Trainer

    t = Trainer.__new__(Trainer)
    t.cfg = cfg
    t.logger, t.out_dir, t.save_dir = logging.getLogger("test_resume"), str(tmp_path), str(tmp_path)
    t.model = torch.nn.Linear(4, 3)
    t.optimizer = torch.optim.SGD(t.model.parameters(), lr=0.1)
    t.scheduler = build_lr_scheduler(cfg, t.optimizer, batches, world)
    t.step = TrainStep(t.model, t.optimizer, t.scheduler, torch.device("cpu"), 3)
    t.train_loader = torch.utils.data.DataLoader(
        [(torch.randn(4), i % 3, i, 0) for i in range(2 * batches)], batch_size=2)
    t.iters_per_epoch = t.steps_per_epoch = batches
    t.epochs, t.start_epoch, t.epoch, t.iteration, t.inner_iter = cfg.CONFIG.TRAIN.EPOCH_NUM, 0, \
        0, 0, 0
    t.best_top1, t.is_best, t.hooks = -1.0, False, []
    t.multigrid, t.epoch_steps = None, None
    t.used = _LrUsed()
    t.register_hooks([t.used])
    return t


def _epoch_checkpoint(tmp_path, cfg, batches, epoch, world=1):
    """checkpoints/epoch_<epoch>.pth of a run of ``world`` processes with ``batches`` optimizer
    steps an epoch."""
    from zoo.config import cfg_to_yaml
    from zoo.train.checkpoint import gather_rng_states, save_checkpoint, training_state

    t = _schedule_trainer(tmp_path, cfg, batches, world)
    for _ in range(epoch * batches):
        t.scheduler.step()
    state = training_state(t.model, t.optimizer, t.scheduler, None, None, epoch, epoch * batches,
                           cfg_to_yaml(cfg), gather_rng_states() * world, -1.0)
    save_checkpoint(str(tmp_path), state, epoch)


@pytest.mark.parametrize("saved_batches", [4, 8])
def test_a_resume_continues_the_schedule_at_the_epoch_reached_whatever_the_steps(
        tmp_path, caplog, saved_batches):
    # A run of 2 processes (4 steps an epoch) resumed on 1 (8 steps an epoch) from epoch 1: the
    # warmup (1 epoch) is over and the cosine ends at the last step, as in a run of 8-step
    # epochs from the start. The same number of steps resumes as it always did.
    import logging

    from zoo.solver import build_lr_scheduler

    _epoch_checkpoint(tmp_path, _schedule_cfg(3), saved_batches, 1)
    t = _schedule_trainer(tmp_path, _schedule_cfg(3, resume_epoch=1), 8)
    with caplog.at_level(logging.INFO, logger="test_resume"):
        t.train()
    plan = build_lr_scheduler(_schedule_cfg(3), torch.optim.SGD(t.model.parameters(), lr=0), 8)
    assert t.used.lrs == pytest.approx([plan.lr_at(i) for i in range(8, 24)])
    assert t.used.lrs[0] == pytest.approx(0.1)  # the warmup's end, not its middle
    assert t.scheduler.iteration == 24 and t.iteration == saved_batches + 16  # steps taken
    moved = "the LR schedule continues from step 8, at the epoch the checkpoint reached"
    assert (moved in caplog.text) == (saved_batches != 8)


@pytest.mark.parametrize("reference", [0, 4])
def test_a_resume_on_fewer_processes_says_when_the_reference_batch_rescales_the_lr(
        tmp_path, caplog, reference):
    # A run of 2 processes resumed on 1: with REFERENCE_BATCH every LR halves, and one warning
    # says so; without it the LRs are the same and nothing is said.
    import logging

    cfg = _schedule_cfg(3, extra=["TRAIN.BATCH_SIZE", "2", "TRAIN.REFERENCE_BATCH",
                                  str(reference)])
    _epoch_checkpoint(tmp_path, cfg, 4, 1, world=2)
    cfg = _schedule_cfg(3, resume_epoch=1, extra=["TRAIN.BATCH_SIZE", "2",
                                                  "TRAIN.REFERENCE_BATCH", str(reference)])
    t = _schedule_trainer(tmp_path, cfg, 8)
    with caplog.at_level(logging.INFO, logger="test_resume"):
        t.train()
    said = ("the checkpoint's run had 2 processes (global batch 4), this one has 1 (global batch "
            "2): CONFIG.TRAIN.REFERENCE_BATCH 4 scales every LR of the schedule by 0.5 times the "
            "checkpoint's run's (peak LR 0.05); resume on 2 processes to keep its LRs")
    assert (said in caplog.text) == (reference > 0)
    assert t.used.lrs[0] == pytest.approx(0.05 if reference else 0.1)


def test_more_epochs_on_resume_stretch_the_schedule_and_say_so(tmp_path, caplog):
    import logging

    _epoch_checkpoint(tmp_path, _schedule_cfg(3), 4, 3)  # the cosine's end: LR 0 next
    t = _schedule_trainer(tmp_path, _schedule_cfg(5, resume_epoch=3), 4)
    with caplog.at_level(logging.INFO, logger="test_resume"):
        t.train()
    b = t.scheduler.lr_at(12)
    assert 0.0 < b < 0.1 and t.used.lrs[0] == pytest.approx(b)
    assert (f"CONFIG.TRAIN.EPOCH_NUM is 5, the checkpoint's run had 3: the LR schedule now spans "
            f"5 epochs and continues from epoch 3; the LR at the resume point goes from 0 to "
            f"{b:.5g}") in caplog.text


@pytest.mark.parametrize("saved_batches", [4, 8])
def test_a_cosine_from_epoch_0_continues_where_the_checkpoint_stopped(tmp_path, saved_batches):
    from zoo.solver import build_lr_scheduler

    from_0 = ["TRAIN.COSINE_AFTER_WARMUP", "False"]
    _epoch_checkpoint(tmp_path, _schedule_cfg(3, extra=from_0), saved_batches, 1)
    t = _schedule_trainer(tmp_path, _schedule_cfg(3, resume_epoch=1, extra=from_0), 8)
    t.train()
    plan = build_lr_scheduler(_schedule_cfg(3, extra=from_0),
                              torch.optim.SGD(t.model.parameters(), lr=0), 8)
    assert t.used.lrs == pytest.approx([plan.lr_at(i) for i in range(8, 24)])
    # Epoch 1 of a 3-epoch cosine from epoch 0: 0.1 x (1 + cos(pi / 3)) / 2, where the warmup ends.
    assert t.used.lrs[0] == pytest.approx(0.075)


def test_a_checkpoint_config_without_the_cosine_start_or_nesterov_resumes_under_defaults():
    # A checkpoint's config written without CONFIG.TRAIN.COSINE_AFTER_WARMUP or NESTEROV trained
    # the cosine that starts after the warmup and plain momentum: the keys' defaults, not
    # differences; the other values are.
    import yaml

    from zoo.config import cfg_to_yaml
    from zoo.train.checkpoint import config_differences

    saved = yaml.safe_load(cfg_to_yaml(_schedule_cfg(3)))
    del saved["CONFIG"]["TRAIN"]["COSINE_AFTER_WARMUP"]
    del saved["CONFIG"]["TRAIN"]["NESTEROV"]
    saved_yaml = yaml.safe_dump(saved)
    assert config_differences(saved_yaml, _schedule_cfg(3)) == []
    other = _schedule_cfg(3, extra=["TRAIN.COSINE_AFTER_WARMUP", "False",
                                    "TRAIN.NESTEROV", "True"])
    assert config_differences(saved_yaml, other) == [
        "CONFIG.TRAIN.COSINE_AFTER_WARMUP: True -> False", "CONFIG.TRAIN.NESTEROV: False -> True"]


def test_the_step_count_goes_on_from_the_checkpoints_when_the_schedule_moves(tmp_path, caplog):
    # A checkpoint of 4-step epochs (2 processes, say) resumed with 8-step epochs (1 process):
    # the LR schedule continues at step 8, where this run's epochs reach epoch 1, but 4
    # optimizer steps were taken, and the log records, checkpoints and step count go on from 4.
    import logging

    from zoo.config import cfg_to_yaml
    from zoo.infer.metrics import MetricsWriter
    from zoo.train.hooks import Checkpointer, MetricsLogger

    _epoch_checkpoint(tmp_path, _schedule_cfg(3), 4, 1)
    cfg = _schedule_cfg(3, resume_epoch=1)
    t = _schedule_trainer(tmp_path, cfg, 8)
    t.device, t.cfg_yaml, t.progress_bar = torch.device("cpu"), cfg_to_yaml(cfg), None
    t.writer, t.hooks = MetricsWriter(str(tmp_path), None), []
    t.register_hooks([MetricsLogger(display_freq=1), Checkpointer(str(tmp_path), 1)])
    with caplog.at_level(logging.INFO, logger="test_resume"):
        t.train()
    assert t.scheduler.iteration == 24  # the schedule as before: 8 + 2 x 8
    assert t.iteration == t.step.steps == 4 + 16
    iters = [r["iter"] for r in _records(tmp_path / "metrics.jsonl") if r["split"] == "train"]
    assert iters == list(range(5, 21))
    for epoch, steps in ((2, 12), (3, 20)):
        ckpt = torch.load(tmp_path / f"epoch_{epoch}.pth", weights_only=True)
        assert ckpt["iteration"] == steps and ckpt["scheduler"]["iteration"] == steps + 4
    assert ("the LR schedule continues from step 8, at the epoch the checkpoint reached (the "
            "count of optimizer steps in the logs and checkpoints goes on from 4)") in caplog.text
