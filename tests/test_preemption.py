"""Preemption (zoo/launch/preemption.py): a SIGTERM mid-epoch stops every rank after the same step
with a checkpoint at that iteration, all processes exit 75, and the same command again continues
mid-epoch to weights bitwise equal to an uninterrupted run. Plus the pieces, in process: the agreed
stop, the grace watchdog, the mid-epoch file names and the sampler offset."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from helpers import ROOT, TINY_DATA, run_tool, train_killed_at

from zoo.launch.preemption import PREEMPTED_EXIT_CODE, PreemptionWatch

# A toy video model with dropout: torch's global random stream then shapes the weights, so a resume
# that did not restore it (or let the data loaders draw from it) would not be bitwise equal.
DROPOUT_MODEL = '''
import torch.nn as nn
from zoo.models import MODEL_REGISTRY


@MODEL_REGISTRY.register()
def toy_dropout3d(num_classes=10, width=8, **kwargs):
    return nn.Sequential(
        nn.Conv3d(3, width, kernel_size=3, padding=1), nn.ReLU(), nn.Dropout(0.3),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(width, num_classes),
    )
'''

# A test-only hook, loaded through CONFIG.TRAIN.HOOKS: right after optimizer step KILL_AT, rank 0
# notes the time and sends SIGTERM to its whole process group (the launcher, both workers and their
# data workers), as a scheduler does.
TERM_HOOK = """
import os
import signal
import time

from zoo.train.hooks import HookBase
from zoo.utils import comm

KILL_AT = {kill_at}


class TermAt(HookBase):
    def after_step(self):
        if self.trainer.iteration == KILL_AT and comm.is_main_process():
            with open({stamp!r}, "w") as f:
                f.write(repr(time.time()))
            os.killpg(os.getpgrp(), signal.SIGTERM)
            # The kernel may hand the signal to another thread of this process, which a busy
            # machine runs later: wait until this rank has noted it, so that it reaches this
            # step boundary's flags (as a signal arriving during the step would).
            deadline = time.monotonic() + 30
            while self.trainer.preemption.received is None and time.monotonic() < deadline:
                time.sleep(0.01)
"""

ARGS = [
    "DDP_CONFIG.NUM_CPU_PROCS", "2",
    "MODEL.NAME", "toy_dropout3d",
    "TRAIN.EPOCH_NUM", "2",
    "TRAIN.AUTO_RESUME", "True",
    "TRAIN.MIXUP_ALPHA", "0.4",
    "TRAIN.OPTIMIZER", "AdamW", "TRAIN.LR", "0.01",
    "TRAIN.PREEMPT_GRACE", "60",
    *TINY_DATA,
    "DATA.SYNTHETIC.TRAIN_PER_CLASS", "16",
    # a persistent data worker per rank: it gets the SIGTERM too and must not die of it
    "DATA.NUM_WORKERS", "1",
    "VAL.FREQ", "0",
]


def _weights_equal(a_path, b_path):
    a = torch.load(a_path, weights_only=True)
    b = torch.load(b_path, weights_only=True)
    assert a["iteration"] == b["iteration"]
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for k, s in a["optimizer"]["state"].items():
        for name, v in s.items():
            assert torch.equal(v, b["optimizer"]["state"][k][name]), (k, name)


@pytest.mark.slow
def test_sigterm_mid_epoch_checkpoints_exits_75_and_resumes_bitwise(tmp_path, synth_root):
    model_file = tmp_path / "dropout_model.py"
    model_file.write_text(DROPOUT_MODEL)
    common = ["--extra-modules", str(model_file), *ARGS, "DATA.SYNTHETIC.ROOT", synth_root,
              "LOG.BASE_PATH", str(tmp_path)]
    straight = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "straight"])
    assert straight.returncode == 0, straight.stdout[-3000:] + straight.stderr[-2000:]
    first = torch.load(tmp_path / "straight" / "checkpoints" / "epoch_1.pth", weights_only=True)
    steps_per_epoch = first["iteration"]
    kill_at = steps_per_epoch + 3  # the 3rd optimizer step of epoch 2
    # The flags sent at one step boundary are read at the next: rank 0 signals itself after step
    # kill_at, so every rank stops after step kill_at + 1, whenever rank 1 sees the signal.
    stop_at = kill_at + 1

    hook_file, stamp = tmp_path / "term_hook.py", tmp_path / "sent_at"
    hook_file.write_text(TERM_HOOK.format(kill_at=kill_at, stamp=str(stamp)))
    run_dir = tmp_path / "preempted"
    cmd = [sys.executable, os.path.join(ROOT, "tools", "train_ddp.py"), *common,
           "LOG.EXP_NAME", "preempted", "TRAIN.HOOKS", f"['{hook_file}:TermAt']"]
    # Its own session, so that the signal reaches the launcher and its workers and nothing else.
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == PREEMPTED_EXIT_CODE, out[-3000:] + err[-3000:]
    # The launcher reports how its workers ended: both exited 75, none was killed.
    assert "workers exited with 75;" in err or err.rstrip().endswith(
        f"workers exited with 75; exiting with {PREEMPTED_EXIT_CODE}"), err[-2000:]
    assert "killed" not in err, err[-2000:]

    ckpts = sorted(os.listdir(run_dir / "checkpoints"))
    name = f"preempt_epoch2_iter{stop_at}.pth"
    assert ckpts == ["epoch_1.pth", name], ckpts
    ckpt_path = run_dir / "checkpoints" / name
    ckpt = torch.load(ckpt_path, weights_only=True)
    assert (ckpt["epoch"], ckpt["iteration"]) == (1, stop_at)
    assert ckpt["epoch_iter"] == stop_at - steps_per_epoch
    assert len(ckpt["rng"]) == 2
    written_after = os.path.getmtime(ckpt_path) - float(stamp.read_text())
    assert 0 < written_after < 60, f"checkpoint written {written_after:.1f}s after the signal"

    resumed = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "preempted"])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    log = (run_dir / "log_rank0.txt").read_text()
    assert (f"continuing at epoch 2, batch {stop_at - steps_per_epoch + 1} of {steps_per_epoch}"
            in log), log[-3000:]
    # The epoch-end checkpoint made the mid-epoch one obsolete.
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["best.pth", "epoch_1.pth",
                                                           "epoch_2.pth"]
    _weights_equal(tmp_path / "straight" / "checkpoints" / "epoch_2.pth",
                   run_dir / "checkpoints" / "epoch_2.pth")
    # metrics.jsonl holds every training step once: those before the stop and those after.
    iters = [r["iter"] for r in map(json.loads, open(run_dir / "metrics.jsonl"))
             if r.get("split") == "train" and r.get("epoch") == 2]
    assert iters == list(range(steps_per_epoch + 1, 2 * steps_per_epoch + 1)), iters


def _train_records(path):
    return [(r["epoch"], r["iter"], r.get("batch")) for r in map(json.loads, open(path))
            if r.get("split") == "train"]


@pytest.mark.slow
def test_a_resume_killed_after_a_preemption_leaves_no_record_twice(tmp_path, synth_root,
                                                                   toy_model_file):
    # One process, ACCUM_STEPS 2 (4 steps of 8 batches an epoch): SIGTERM in epoch 2 leaves a
    # mid-epoch checkpoint; the resumed run is SIGKILLed two batches later (the first of them is
    # logged with the checkpoint's step count), and the next run resumes from that checkpoint
    # again. metrics.jsonl then holds the train records of a run never stopped, each once.
    common = ["--extra-modules", toy_model_file, "MODEL.NAME", "toy_conv3d", *TINY_DATA,
              "DATA.SYNTHETIC.TRAIN_PER_CLASS", "8", "DATA.SYNTHETIC.ROOT", synth_root,
              "DDP_CONFIG.NUM_CPU_PROCS", "1", "TRAIN.EPOCH_NUM", "2", "TRAIN.ACCUM_STEPS", "2",
              "TRAIN.AUTO_RESUME", "True", "VAL.FREQ", "0", "LOG.BASE_PATH", str(tmp_path)]
    straight = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "straight"])
    assert straight.returncode == 0, straight.stdout[-3000:] + straight.stderr[-2000:]

    hook_file = tmp_path / "term_hook.py"
    hook_file.write_text(TERM_HOOK.format(kill_at=6, stamp=str(tmp_path / "sent_at")))
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tools", "train_ddp.py"), *common,
         "LOG.EXP_NAME", "stopped", "TRAIN.HOOKS", f"['{hook_file}:TermAt']"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert proc.wait(timeout=240) == PREEMPTED_EXIT_CODE
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run_dir = tmp_path / "stopped"
    (name,) = [n for n in os.listdir(run_dir / "checkpoints") if n.startswith("preempt_")]
    stop_at = torch.load(run_dir / "checkpoints" / name, weights_only=True)["iteration"]

    train_killed_at(tmp_path, common, kill_at=stop_at + 1, exp="stopped")
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["epoch_1.pth", name]
    left = [r[:2] for r in _train_records(run_dir / "metrics.jsonl")]
    assert left[-2:] == [(2, stop_at), (2, stop_at + 1)]
    resumed = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "stopped"])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    expected = _train_records(tmp_path / "straight" / "metrics.jsonl")
    assert len(expected) == 16
    assert _train_records(run_dir / "metrics.jsonl") == expected


class _FakeGroup:
    """Two ranks' flag all-reduces, in process: round r's result is the MAX of both ranks' r-th
    flags, readable once both sent theirs (as a real all-reduce completes)."""

    def __init__(self):
        self.sent = {0: [], 1: []}

    def reducer(self, rank):
        def reduce(local):
            self.sent[rank].append(int(local))
            r = len(self.sent[rank]) - 1

            def result():
                other = self.sent[1 - rank]
                assert len(other) > r, "read before the other rank sent its flag"
                return max(self.sent[rank][r], other[r])

            return result

        return reduce


def test_ranks_agree_on_the_stop_step_whichever_rank_got_the_signal():
    group = _FakeGroup()
    ranks = [PreemptionWatch(60, group.reducer(0)), PreemptionWatch(60, group.reducer(1))]
    assert ranks[1].install()  # rank 1 handles real signals; rank 0 never gets one
    try:
        stops = []
        for step in range(1, 9):
            if step == 3:
                os.kill(os.getpid(), signal.SIGUSR1)  # arrives during step 3, on rank 1 only
            decided = [w.should_stop() for w in ranks]
            assert decided[0] == decided[1], f"ranks disagree after step {step}"
            if decided[0]:
                stops.append(step)
                break
        assert ranks[1].received == "SIGUSR1" and ranks[0].received is None
        assert stops == [4]  # the flag sent after step 3 is read after step 4, by both ranks
    finally:
        ranks[1].close(finish=False)


def test_one_process_stops_after_the_step_the_signal_arrived_in():
    watch = PreemptionWatch(60)
    assert watch.install()
    try:
        assert not watch.should_stop()
        os.kill(os.getpid(), signal.SIGTERM)
        assert watch.received == "SIGTERM"
        assert watch.should_stop()
    finally:
        watch.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_grace_runs_out_exits_75_saying_no_checkpoint_was_written(monkeypatch, capsys):
    from zoo.launch import preemption

    exits = []
    left = threading.Event()

    def fake_exit(code):  # the watchdog's os._exit, without ending pytest
        exits.append(code)
        watch._closed.set()  # the real exit would end the watchdog too
        left.set()

    monkeypatch.setattr(preemption.os, "_exit", fake_exit)
    watch = PreemptionWatch(0.5)
    assert watch.install()
    try:
        start = time.monotonic()
        os.kill(os.getpid(), signal.SIGUSR1)  # then no step boundary comes
        assert left.wait(20), "the watchdog never ended the process"
        took = time.monotonic() - start
    finally:
        watch.close(finish=False)
    assert exits == [PREEMPTED_EXIT_CODE]
    assert 0.5 <= took < 10, took
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "PREEMPT_GRACE = 0.5s ran out" in lines[0], lines
    assert "no checkpoint was written" in lines[0]


# A process whose main thread blocks inside C++ (a TCPStore get of a key nobody sets, as a step
# blocked in a collective does), so no Python signal handler can run. First it forks a child that
# handles SIGTERM itself (as a data worker does) and stops it with SIGTERM: the child's signal is
# not the parent's.
_BLOCKED_IN_CPP = """
import datetime
import multiprocessing
import os
import signal
import sys
import time

import torch.distributed as dist

from zoo.launch.preemption import PreemptionWatch


def child(ready):
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    ready.set()
    time.sleep(60)


store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=120))
watch = PreemptionWatch(float(sys.argv[1]))
assert watch.install()
ctx = multiprocessing.get_context("fork")
ready = ctx.Event()
worker = ctx.Process(target=child, args=(ready,))
worker.start()
assert ready.wait(30)
os.kill(worker.pid, signal.SIGTERM)
worker.join()
time.sleep(0.5)  # time for the watchdog to see a signal, had it been this process's
print("after the child's SIGTERM:", watch.received, flush=True)
print("blocked", flush=True)
store.get("never-set")
print("store.get returned", flush=True)
"""


@pytest.mark.slow
def test_grace_runs_out_while_the_main_thread_is_blocked_in_cpp():
    """SIGTERM while the step is blocked in C++ (a collective a stopped rank never joins): no
    Python handler runs, yet the process exits 75 with its one line PREEMPT_GRACE after the
    signal, not when (or if) the blocking call returns."""
    grace = 1.0
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-c", _BLOCKED_IN_CPP, str(grace)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not lines or lines[-1] != "blocked\n":
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-3000:]
            lines.append(line)
        assert lines[-2] == "after the child's SIGTERM: None\n", lines
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the process was still blocked 60 s after SIGTERM; "
                        f"PREEMPT_GRACE is {grace:g}s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == PREEMPTED_EXIT_CODE, out + err[-3000:]
    assert "store.get returned" not in out
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: rank 0 preempted by SIGTERM: CONFIG.TRAIN.PREEMPT_GRACE = "
                      f"{grace:g}s ran out; no checkpoint was written (a resume continues from "
                      "the newest checkpoint in the run's folder, if it has one); exiting with 75"
                      ], err[-3000:]


def test_mid_epoch_checkpoints_sort_after_their_epoch_and_are_never_epoch_files(tmp_path):
    from zoo.config import get_cfg
    from zoo.infer.tester import find_test_checkpoint
    from zoo.train.checkpoint import (
        epoch_checkpoints,
        find_resume_checkpoint,
        latest_checkpoint,
        save_checkpoint,
        save_preempt_checkpoint,
    )

    d = str(tmp_path)
    save_checkpoint(d, {"epoch": 1}, 1, keep_last=1)
    mid = save_preempt_checkpoint(d, {"epoch": 1, "iteration": 13, "epoch_iter": 3})
    assert os.path.basename(mid) == "preempt_epoch2_iter13.pth"
    assert latest_checkpoint(d) == mid
    # Epoch-file tools never see it: KEEP_LAST's list, RESUME_EPOCH, test_ddp's default.
    assert [os.path.basename(p) for p in epoch_checkpoints(d)] == ["epoch_1.pth"]
    assert latest_checkpoint(d, mid_epoch=False) == os.path.join(d, "epoch_1.pth")
    cfg = get_cfg()
    cfg.CONFIG.LOG.SAVE_DIR = os.path.basename(d)
    assert find_test_checkpoint(cfg, os.path.dirname(d)) == os.path.join(d, "epoch_1.pth")
    cfg.CONFIG.TRAIN.AUTO_RESUME = True
    assert find_resume_checkpoint(cfg, d, None) == mid
    # A later stop in the same epoch replaces it; the epoch's end makes it obsolete.
    later = save_preempt_checkpoint(d, {"epoch": 1, "iteration": 17, "epoch_iter": 7})
    assert sorted(os.listdir(d)) == ["epoch_1.pth", "preempt_epoch2_iter17.pth"]
    assert latest_checkpoint(d) == later
    save_checkpoint(d, {"epoch": 2}, 2, keep_last=1)
    assert sorted(os.listdir(d)) == ["epoch_2.pth"]


def test_a_mid_epoch_checkpoint_refuses_another_number_of_processes(tmp_path):
    from zoo.config import cfg_to_yaml, get_cfg
    from zoo.train.checkpoint import CheckpointError, load_training_state, training_state

    cfg = get_cfg()
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    path = str(tmp_path / "preempt_epoch1_iter3.pth")
    torch.save(training_state(model, opt, sched, None, None, 0, 3, cfg_to_yaml(cfg),
                              [{}, {}], -1.0, epoch_iter=3), path)
    with pytest.raises(CheckpointError, match="stopped mid-epoch in a job of 2 processes"):
        load_training_state(path, cfg, model, opt, sched)


class _Counting(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n, self.read = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, item):
        epoch, index = item
        self.read.append(index)
        return index


def test_sampler_offset_skips_batches_without_reading_them():
    from torch.utils.data import DataLoader, DistributedSampler

    from zoo.data.build import EpochSampler

    data = _Counting(40)
    sampler = EpochSampler(DistributedSampler(data, num_replicas=2, rank=1, shuffle=True,
                                              seed=7))
    loader = DataLoader(data, batch_size=4, sampler=sampler, drop_last=True)
    sampler.set_epoch(3)
    full = [b.tolist() for b in loader]
    data.read.clear()
    sampler.set_epoch(3, skip=2 * 4)
    rest = [b.tolist() for b in loader]
    assert rest == full[2:]
    assert sorted(data.read) == sorted(i for b in full[2:] for i in b)  # nothing else was read
    # The offset holds for one pass: the next one (precise BN) reads the epoch from its start.
    assert [b.tolist() for b in loader] == full


def _worker_that_stops_on_usr1(ready, code=PREEMPTED_EXIT_CODE):
    signal.signal(signal.SIGUSR1, lambda signum, frame: os._exit(code))
    ready.set()
    # Short sleeps: the handler runs in the main thread, and a signal that another thread of this
    # process takes (one a library started after the fork) does not end the main thread's sleep.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)


def _process_status(pid: int) -> str:
    """The threads, state and blocked-signal mask of process ``pid`` (Linux), for a message."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return " ".join(line.strip() for line in f
                            if line.startswith(("State:", "Threads:", "SigBlk:")))
    except OSError:
        return "(no /proc)"


def test_the_launcher_forwards_the_signal_waits_for_its_workers_and_exits_75():
    import multiprocessing

    from zoo.launch.preemption import Preempted, launcher_signals

    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    worker = ctx.Process(target=_worker_that_stops_on_usr1, args=(ready,))
    worker.start()
    try:
        assert ready.wait(30)
        status = _process_status(worker.pid)
        with pytest.raises(Preempted) as stopped:
            with launcher_signals(grace_s=20):
                os.kill(os.getpid(), signal.SIGUSR1)  # only the launcher gets it
                time.sleep(30)  # the handler ends this wait once the worker is gone
        assert stopped.value.code == PREEMPTED_EXIT_CODE
        assert str(stopped.value) == "preempted by SIGUSR1: workers exited with 75", \
            f"the worker, before the signal: {status}"
        assert worker.exitcode == PREEMPTED_EXIT_CODE  # it got the forwarded signal
    finally:
        if worker.is_alive():
            worker.kill()
        worker.join()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_a_signal_after_the_workers_finished_training_is_not_a_preemption():
    import multiprocessing

    from zoo.launch.preemption import launcher_signals

    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    worker = ctx.Process(target=_worker_that_stops_on_usr1, args=(ready, 0))
    worker.start()
    try:
        assert ready.wait(30)
        with launcher_signals(grace_s=20):
            os.kill(os.getpid(), signal.SIGUSR1)
            worker.join(30)  # the handler already joined it; no Preempted was raised
        assert worker.exitcode == 0
    finally:
        if worker.is_alive():
            worker.kill()
        worker.join()


def test_a_launcher_signalled_before_any_worker_started_exits_75_at_once():
    from zoo.launch.preemption import Preempted, launcher_signals

    with pytest.raises(Preempted, match="before any worker started"):
        with launcher_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
