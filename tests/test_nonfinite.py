"""CONFIG.TRAIN.NONFINITE: a NaN loss stops the job in one line (no checkpoint from that state),
or, with ``skip``, drops that optimizer step and counts it."""

import json
import math
import warnings

import pytest
import torch
import torch.nn as nn
from helpers import TINY_DATA, run_tool

from zoo.train.step import TrainStep
from zoo.utils.env import torch_at_least
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


# 8 training videos, batch 2: 4 iterations per epoch with one process, 2 with two. Training
# builds a fused SGD (torch >= 2.4), so from iteration 2 on the verdict is read one step late:
# iteration 6 is found at iteration 7's step, iteration 4 (an epoch's last) at the epoch's end.
@pytest.mark.parametrize("procs, nan_at, nan_rank", [
    (1, 6, 0), (1, 4, 0),
    pytest.param(2, 3, 1, marks=pytest.mark.slow)])  # 2 gloo processes: ~30 s
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
    # Only the epochs finished before the NaN's have checkpoints (best.pth: a validation's).
    epochs_before = (nan_at - 1) // (4 // procs)
    ckpt_dir = run_dir / "checkpoints"
    ckpts = sorted(p.name for p in ckpt_dir.iterdir()) if ckpt_dir.is_dir() else []
    assert ckpts == (["best.pth", "epoch_1.pth"] if epochs_before else []), ckpts
    for name in ckpts:
        state = torch.load(ckpt_dir / name, weights_only=True)
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


def _step_setup(mode, clip=0.0, fused=False, ema=0.0):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=fused or None)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    step = TrainStep(model, opt, sched, torch.device("cpu"), 3, clip_grad_norm=clip,
                     nonfinite=mode, ema_decay=ema)
    return model, opt, sched, step


# fused: the update is skipped on the device and the verdict read at the next step or settle()
needs_cpu_fused = pytest.mark.skipif(not torch_at_least(2, 4),
                                     reason="torch before 2.4 has no fused optimizer for the CPU")
FUSED = [False, pytest.param(True, marks=needs_cpu_fused)]
X, Y = torch.randn(5, 4, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0, 1])


def _poisoned(value=float("inf")):
    bad = X.clone()
    bad[0, 0] = value
    return bad


@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_skip_leaves_weights_and_optimizer_state_untouched(clip, fused):
    model, opt, sched, step = _step_setup("skip", clip, fused=fused, ema=0.9)
    step(X, Y)  # a finite step: momentum buffers exist now
    params = [p.detach().clone() for p in model.parameters()]
    bufs = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    averaged = [p.clone() for p in step.ema.module.parameters()]
    lr_before = sched.get_last_lr()[0]
    loss = step(_poisoned(), Y)
    assert not math.isfinite(float(loss))
    assert step.skipped == (0 if fused else 1)  # fused: not read yet
    step.settle()
    assert step.skipped == 1 and step.steps == 2
    for p, ref in zip(model.parameters(), params):
        assert torch.equal(p, ref)
    for p, ref in zip(model.parameters(), bufs):
        assert torch.equal(opt.state[p]["momentum_buffer"], ref)
    for p, ref in zip(step.ema.module.parameters(), averaged):
        assert torch.equal(p, ref)
    assert all(p.grad is None for p in model.parameters())
    assert sched.get_last_lr()[0] == pytest.approx(1.0 / 3 * 0.1) != lr_before  # advanced
    step(X, Y)  # training goes on with finite steps
    step.settle()
    assert step.skipped == 1
    assert not any(torch.equal(p, ref) for p, ref in zip(model.parameters(), params))


@needs_cpu_fused
@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_a_step_checked_late_is_the_step_checked_at_once_bit_for_bit(clip):
    """Fused SGD, momentum, clipping and an EMA: the update whose verdict stays on the device
    gives the weights, momentum and average of the update checked before it is taken."""
    runs = []
    for late in (True, False):
        model, opt, sched, step = _step_setup("skip", clip, fused=True, ema=0.9)
        if not late:
            step._on_device_ok = False  # the check that reads its verdict at once
        for i in range(4):
            step(X if i != 2 else _poisoned(), Y)
        step.settle()
        assert step.skipped == 1
        assert step._on_device_ok is late
        runs.append([t.detach().clone() for t in (
            *model.parameters(), *(opt.state[p]["momentum_buffer"] for p in model.parameters()),
            *step.ema.module.parameters())])
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@needs_cpu_fused
def test_the_first_sgd_step_is_checked_at_once():
    """Fused SGD fills its momentum buffers at its first update, skipped or not: that step's
    verdict is read before it, so a bad first step leaves no buffer behind."""
    model, opt, sched, step = _step_setup("skip", fused=True)
    step(_poisoned(), Y)
    assert step.skipped == 1 and not opt.state  # known at once, no buffer made
    step(X, Y)  # the first update: makes the buffers, still checked at once
    assert step.skipped == 1 and opt.state and step.check._pending is None
    step(X, Y)
    assert step.check._pending is not None  # from now on it is read late


@pytest.mark.parametrize("fused", FUSED)
def test_a_nonfinite_gradient_with_a_finite_loss_is_caught(fused):
    model, opt, sched, step = _step_setup("stop", fused=fused)
    step(X, Y)
    # A hook makes one gradient NaN while the loss stays finite.
    model.weight.register_hook(lambda g: g * float("nan"))
    with pytest.raises(NonFiniteLoss, match="iteration 2 on rank 0: the gradient of 'weight'"):
        step(X, Y)
        step.settle()  # fused: read here
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("fused", FUSED)
def test_stop_read_late_names_the_loss_at_the_next_step(fused):
    model, opt, sched, step = _step_setup("stop", fused=fused)
    step(X, Y)
    weight = model.weight.detach().clone()
    if not fused:
        with pytest.raises(NonFiniteLoss, match="iteration 2 on rank 0: the loss is nan"):
            step(_poisoned(float("nan")), Y)
        return
    step(_poisoned(float("nan")), Y)  # skipped on the device, not read yet
    assert torch.equal(model.weight, weight)
    with pytest.raises(NonFiniteLoss, match="iteration 2 on rank 0: the loss is nan"):
        step(X, Y)  # read at the next optimizer step, before its update
    assert torch.equal(model.weight, weight)


def test_a_nonfinite_parameter_is_named_first():
    model, opt, sched, step = _step_setup("stop")
    with torch.no_grad():
        model.bias[1] = float("nan")
    with pytest.raises(NonFiniteLoss, match="parameter 'bias' is non-finite"):
        step(X, Y)


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_skip_with_a_grad_scaler_keeps_training(clip):
    """fp16's GradScaler (CPU's here): a skipped step must leave the scaler usable, with and
    without the unscale_ that clipping does. The scaler owns the fused kernels' found_inf, so
    the verdict is read at once."""
    model, opt, sched, step = _step_setup("skip", clip, fused=torch_at_least(2, 4))
    step.scaler = torch.amp.GradScaler("cpu")
    step(X, Y)
    weight = model.weight.detach().clone()
    step(_poisoned(float("nan")), Y)
    assert step.skipped == 1 and torch.equal(model.weight, weight)
    step(X, Y)
    step(X, Y)
    assert step.skipped == 1 and not torch.equal(model.weight, weight)


@pytest.mark.cuda
@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_a_cuda_step_read_late_never_waits_for_the_device(clip):
    """With its verdict left on the device, a CUDA step (clipping, EMA, the LR step included)
    makes no call that synchronises with the device (torch's sync debug mode raises on one);
    a bad step is still skipped there and counted at settle()."""
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = nn.Linear(4, 3).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    step = TrainStep(model, opt, sched, device, 3, clip_grad_norm=clip, nonfinite="skip",
                     ema_decay=0.9)
    x, y, bad = X.to(device), Y.to(device), _poisoned().to(device)
    for _ in range(3):  # the first update is checked at once; the pinned buffer is made
        step(x, y)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in (x, x, bad):
            step(batch, y)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    step(x, y)  # reads the bad verdict: naming the bad tensor reads the device, as it may
    step.settle()
    assert step.skipped == 1 and step.steps == 7
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_skipped_first_step_moves_the_schedule_without_a_warning():
    """The schedule follows iterations, so a skipped first update still steps it: torch's
    warning that the calls are swapped would send the user hunting a bug that is not there."""
    model, opt, sched, step = _step_setup("skip", fused=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step(_poisoned(), Y)
        step(X, Y)
    assert step.skipped == 1 and sched.last_epoch == 2


def test_a_warning_inside_the_step_is_shown_once_not_at_every_step():
    """The schedule's first step hides torch's swapped-calls warning; entering catch_warnings at
    every step would reset Python's "once" memory, and a model's warning repeat each step."""

    class Warns(nn.Linear):
        def forward(self, x):
            warnings.warn("a model's own warning", FutureWarning)
            return super().forward(x)

    torch.manual_seed(0)
    model = Warns(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    step = TrainStep(model, opt, sched, torch.device("cpu"), 3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(4):
            step(X, Y)
        step.settle()
    said = [str(w.message) for w in seen]
    assert said.count("a model's own warning") == 1, said
    assert not any("lr_scheduler.step()" in m for m in said), said
