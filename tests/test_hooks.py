"""Each trainer hook on its own, in this process: a fake trainer (the attributes hooks read), a tiny
model, a temporary folder. No process is spawned and no process group exists (world size 1)."""

import json
import logging
import os
import time
import types

import pytest
import torch
import torch.nn as nn

from zoo.config import ConfigError, get_cfg
from zoo.infer.metrics import MetricsWriter
from zoo.train import hooks as H
from zoo.train.checkpoint import load_checkpoint
from zoo.train.ema import ModelEMA
from zoo.train.trainer import Trainer


class FakeTrainer:
    """The trainer attributes the built-in hooks read, filled in by each test."""

    def __init__(self, tmp_path, epochs=3, val_every=1, model=None):
        self.cfg = get_cfg()
        self.cfg.defrost()
        self.cfg.CONFIG.TRAIN.BATCH_SIZE = 2
        self.cfg.CONFIG.DATA.NUM_CLASSES = 3  # the test models' logits
        self.logger = logging.getLogger("test_hooks")
        self.device = torch.device("cpu")
        self.out_dir = str(tmp_path)
        self.writer = MetricsWriter(str(tmp_path), None)
        self.model = model or nn.Linear(4, 3)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.scheduler = types.SimpleNamespace(get_last_lr=lambda: 0.05,
                                               state_dict=lambda: {"last": 0.05})
        self.step = types.SimpleNamespace(skipped=0, ema=None, scaler=None, prepare=lambda c: c)
        self.epochs, self.start_epoch, self.epoch = epochs, 0, 0
        self.iters_per_epoch, self.iteration, self.inner_iter = 3, 0, 0
        self.batch, self.loss, self.progress_bar = None, None, None
        self.best_top1, self.is_best = -1.0, False
        self.cfg_yaml = "CONFIG: {}\n"
        self.val_every = val_every
        self.train_loader = self.val_loader = None

    def is_last_epoch(self):
        return self.epoch + 1 == self.epochs

    def validation_due(self):
        return self.is_last_epoch() or (self.epoch + 1) % self.val_every == 0


def _attach(hook, trainer):
    hook.trainer = trainer
    return hook


def _records(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def test_progress_bar_is_off_without_a_console(tmp_path):
    t = FakeTrainer(tmp_path)
    bar = _attach(H.ProgressBar(True), t)
    bar.before_epoch()  # pytest's stderr is not a terminal
    assert t.progress_bar is None
    bar.after_step()
    bar.after_epoch()


def test_progress_bar_counts_the_steps_and_closes(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "show_progress", lambda enabled: enabled)
    t = FakeTrainer(tmp_path)
    t.epoch = 1
    bar = _attach(H.ProgressBar(True), t)
    bar.before_epoch()
    tq = t.progress_bar
    assert tq.total == 3 and tq.desc.startswith("epoch 2/3")
    for _ in range(3):
        bar.after_step()
    assert tq.n == 3
    bar.after_epoch()
    assert t.progress_bar is None and tq.disable  # tqdm marks a closed bar disabled
    _attach(H.ProgressBar(False), t).before_epoch()
    assert t.progress_bar is None


def test_metrics_logger_records_and_lines(tmp_path, caplog):
    t = FakeTrainer(tmp_path)
    log = _attach(H.MetricsLogger(display_freq=2), t)
    losses, n_bad = [0.5, 1.5, 4.0], [0, 1, 2]
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        log.before_train()
        log.before_epoch()
        for i, (loss, bad) in enumerate(zip(losses, n_bad)):
            t.inner_iter, t.iteration = i, i + 1
            t.batch = (None, None, None, torch.tensor([bad, 0]))
            t.loss = torch.tensor(loss)
            log.after_step()
        t.step.skipped = 1
        log.after_epoch()
        log.after_train()
    recs = _records(tmp_path / "metrics.jsonl")
    train = [r for r in recs if r["split"] == "train"]
    # DISPLAY_FREQ 2 over 3 iterations: after the 2nd, and at the epoch's end.
    assert [(r["iter"], r["loss"], r["lr"]) for r in train] == [(2, 1.5, 0.05), (3, 4.0, 0.05)]
    assert all(r["epoch"] == 1 and r["clips_per_s"] > 0 for r in train)
    (epoch,) = [r for r in recs if r["split"] == "train_epoch"]
    assert epoch["loss"] == pytest.approx(sum(losses) / 3)
    assert epoch["skipped_videos"] == 3 and epoch["skipped_steps"] == 1 and epoch["time_s"] >= 0
    text = caplog.text
    assert "first iteration done" in text
    assert "epoch 1 iter 2/3 loss 1.5000 lr 0.05" in text
    assert "epoch 1 iter 3/3 loss 4.0000" in text
    assert "epoch 1 done: mean loss 2.0000" in text and "3 bad videos skipped, 1 non-finite" in text


def test_an_epoch_resumed_after_its_last_batch_writes_no_loss_record(tmp_path, caplog):
    # A preemption checkpoint taken after the epoch's last batch: the resumed run trains no batch
    # of it, so there is no loss to average (a 0.0 record would show as a dip in the plot).
    t = FakeTrainer(tmp_path)
    log = _attach(H.MetricsLogger(display_freq=2), t)
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        log.before_train()
        log.before_epoch()
        log.after_epoch()
        log.after_train()
    path = tmp_path / "metrics.jsonl"
    assert not path.exists() or not [r for r in _records(path) if r["split"] == "train_epoch"]
    assert "epoch 1 done: its batches were all trained before the resume" in caplog.text


def test_metrics_logger_counts_the_clips_of_each_batch(tmp_path, monkeypatch):
    # A multigrid run's batches differ from BATCH_SIZE (2 here): clips/s counts the labels.
    t = FakeTrainer(tmp_path)
    log = _attach(H.MetricsLogger(display_freq=3), t)
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(H.time, "perf_counter", lambda: next(clock))
    log.before_train()
    log.before_epoch()
    for i, n in enumerate([8, 4, 2]):
        t.inner_iter, t.iteration = i, i + 1
        t.batch, t.loss = (None, torch.zeros(n), None, torch.zeros(n)), torch.tensor(1.0)
        log.after_step()
    log.after_train()
    (rec,) = [r for r in _records(tmp_path / "metrics.jsonl") if r["split"] == "train"]
    assert rec["clips_per_s"] == pytest.approx(14.0)


def test_metrics_logger_shows_numbers_on_an_open_bar_instead_of_lines(tmp_path, caplog):
    t = FakeTrainer(tmp_path)
    shown = {}
    t.progress_bar = types.SimpleNamespace(set_postfix=lambda **kw: shown.update(kw))
    log = _attach(H.MetricsLogger(display_freq=1), t)
    log.before_epoch()
    t.batch, t.loss, t.epoch, t.start_epoch = (0, 0, 0, torch.zeros(2)), torch.tensor(0.25), 1, 0
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        log.after_step()
    assert shown["loss"] == "0.250" and shown["lr"] == "0.05"
    assert "iter 1/3" not in caplog.text and "first iteration" not in caplog.text  # not epoch 0


def _bn_model():
    return nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 3))


def test_precise_bn_recomputes_statistics_only_before_a_validation(tmp_path):
    torch.manual_seed(0)
    model = _bn_model()
    batches = [(torch.randn(8, 4) * (i + 1) + i, torch.zeros(8, dtype=torch.long), None, None)
               for i in range(3)]
    t = FakeTrainer(tmp_path, epochs=3, val_every=2, model=model)
    t.train_loader = batches
    hook = _attach(H.PreciseBN(num_iters=3), t)
    t.epoch = 0  # epoch 1: no validation after it
    hook.after_epoch()
    assert torch.equal(model[0].running_mean, torch.zeros(4))
    t.epoch = 1  # epoch 2: validation
    hook.after_epoch()
    # The true average over the 3 batches of each batch's mean and (unbiased) variance.
    means = torch.stack([b[0].mean(0) for b in batches]).mean(0)
    var = torch.stack([b[0].var(0, unbiased=True) for b in batches]).mean(0)
    assert torch.allclose(model[0].running_mean, means, atol=1e-5)
    assert torch.allclose(model[0].running_var, var, atol=1e-4)
    before = model[0].running_mean.clone()
    _attach(H.PreciseBN(num_iters=0), t).after_epoch()
    assert torch.equal(model[0].running_mean, before)


def test_precise_bn_recomputes_the_ema_statistics_with_the_ema_weights(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
    ema = ModelEMA(model, 0.9)
    with torch.no_grad():  # the average lags the trained weights: other BN inputs
        ema.module[0].weight.mul_(-2.0).add_(0.5)
        ema.module[0].bias.add_(3.0)
    batches = [(torch.randn(8, 4) * (i + 1) + i, torch.zeros(8, dtype=torch.long), None, None)
               for i in range(3)]
    t = FakeTrainer(tmp_path, epochs=1, model=model)
    t.train_loader = batches
    t.step.ema = ema
    _attach(H.PreciseBN(num_iters=3), t).after_epoch()

    def reference(linear):  # each batch's BN input, its mean and unbiased variance, averaged
        with torch.no_grad():
            inputs = [linear(b[0]) for b in batches]
        return (torch.stack([h.mean(0) for h in inputs]).mean(0),
                torch.stack([h.var(0, unbiased=True) for h in inputs]).mean(0))

    for net in (ema.module, model):
        mean, var = reference(net[0])
        assert torch.allclose(net[1].running_mean, mean, atol=1e-5)
        assert torch.allclose(net[1].running_var, var, atol=1e-4)
    assert not ema.module.training and model.training  # each back in its own mode


class Fixed(nn.Module):
    """Predicts class ``pred[i]`` for the clip whose first value is ``i``."""

    def __init__(self, pred):
        super().__init__()
        self.register_buffer("pred", torch.tensor(pred))
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        idx = x.flatten(1)[:, 0].long()
        return nn.functional.one_hot(self.pred[idx], 3).float() * 10 + self.w


def _val_batches(labels):
    clips = torch.arange(len(labels), dtype=torch.float).view(-1, 1).repeat(1, 4)
    labels = torch.tensor(labels)
    idx = torch.arange(len(labels))
    return [(clips[i:i + 2], labels[i:i + 2], idx[i:i + 2], torch.zeros(2, dtype=torch.long))
            for i in range(0, len(labels), 2)]


def test_validation_scores_logs_and_tracks_the_best(tmp_path, caplog):
    labels = [0, 1, 2, 0]
    t = FakeTrainer(tmp_path, epochs=3, val_every=2, model=Fixed([0, 1, 0, 0]))  # 3 of 4 right
    t.val_loader = _val_batches(labels)
    hook = _attach(H.Validation(), t)
    t.epoch = 0
    hook.after_epoch()
    assert not (tmp_path / "metrics.jsonl").exists() and t.best_top1 == -1.0
    t.epoch, t.iteration = 1, 7
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        hook.after_epoch()
    (rec,) = _records(tmp_path / "metrics.jsonl")
    assert rec["split"] == "val" and rec["epoch"] == 2 and rec["top1"] == 75.0
    assert rec["num_videos"] == 4 and rec["skipped_videos"] == 0
    assert t.is_best and t.best_top1 == 75.0
    assert "epoch 2 val: top1 75.00" in caplog.text
    # The last epoch validates too; a worse model is not the best.
    t.model.pred.copy_(torch.tensor([1, 1, 1, 1]))
    t.epoch = 2
    hook.after_epoch()
    assert not t.is_best and t.best_top1 == 75.0


def test_validation_evaluates_the_ema_weights_when_ema_is_on(tmp_path, caplog):
    model = Fixed([1, 1, 1, 1])  # all wrong but one
    ema = ModelEMA(model, 0.5)
    ema.module.pred.copy_(torch.tensor([0, 1, 2, 0]))  # all right
    t = FakeTrainer(tmp_path, epochs=1, model=model)
    t.step.ema = ema
    t.val_loader = _val_batches([0, 1, 2, 0])
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        _attach(H.Validation(), t).after_epoch()
    assert _records(tmp_path / "metrics.jsonl")[0]["top1"] == 100.0
    assert "epoch 1 val (EMA): top1 100.00" in caplog.text


def test_checkpointer_saves_on_its_schedule_and_the_best(tmp_path):
    t = FakeTrainer(tmp_path, epochs=3)
    save_dir = tmp_path / "ckpt"
    hook = _attach(H.Checkpointer(str(save_dir), save_freq=2), t)
    t.epoch = 0
    hook.after_epoch()
    assert not save_dir.exists()
    t.epoch, t.iteration, t.best_top1, t.is_best = 1, 10, 60.0, True
    hook.after_epoch()
    assert sorted(p.name for p in save_dir.iterdir()) == ["best.pth", "epoch_2.pth"]
    t.epoch, t.iteration, t.is_best = 2, 15, False  # the last epoch is always saved
    with torch.no_grad():
        t.model.weight.add_(1.0)
    hook.after_epoch()
    ckpt = load_checkpoint(str(save_dir / "epoch_3.pth"))
    assert (ckpt["epoch"], ckpt["iteration"], ckpt["best_top1"]) == (3, 15, 60.0)
    assert torch.equal(ckpt["model"]["weight"], t.model.weight)
    assert isinstance(ckpt["rng"], list) and len(ckpt["rng"]) == 1 and "ema" not in ckpt
    assert ckpt["scheduler"] == {"last": 0.05} and ckpt["cfg"] == t.cfg_yaml
    assert load_checkpoint(str(save_dir / "best.pth"))["epoch"] == 2


def test_a_reported_checkpoint_is_complete_and_an_unreported_one_is_written_in_the_background(
        tmp_path):
    from zoo.train.checkpoint_writer import BackgroundWriter

    class Reporter(H.HookBase):
        def __init__(self):
            self.seen = []

        def after_checkpoint(self, path):
            self.seen.append((path, os.path.exists(path)))

    for reported in (False, True):
        t = FakeTrainer(tmp_path / str(reported), epochs=1)
        t.checkpoint_writes = BackgroundWriter()
        t.hooks = []
        t.notify = lambda name, *args: [getattr(h, name)(*args) for h in t.hooks]
        save_dir = tmp_path / str(reported) / "ckpt"
        hook = _attach(H.Checkpointer(str(save_dir), save_freq=1), t)
        reporter = _attach(Reporter(), t)
        t.hooks = [hook] + ([reporter] if reported else [])
        hook.after_epoch()
        # Reported: written before the hook is told; else still in flight until a wait.
        assert t.checkpoint_writes.pending is not reported
        if reported:
            assert reporter.seen == [(str(save_dir / "epoch_1.pth"), True)]
        assert t.checkpoint_writes.wait() == (None if reported else str(save_dir / "epoch_1.pth"))
        assert (save_dir / "epoch_1.pth").exists()


USER_HOOKS = '''
from zoo.train.hooks import HookBase


class Counter(HookBase):
    def __init__(self):
        self.calls = []

    def after_step(self):
        self.calls.append(self.trainer.iteration)


class NotAHook:
    pass


class NeedsArgs(HookBase):
    def __init__(self, patience):
        self.patience = patience
'''


def test_user_hooks_load_from_a_file_or_a_module(tmp_path):
    path = tmp_path / "my_hooks.py"
    path.write_text(USER_HOOKS)
    hooks = H.load_user_hooks([f"{path}:Counter", "zoo.train.hooks:HookBase", ""])
    assert [type(h).__name__ for h in hooks] == ["Counter", "HookBase"]
    assert type(hooks[0]).__module__.startswith("zoo_user_my_hooks")


@pytest.mark.parametrize("entry, error, words", [
    ("{path}", ConfigError, "is not 'file.py:ClassName'"),
    ("{path}:Missing", ConfigError,
     "defines no 'Missing' (hook classes there: Counter, NeedsArgs)"),
    ("{path}:NotAHook", ConfigError, "NotAHook is not a subclass of zoo.train.hooks.HookBase"),
    ("{path}:NeedsArgs", ConfigError, "missing 1 required positional argument: 'patience'; a "
     "hook is built with no arguments: give them defaults"),
    ("{dir}/nope.py:Counter", FileNotFoundError, "no such file"),
    ("no_such_module_xyz:Counter", ImportError, "could not be imported"),
])
def test_a_bad_hook_entry_names_the_key_and_the_value(tmp_path, entry, error, words):
    path = tmp_path / "my_hooks.py"
    path.write_text(USER_HOOKS)
    entry = entry.format(path=path, dir=tmp_path)
    with pytest.raises(error) as e:
        H.load_user_hook(entry)
    assert "CONFIG.TRAIN.HOOKS" in str(e.value) and repr(entry.split(":")[0])[1:-1] in str(e.value)
    assert words in str(e.value)


class Recorder(H.HookBase):
    def __init__(self, events):
        self.events = events

    def __getattribute__(self, name):
        if name in ("before_train", "after_train", "before_epoch", "after_epoch",
                    "before_step", "after_step"):
            t = object.__getattribute__(self, "trainer")
            return lambda: self.events.append((name, t.epoch, t.inner_iter, t.iteration))
        return object.__getattribute__(self, name)


def _bare_trainer(tmp_path, accum_steps, n_batches, epochs):
    """A Trainer with only what its loop uses (no worker setup, loaders or process group)."""
    from zoo.train.step import TrainStep

    t = Trainer.__new__(Trainer)
    t.cfg = get_cfg()
    t.cfg.defrost()
    t.cfg.CONFIG.TRAIN.ACCUM_STEPS = accum_steps
    t.cfg.CONFIG.LOG.BASE_PATH = str(tmp_path)
    t.logger, t.out_dir, t.save_dir = logging.getLogger("test_hooks"), str(tmp_path), str(tmp_path)
    t.model = nn.Linear(4, 3)
    t.optimizer = torch.optim.SGD(t.model.parameters(), lr=0.1)
    t.scheduler = torch.optim.lr_scheduler.LambdaLR(t.optimizer, lambda s: 1.0)
    t.scheduler.base_lr = 0.1
    t.scheduler.peak_lr = lambda: 0.1  # what the opening line reports (WarmupScheduler.peak_lr)
    t.step = TrainStep(t.model, t.optimizer, t.scheduler, torch.device("cpu"), 3,
                       accum_steps=accum_steps)
    t.train_loader = torch.utils.data.DataLoader(
        [(torch.randn(4), i % 3, i, 0) for i in range(2 * n_batches)], batch_size=2)
    t.iters_per_epoch = len(t.train_loader)
    t.steps_per_epoch = t.iters_per_epoch // accum_steps
    t.epochs, t.start_epoch, t.epoch, t.iteration, t.inner_iter = epochs, 0, 0, 0, 0
    t.best_top1, t.is_best, t.hooks = -1.0, False, []
    t.multigrid, t.epoch_steps = None, None  # a plain schedule: every epoch the same length
    return t


def test_the_trainer_calls_hooks_in_order_and_counts_optimizer_steps(tmp_path):
    # 5 batches, ACCUM_STEPS 2: 2 optimizer steps per epoch, the 5th batch is dropped.
    t = _bare_trainer(tmp_path, accum_steps=2, n_batches=5, epochs=2)
    events = []
    t.register_hooks([Recorder(events), Recorder(events)])
    t.train()
    names = [e[0] for e in events]
    assert names[:2] == ["before_train"] * 2 and names[-2:] == ["after_train"] * 2
    steps = [e for e in events if e[0] == "after_step"][::2]  # each hook once per step
    assert [(e[1], e[2], e[3]) for e in steps] == [
        (0, 0, 0), (0, 1, 1), (0, 2, 1), (0, 3, 2), (1, 0, 2), (1, 1, 3), (1, 2, 3), (1, 3, 4)]
    epoch0 = names[2:names.index("after_epoch") + 2]
    assert epoch0 == (["before_epoch"] * 2 + ["before_step", "before_step", "after_step",
                                              "after_step"] * 4 + ["after_epoch"] * 2)
    assert t.step.steps == 4 and t.iteration == 4


@pytest.mark.parametrize("accum_steps, words", [
    (2, "training epochs 1..2, 4 batches each in 2 optimizer steps (the loader's last 1 of 5, "
        "short of an accumulation, are dropped), global batch 16 (8 per process x 1 processes "
        "x 2 accumulation)"),
    (1, "training epochs 1..2, 5 batches each in 5 optimizer steps, global batch 8 "),
])
def test_the_opening_line_counts_the_batches_and_steps_trained(tmp_path, caplog, accum_steps,
                                                               words):
    t = _bare_trainer(tmp_path, accum_steps=accum_steps, n_batches=5, epochs=2)
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        t.train()
    assert words in caplog.text


class _Items(torch.utils.data.Dataset):
    """Four-frame clips that take ``seconds`` each to make (a slow or a fast loader)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __len__(self):
        return 10

    def __getitem__(self, index):
        time.sleep(self.seconds)
        return torch.zeros(3, 4, 8, 8, dtype=torch.uint8), 0, index, 0


class _SleepStep:
    """A train step of a fixed duration (the model's share of the loop)."""

    micro, skipped, ema, scaler = 0, 0, None, None

    def __call__(self, clips, labels):
        time.sleep(0.03)
        return torch.tensor(1.0)

    def settle(self):
        pass


def _data_wait_of_an_epoch(tmp_path, seconds_per_item):
    tmp_path.mkdir()
    t = Trainer.__new__(Trainer)  # the real run_epoch, a fake run around it
    t.__dict__.update(FakeTrainer(tmp_path).__dict__)
    t.train_loader = torch.utils.data.DataLoader(_Items(seconds_per_item), batch_size=2)
    t.iters_per_epoch = t.steps_per_epoch = len(t.train_loader)
    t.step, t.multigrid, t.hooks = _SleepStep(), None, []
    t.register_hooks([H.MetricsLogger(display_freq=100)])
    t._call("before_train")
    t.run_epoch()
    t._call("after_train")
    (epoch,) = [r for r in _records(tmp_path / "metrics.jsonl") if r["split"] == "train_epoch"]
    return epoch["data_wait_share"]


def test_the_epoch_record_says_how_long_the_loop_waited_for_data(tmp_path, caplog):
    # Per batch: 2 x 30 ms to load, 30 ms to step -> about 2/3 of the epoch waits for data.
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        slow = _data_wait_of_an_epoch(tmp_path / "slow", 0.03)
    assert 0.5 < slow < 0.9
    assert f"data wait {100 * slow:.1f}% of it" in caplog.text
    fast = _data_wait_of_an_epoch(tmp_path / "fast", 0.0)
    assert fast < 0.2


def test_the_checkpoint_staging_buffer_is_made_at_the_first_optimizer_step_and_reused(tmp_path):
    """The pinned buffer of the snapshots is made once the optimizer has state (not at the
    first epoch boundary, where the device would wait for it), and the epoch's snapshot goes
    through that same buffer ("cpu" staging here: the path a CUDA model's state takes)."""
    from zoo.train.checkpoint_writer import BackgroundWriter, Staging

    t = FakeTrainer(tmp_path, epochs=1)
    t.optimizer = torch.optim.SGD(t.model.parameters(), lr=0.1, momentum=0.9)
    t.step.micro = 1  # mid-accumulation: the optimizer has not stepped
    t.checkpoint_writes = BackgroundWriter()
    t.checkpoint_writes._staging = staging = Staging(devices=("cpu",))
    hook = _attach(H.Checkpointer(str(tmp_path / "ckpt"), save_freq=1), t)
    hook.after_step()
    assert staging._buffer is None
    t.model(torch.randn(2, 4)).sum().backward()
    t.optimizer.step()  # momentum buffers: the state the snapshot copies too
    t.step.micro = 0
    hook.after_step()
    buffer = staging._buffer
    # weight 3x4 and bias 3, each with a momentum buffer, 64-byte aligned
    assert buffer is not None and buffer.numel() == 2 * (64 + 64)
    hook.after_step()  # once only
    assert staging._buffer is buffer
    hook.after_epoch()
    t.checkpoint_writes.wait()
    assert staging._buffer is buffer  # the snapshot fitted: no new buffer at the boundary
    ckpt = load_checkpoint(str(tmp_path / "ckpt" / "epoch_1.pth"))
    assert torch.equal(ckpt["model"]["weight"], t.model.weight)
    momentum = ckpt["optimizer"]["state"][0]["momentum_buffer"]
    assert torch.equal(momentum, t.optimizer.state[t.model.weight]["momentum_buffer"])


def test_a_train_record_carries_the_lr_its_step_used(tmp_path):
    # A cosine over 3 steps: the steps use 0.1, 0.075 and 0.025; the schedule holds the next
    # step's LR after each (0 after the last), which is not what the step trained with.
    from zoo.solver import WarmupScheduler

    t = FakeTrainer(tmp_path)
    t.scheduler = WarmupScheduler(t.optimizer, base_lr=0.1, total_iters=3)
    log = _attach(H.MetricsLogger(display_freq=1), t)
    log.before_train()
    log.before_epoch()
    for i in range(3):
        log.before_step()
        t.inner_iter, t.iteration = i, i + 1
        t.batch, t.loss = (None, torch.zeros(2), None, torch.zeros(2)), torch.tensor(1.0)
        t.scheduler.step()  # the trainer's step: the update, then the schedule moves on
        log.after_step()
    log.after_train()
    lrs = [r["lr"] for r in _records(tmp_path / "metrics.jsonl") if r["split"] == "train"]
    assert lrs == pytest.approx([0.1, 0.075, 0.025])


def test_a_mid_epoch_resume_keeps_the_train_records_of_the_batches_before_its_checkpoint(
        tmp_path):
    # ACCUM_STEPS 2, 8 batches an epoch: a checkpoint after batch 4 of epoch 2 is after step 6,
    # and batch 5, the first micro-batch after it, is logged with iter 6 too. A run resumed from
    # that checkpoint and killed after batch 6 leaves the records of batches 5 and 6 behind; the
    # next resume from the same checkpoint must drop both, or batch 5 is recorded twice.
    t = _bare_trainer(tmp_path, accum_steps=2, n_batches=8, epochs=2)
    t.device, t.progress_bar = torch.device("cpu"), None
    t.writer = MetricsWriter(str(tmp_path), None)
    t.register_hooks([H.MetricsLogger(display_freq=1)])
    t.train()
    path = tmp_path / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    train = [i for i, line in enumerate(lines) if json.loads(line)["split"] == "train"]
    straight = [(r["epoch"], r["iter"]) for r in map(json.loads, lines) if r["split"] == "train"]
    assert straight[8:14] == [(2, 4), (2, 5), (2, 5), (2, 6), (2, 6), (2, 7)]

    path.write_text("".join(lines[:train[13] + 1]))  # up to batch 6 of epoch 2
    t.start_epoch, t.start_iter, t.iteration = 1, 4, 6  # the checkpoint: 4 batches, 6 steps
    t.hooks[-1].before_train()
    kept = [(r["epoch"], r["iter"]) for r in _records(path) if r["split"] == "train"]
    assert kept == straight[:12]


def test_a_resume_hides_the_tensorboard_events_a_killed_run_wrote_after_its_checkpoint(
        tmp_path):
    # A run wrote steps 1..8 and was killed; its checkpoint is after step 5. The resumed run
    # writes steps 6..8 again: TensorBoard shows each step once, with the resumed run's values.
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = str(tmp_path / "tb")
    first = MetricsWriter(str(tmp_path), tb_dir)
    first.start(0)
    for step in range(1, 9):
        first.write({"split": "train", "epoch": 1 + step // 5, "loss": float(step)}, step)
    first.close()
    time.sleep(1.1)  # event files are named by the second they are opened in
    resumed = MetricsWriter(str(tmp_path), tb_dir)
    resumed.start(1, resumed_steps=5)
    for step in range(6, 9):
        resumed.write({"split": "train", "epoch": 2, "loss": 100.0 + step}, step)
    resumed.close()
    events = EventAccumulator(tb_dir)
    events.Reload()
    shown = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert shown == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0),
                     (6, 106.0), (7, 107.0), (8, 108.0)]


def test_a_fresh_start_moves_an_earlier_runs_tensorboard_events_into_a_run_of_their_own(
        tmp_path):
    pytest.importorskip("tensorboard")
    tb_dir = tmp_path / "tb"
    for _ in range(2):
        writer = MetricsWriter(str(tmp_path), str(tb_dir))
        writer.start(0)
        writer.write({"split": "train", "epoch": 1, "loss": 1.0}, 1)
        writer.close()
    here = [n for n in os.listdir(tb_dir) if n.startswith("events.out.tfevents.")]
    aside = [d for d in tb_dir.iterdir() if d.is_dir()]
    assert len(here) == 1 and len(aside) == 1 and aside[0].name.startswith("earlier_")
    assert len(os.listdir(aside[0])) == 1


def test_a_hook_that_is_not_a_hookbase_reports_checkpoints_only_with_after_checkpoint(tmp_path):
    class Plain:  # zoo.train(hooks=[...]) takes hooks that do not subclass HookBase
        def after_epoch(self):
            pass

    class PlainReporter:
        def after_checkpoint(self, path):
            pass

    t = FakeTrainer(tmp_path, epochs=1)
    t.notify = lambda name, *args: None
    t.hooks = [H.HookBase(), Plain()]
    assert not H.reports_checkpoints(t)
    t.hooks.append(PlainReporter())
    assert H.reports_checkpoints(t)


def test_a_mid_epoch_resume_keeps_a_hooks_records_of_the_batches_before_its_checkpoint(tmp_path):
    # docs/hooks.md: a hook's record carries epoch = trainer.epoch + 1 and batch = inner_iter + 1.
    first = MetricsWriter(str(tmp_path), None)
    first.start(0)
    for epoch in range(2):  # trainer.epoch
        for inner in range(4):  # trainer.inner_iter
            first.write({"split": "mine", "epoch": epoch + 1, "batch": inner + 1,
                         "iter": epoch * 4 + inner + 1}, epoch * 4 + inner + 1)
    first.close()
    resumed = MetricsWriter(str(tmp_path), None)
    resumed.start(1, resumed_batches=2, resumed_steps=6)  # after batch 2 of epoch 2
    kept = [(r["epoch"], r["batch"]) for r in _records(tmp_path / "metrics.jsonl")]
    assert kept == [(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2)]
    resumed.close()


def _stopping_trainer(tmp_path, monkeypatch, top1s, epochs, patience, save_freq=10,
                      best_metric="top1"):
    """A bare trainer with the real LR schedule, Validation and Checkpointer (every
    ``save_freq`` epochs, and the last); validation scores ``top1s`` in turn: numbers (top-1),
    or dicts of the figures that differ from top-1 50, top-5 100, mean-class 0, loss 1, 4
    videos."""
    from zoo.config import cfg_to_yaml
    from zoo.solver.lr_scheduler import build_lr_scheduler

    tmp_path.mkdir(parents=True, exist_ok=True)
    scores = iter(top1s)

    def evaluate(*args, **kwargs):
        score = next(scores)
        return {"top1": 50.0, "top5": 100.0, "mean_class_acc": 0.0, "loss": 1.0,
                "num_videos": 4, "skipped_videos": 0,
                **(score if isinstance(score, dict) else {"top1": score})}

    monkeypatch.setattr(H, "evaluate", evaluate)
    t = _bare_trainer(tmp_path, accum_steps=1, n_batches=2, epochs=epochs)
    t.cfg.CONFIG.TRAIN.EARLY_STOP_PATIENCE = patience
    t.cfg.CONFIG.TRAIN.BEST_METRIC = best_metric
    t.cfg.CONFIG.TRAIN.EPOCH_NUM = epochs
    t.scheduler = t.step.scheduler = build_lr_scheduler(t.cfg, t.optimizer, t.steps_per_epoch)
    t.cfg_yaml = cfg_to_yaml(t.cfg)
    t.device, t.progress_bar, t.last_val = torch.device("cpu"), None, None
    t.writer = MetricsWriter(str(tmp_path), None)
    t.val_loader = object()  # evaluate is replaced: never iterated
    t.register_hooks([H.Validation(), H.Checkpointer(str(tmp_path), save_freq=save_freq)])
    return t


def test_training_stops_after_patience_validations_without_a_new_best(tmp_path, monkeypatch,
                                                                      caplog):
    # Best 60 at epoch 2, then 55 and 60 (equal is not better): stop after epoch 4 of 6.
    t = _stopping_trainer(tmp_path, monkeypatch, [50.0, 60.0, 55.0, 60.0], epochs=6, patience=2)
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        t.train()
    assert t.epochs == 4 and t.iteration == 8
    assert ("stopping after epoch 4 of 6: no new best val top1 in 2 validations (best 60.00; "
            "CONFIG.TRAIN.EARLY_STOP_PATIENCE 2)") in caplog.text
    assert [r["epoch"] for r in _records(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    # The epoch it stopped at is saved as the last (SAVE_FREQ 10 would not have saved it).
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".pth")) == ["epoch_4.pth"]
    ckpt = load_checkpoint(str(tmp_path / "epoch_4.pth"))
    assert ckpt["epoch"] == 4 and ckpt["best_top1"] == 60.0 and ckpt["stale_validations"] == 2


def test_without_patience_every_epoch_trains_and_a_new_best_resets_the_count(tmp_path,
                                                                            monkeypatch):
    t = _stopping_trainer(tmp_path, monkeypatch, [50.0, 40.0, 45.0, 51.0, 30.0], epochs=5,
                          patience=0)
    t.train()
    assert t.epochs == 5 and t.stale_validations == 1
    u = _stopping_trainer(tmp_path / "u", monkeypatch, [50.0, 40.0, 51.0, 30.0, 20.0],
                          epochs=5, patience=2)
    u.train()
    assert u.epochs == 5 and u.stop_reason is None  # 51 at epoch 3 reset the count


def test_a_run_resumed_after_an_early_stop_trains_only_with_more_patience(tmp_path, monkeypatch,
                                                                          caplog):
    _stopping_trainer(tmp_path, monkeypatch, [50.0, 60.0, 55.0, 60.0], epochs=6,
                      patience=2).train()  # stops after epoch 4, as above

    def resumed(patience, top1s):
        t = _stopping_trainer(tmp_path, monkeypatch, top1s, epochs=6, patience=patience)
        t.cfg.CONFIG.TRAIN.AUTO_RESUME = True  # from epoch_4.pth (or epoch_5.pth, once there)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="test_hooks"):
            t.train()
        return t

    same = resumed(2, [])
    assert (same.start_epoch, same.epochs, same.stale_validations) == (4, 4, 2)
    assert ("nothing to train: the checkpoint resumed (epoch 4) comes after 2 validations "
            "without a new best top1 and CONFIG.TRAIN.EARLY_STOP_PATIENCE is 2") in caplog.text
    more = resumed(3, [58.0])  # one more validation without a new best: stops after epoch 5
    assert (more.start_epoch, more.epochs, more.stale_validations) == (4, 5, 3)
    assert "stopping after epoch 5 of 6: no new best val top1 in 3 validations" in caplog.text
    assert load_checkpoint(str(tmp_path / "epoch_5.pth"))["stale_validations"] == 3
    off = resumed(0, [57.0])  # no patience: the last epoch trains
    assert (off.start_epoch, off.epochs, off.stop_reason) == (5, 6, None)


def _best_epoch(folder):
    """The epoch file best.pth is a link to."""
    best = os.stat(os.path.join(folder, "best.pth"))
    (name,) = [n for n in os.listdir(folder) if n.startswith("epoch_")
               and os.path.samefile(os.path.join(folder, n), os.path.join(folder, "best.pth"))]
    assert best.st_nlink == 2
    return name


def test_the_best_validation_loss_picks_best_pth_and_stops_the_run(tmp_path, monkeypatch,
                                                                    caplog):
    # top-1 keeps rising while the loss is lowest at epoch 2: with BEST_METRIC loss, best.pth
    # is epoch 2 and two validations without a lower loss stop the run after epoch 4.
    scores = [{"top1": 40.0, "loss": 1.0}, {"top1": 45.0, "loss": 0.8},
              {"top1": 60.0, "loss": 0.9}, {"top1": 70.0, "loss": 0.8}]
    t = _stopping_trainer(tmp_path, monkeypatch, scores, epochs=6, patience=2, save_freq=1,
                          best_metric="loss")
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        t.train()
    assert t.epochs == 4 and (t.best_value, t.best_top1) == (0.8, 70.0)
    assert ("stopping after epoch 4 of 6: no new best val loss in 2 validations (best 0.8000; "
            "CONFIG.TRAIN.EARLY_STOP_PATIENCE 2)") in caplog.text
    assert _best_epoch(tmp_path) == "epoch_2.pth"
    ckpt = load_checkpoint(str(tmp_path / "epoch_4.pth"))
    assert (ckpt["best_value"], ckpt["best_top1"], ckpt["stale_validations"]) == (0.8, 70.0, 2)
    # The same validations picked by top-1: the newest epoch is the best, nothing stops.
    u = _stopping_trainer(tmp_path / "top1", monkeypatch, scores, epochs=4, patience=2,
                          save_freq=1)
    u.train()
    assert u.epochs == 4 and u.best_value == 70.0 and _best_epoch(tmp_path / "top1") == \
        "epoch_4.pth"


def test_mean_class_accuracy_picks_best_pth(tmp_path, monkeypatch):
    scores = [{"top1": 80.0, "mean_class_acc": 40.0}, {"top1": 70.0, "mean_class_acc": 65.0},
              {"top1": 90.0, "mean_class_acc": 50.0}]
    t = _stopping_trainer(tmp_path, monkeypatch, scores, epochs=3, patience=0, save_freq=1,
                          best_metric="mean_class_acc")
    t.train()
    assert (t.best_value, t.best_top1, t.stale_validations) == (65.0, 90.0, 1)
    assert _best_epoch(tmp_path) == "epoch_2.pth"


@pytest.mark.parametrize("metric", ["loss", "top1"])
def test_a_validation_of_no_videos_or_a_non_finite_loss_sets_no_best(tmp_path, monkeypatch,
                                                                     metric):
    # Every video unreadable: the evaluator's loss is 0 and its accuracies 0; a diverged
    # model's loss is NaN or infinite. None of these is a best, and each counts as stale.
    scores = [{"top1": 0.0, "loss": 0.0, "num_videos": 0}, {"top1": 20.0, "loss": float("nan")},
              {"top1": 30.0, "loss": 1.2}, {"top1": 10.0, "loss": float("inf")},
              {"top1": 0.0, "loss": 0.0, "num_videos": 0}]
    t = _stopping_trainer(tmp_path, monkeypatch, scores, epochs=5, patience=0, save_freq=1,
                          best_metric=metric)
    t.train()
    assert (t.best_value, t.best_top1, t.stale_validations) == ({"loss": 1.2, "top1": 30.0}[metric],
                                                                30.0, 2)
    assert _best_epoch(tmp_path) == "epoch_3.pth"


def test_a_run_resumes_only_with_its_own_best_metric(tmp_path, monkeypatch):
    from zoo.train.checkpoint import CheckpointError

    scores = [{"top1": 40.0, "loss": 1.0}, {"top1": 45.0, "loss": 0.8}]
    first = _stopping_trainer(tmp_path, monkeypatch, scores, epochs=2, patience=0, save_freq=1,
                              best_metric="loss")
    first.train()
    # Its best so far was the loss: resuming it to pick the best by top-1 is refused.
    other = _stopping_trainer(tmp_path, monkeypatch, [], epochs=4, patience=0,
                              best_metric="top1")
    other.cfg.CONFIG.TRAIN.AUTO_RESUME = True
    with pytest.raises(CheckpointError, match=r"CONFIG\.TRAIN\.BEST_METRIC: 'loss' -> 'top1'"):
        other.train()
    same = _stopping_trainer(tmp_path, monkeypatch, [{"top1": 90.0, "loss": 0.9}], epochs=3,
                             patience=0, save_freq=1, best_metric="loss")
    same.cfg.CONFIG.TRAIN.AUTO_RESUME = True
    same.train()
    assert (same.start_epoch, same.best_value, same.best_top1, same.is_best) == (2, 0.8, 90.0,
                                                                                False)
    assert same.stale_validations == 1


def test_a_checkpoint_from_before_best_metric_resumes_with_its_top1_as_the_best(tmp_path,
                                                                               monkeypatch):
    import yaml

    from zoo.train.checkpoint import atomic_save

    _stopping_trainer(tmp_path, monkeypatch, [40.0, 60.0], epochs=2, patience=0,
                      save_freq=1).train()
    # What an older zoo wrote: no best_value, and no BEST_METRIC in the saved config.
    path = str(tmp_path / "epoch_2.pth")
    ckpt = load_checkpoint(path)
    del ckpt["best_value"]
    saved = yaml.safe_load(ckpt["cfg"])
    del saved["CONFIG"]["TRAIN"]["BEST_METRIC"]
    ckpt["cfg"] = yaml.safe_dump(saved)
    atomic_save(ckpt, path)
    resumed = _stopping_trainer(tmp_path, monkeypatch, [55.0], epochs=3, patience=0, save_freq=1)
    resumed.cfg.CONFIG.TRAIN.AUTO_RESUME = True
    resumed.train()
    assert (resumed.start_epoch, resumed.best_value, resumed.is_best) == (2, 60.0, False)


def test_a_stop_asked_on_one_rank_stops_them_all(tmp_path, monkeypatch):
    # Validation gathers every rank's stop_reason: here rank 1's, while this rank asked nothing.
    t = _stopping_trainer(tmp_path, monkeypatch, [50.0, 60.0, 70.0], epochs=3, patience=0)
    monkeypatch.setattr(H.comm, "all_gather_object", lambda obj: [obj, "rank 1's hook asked"])
    t.train()
    assert t.epochs == 1 and t.stop_reason == "rank 1's hook asked"
    assert os.path.isfile(tmp_path / "epoch_1.pth")


class _StopAtEpochEnd(H.HookBase):
    def after_epoch(self):
        self.trainer.request_stop("asked in after_epoch")


def test_a_stop_asked_after_the_checkpoint_step_ends_the_run_and_says_the_epoch_is_not_saved(
        tmp_path, monkeypatch, caplog):
    t = _stopping_trainer(tmp_path, monkeypatch, [50.0, 60.0, 70.0], epochs=3, patience=0)
    t.register_hooks([_StopAtEpochEnd()])
    with caplog.at_level(logging.INFO, logger="test_hooks"):
        t.train()
    assert t.epochs == 1 and not any(n.endswith(".pth") for n in os.listdir(tmp_path))
    assert "epoch 1 is not checkpointed: the stop was asked after its checkpoint step" in (
        caplog.text)
    assert "stopping after epoch 1 of 3: asked in after_epoch" in caplog.text


def test_the_epoch_end_agreement_stops_a_rank_that_asked_nothing(tmp_path, monkeypatch):
    # Another rank asked in its after_epoch: this one learns it at the epoch's end (the first
    # gather, Validation's, still finds nobody asking).
    t = _stopping_trainer(tmp_path, monkeypatch, [50.0, 60.0, 70.0], epochs=3, patience=0)
    answers = iter([[None, None], [None, "rank 1's after_epoch"]])
    monkeypatch.setattr(H.comm, "all_gather_object", lambda obj: [obj] + next(answers)[1:])
    t.train()
    assert t.epochs == 1 and t.stop_reason == "rank 1's after_epoch"
