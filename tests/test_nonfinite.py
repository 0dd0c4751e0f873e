"""CONFIG.TRAIN.NONFINITE: a NaN loss stops the job in one line (no checkpoint from that state),
or, with ``skip``, drops that optimizer step and counts it."""

import json
import math

import pytest
import torch
import torch.nn as nn
from helpers import TINY_DATA, run_tool

from zoo.train.step import TrainStep
from zoo.utils.errors import NonFiniteLoss

# A toy model that returns NaN logits at its NAN_AT-th training forward on rank NAN_RANK.
NAN_MODEL = '''
import os
import torch.nn as nn
from zoo.models import MODEL_REGISTRY

NAN_AT = {nan_at}
NAN_RANK = {nan_rank}


class NaNAt(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv3d(3, 4, kernel_size=3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(4, num_classes))
        self.calls = 0

    def forward(self, x):
        out = self.net(x)
        if self.training:
            self.calls += 1
            if self.calls == NAN_AT and int(os.environ.get("RANK", 0)) == NAN_RANK:
                out = out * float("nan")
        return out


@MODEL_REGISTRY.register()
def nan_at_k(num_classes=10, **kwargs):
    return NaNAt(num_classes)
'''


def _train(tmp_path, synth_root, nan_at, nan_rank, mode, procs, epochs):
    model_file = tmp_path / "nan_model.py"
    model_file.write_text(NAN_MODEL.format(nan_at=nan_at, nan_rank=nan_rank))
    out = tmp_path / "runs"
    ddp = (["DDP_CONFIG.NUM_CPU_PROCS", str(procs)] if procs > 1
           else ["DDP_CONFIG.DISTRIBUTED", "False"])
    r = run_tool("train_ddp.py", [
        "--extra-modules", str(model_file), *ddp,
        "MODEL.NAME", "nan_at_k", "TRAIN.EPOCH_NUM", str(epochs),
        "TRAIN.NONFINITE", mode, "LOG.SAVE_FREQ", "1",
        "DATA.SYNTHETIC.ROOT", synth_root,
        "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "nan",
        *TINY_DATA,
    ], timeout=180)
    return r, out / "nan"


def _error_lines(r):
    return [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("error:")]


# 8 training videos, batch 2: 4 iterations per epoch with one process, 2 with two.
@pytest.mark.parametrize("procs, nan_at, nan_rank", [
    (1, 6, 0), pytest.param(2, 3, 1, marks=pytest.mark.slow)])  # 2 gloo processes: ~30 s
def test_stop_names_iteration_and_rank_and_saves_nothing_after(tmp_path, synth_root, procs,
                                                               nan_at, nan_rank):
    r, run_dir = _train(tmp_path, synth_root, nan_at, nan_rank, "stop", procs, epochs=3)
    assert r.returncode != 0, r.stdout + r.stderr
    lines = _error_lines(r)
    assert len(lines) == 1, r.stdout + r.stderr
    line = lines[0]
    assert f"iteration {nan_at} on rank {nan_rank}" in line, line
    assert "the loss is nan" in line, line
    assert "Traceback" not in r.stderr
    # The NaN is in epoch 2: epoch 1's checkpoint exists, nothing later.
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert ckpts == ["best.pth", "epoch_1.pth"], ckpts  # best.pth: epoch 1's validation
    for name in ckpts:
        state = torch.load(run_dir / "checkpoints" / name, weights_only=True)
        assert state["epoch"] == 1 and state["iteration"] < nan_at


@pytest.mark.slow
def test_skip_counts_the_skipped_step_and_finishes(tmp_path, synth_root):
    r, run_dir = _train(tmp_path, synth_root, 6, 0, "skip", 1, epochs=3)
    assert r.returncode == 0, r.stdout + r.stderr
    log = (run_dir / "log_rank0.txt").read_text()
    assert "iteration 6 on rank 0: the loss is nan" in log and "step skipped" in log
    assert "epoch 2 done" in log and "1 non-finite steps skipped" in log
    assert "training finished" in log and "; 1 non-finite steps skipped" in log
    with open(run_dir / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f if line.strip()]
    epochs = {rec["epoch"]: rec for rec in records if rec.get("split") == "train_epoch"}
    assert [epochs[e]["skipped_steps"] for e in (1, 2, 3)] == [0, 1, 0]
    # The weights that were saved are finite: the NaN step never reached them.
    state = torch.load(run_dir / "checkpoints" / "epoch_3.pth", weights_only=True)
    assert all(torch.isfinite(v).all() for v in state["model"].values())


def _step_setup(mode, clip=0.0):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    step = TrainStep(model, opt, sched, torch.device("cpu"), 3, clip_grad_norm=clip,
                     nonfinite=mode)
    return model, opt, sched, step


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_skip_leaves_weights_and_optimizer_state_untouched(clip):
    model, opt, sched, step = _step_setup("skip", clip)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    step(x, y)  # a finite step: momentum buffers exist now
    params = [p.detach().clone() for p in model.parameters()]
    bufs = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    lr_before = sched.get_last_lr()[0]
    bad = x.clone()
    bad[0, 0] = float("inf")
    loss = step(bad, y)
    assert not math.isfinite(float(loss))
    assert step.skipped == 1 and step.steps == 2
    for p, ref in zip(model.parameters(), params):
        assert torch.equal(p, ref)
    for p, ref in zip(model.parameters(), bufs):
        assert torch.equal(opt.state[p]["momentum_buffer"], ref)
    assert all(p.grad is None for p in model.parameters())
    assert sched.get_last_lr()[0] == pytest.approx(1.0 / 3 * 0.1) != lr_before  # advanced
    step(x, y)  # training goes on with finite steps
    assert step.skipped == 1
    assert not any(torch.equal(p, ref) for p, ref in zip(model.parameters(), params))


def test_a_nonfinite_gradient_with_a_finite_loss_is_caught():
    model, opt, sched, step = _step_setup("stop")
    # A hook makes one gradient NaN while the loss stays finite.
    model.weight.register_hook(lambda g: g * float("nan"))
    with pytest.raises(NonFiniteLoss, match="iteration 1 on rank 0: the gradient of 'weight'"):
        step(torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1]))


def test_a_nonfinite_parameter_is_named_first():
    model, opt, sched, step = _step_setup("stop")
    with torch.no_grad():
        model.bias[1] = float("nan")
    with pytest.raises(NonFiniteLoss, match="parameter 'bias' is non-finite"):
        step(torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1]))


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_skip_with_a_grad_scaler_keeps_training(clip):
    """fp16's GradScaler (CPU's here): a skipped step must leave the scaler usable, with and
    without the unscale_ that clipping does."""
    model, opt, sched, step = _step_setup("skip", clip)
    step.scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    step(x, y)
    weight = model.weight.detach().clone()
    bad = x.clone()
    bad[0, 0] = float("nan")
    step(bad, y)
    assert step.skipped == 1 and torch.equal(model.weight, weight)
    step(x, y)
    step(x, y)
    assert step.skipped == 1 and not torch.equal(model.weight, weight)
