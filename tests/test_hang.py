"""Hung ranks: the heartbeat names a silent rank and ends the job; a slow one is left be.

The first tests run heartbeat threads in this process against a real TCPStore (seconds); the
others start real jobs and SIGSTOP one worker (slow tier).
"""

import os
import re
import shutil
import signal
import socket
import sys
import threading
import time

import pytest
from helpers import ROOT, TOY_MODEL

from zoo.launch import heartbeat

TIMEOUT_S = 2.0  # HANG_TIMEOUT of the in-process tests: beats every 0.5 s


class _Beating(heartbeat.Heartbeat):
    """A heartbeat whose end is recorded instead of ending this (the test's) process."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ended = None
        self.ended_at = None

    def _end(self, report):
        self.report, self.ended, self.ended_at = report, report["line"], time.monotonic()
        self._stop.set()  # one report per rank, like a process that exits


def _freeze(hb):
    """Stop ``hb``'s thread without saying it is done: what a SIGSTOP looks like from outside."""
    hb._stop.set()
    hb._thread.join()


@pytest.fixture()
def store():
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield dist.PrefixStore("zoo/test-session/pg/", server)


def _ranks(store, n, nodes=(0, 0, 1)):
    return [_Beating(store, r, n, nodes[r], TIMEOUT_S).start() for r in range(n)]


def _wait(cond, limit_s):
    deadline = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _seen_step(watcher):
    """The step in the last beat ``watcher`` read from the rank it watches, else None."""
    beat = watcher._beat
    return (beat["epoch"], beat["iter"]) if beat else None


def _rounds_after(ranks, seconds, limit_s=30):
    """Wait until ``seconds`` have passed and every rank in ``ranks`` has then begun two more beat
    rounds, i.e. each has judged its neighbour at least once with that much time gone; False if a
    rank stopped beating (it ended) or ``limit_s`` ran out."""
    until = time.monotonic() + seconds
    if not _wait(lambda: time.monotonic() >= until, seconds + limit_s):
        return False
    seqs = [hb._seq for hb in ranks]
    return _wait(lambda: all(hb._seq >= seq + 2 for hb, seq in zip(ranks, seqs)), limit_s)


def test_a_silent_rank_is_named_with_its_node_host_and_last_step(store):
    ranks = _ranks(store, 3)
    try:
        ranks[1].step = (2, 140)  # what trainer.note_step records after epoch 2 iteration 140
        # Its watcher (rank 0) has read a beat that carries it.
        assert _wait(lambda: _seen_step(ranks[0]) == (2, 140), 30), ranks[0]._beat
        _freeze(ranks[1])
        frozen_at = time.monotonic()
        live = [ranks[0], ranks[2]]
        # Its watcher (rank 0) reports it; rank 2 reads the report at its next beat.
        assert _wait(lambda: all(hb.ended for hb in live), TIMEOUT_S + 4), [
            hb.ended for hb in live]
        host = socket.gethostname()
        expected = (f"rank 1 (node 0, {host}) sent no heartbeat for 2 s; the last step it reported "
                    "was epoch 2 iter 140")
        for hb in live:
            assert hb.ended.startswith(expected), hb.ended
        # Within HANG_TIMEOUT plus two beat intervals (and some slack for a loaded machine).
        assert ranks[0].ended_at - frozen_at < TIMEOUT_S + 2 * ranks[0].interval + 1.0
        assert heartbeat.read_report(store) == ranks[0].ended  # what zoo's launcher prints
        # What the ranks of its node need to kill it: its pid (here: this process).
        assert ranks[2].report["pid"] == os.getpid() and ranks[2].report["node"] == 0
    finally:
        for hb in ranks:
            hb._stop.set()


@pytest.mark.slow  # ~6 s
def test_a_rank_that_finished_is_not_hung_and_its_successor_is_still_watched(store):
    ranks = _ranks(store, 3)
    try:
        ranks[1].stop()  # finished normally: marks itself done
        assert _wait(lambda: ranks[0]._target == 2, 30)  # rank 0 skipped the finished rank 1
        # Longer than HANG_TIMEOUT later, with rounds of both live ranks in between: no report.
        _rounds_after([ranks[0], ranks[2]], TIMEOUT_S + 1.5)
        assert [hb.ended for hb in ranks] == [None, None, None]
        assert heartbeat.read_report(store) is None
        assert ranks[0]._target == 2  # rank 0 skipped the finished rank 1
        _freeze(ranks[2])
        assert _wait(lambda: ranks[0].ended is not None, TIMEOUT_S + 4)
        assert ranks[0].ended.startswith("rank 2 (node 1, "), ranks[0].ended
        assert "it had reported no finished training step" in ranks[0].ended
    finally:
        for hb in ranks:
            hb._stop.set()


class _GatedStore:
    """A store whose ``set`` waits for ``gate``: a watcher stuck in a store call (or paused)."""

    def __init__(self, store):
        self.store, self.gate, self.entered = store, threading.Event(), threading.Event()

    def set(self, key, value):
        self.entered.set()
        self.gate.wait()
        return self.store.set(key, value)

    def __getattr__(self, name):
        return getattr(self.store, name)


@pytest.mark.slow  # ~6 s
def test_a_watcher_that_was_held_up_itself_does_not_blame_its_neighbour(store):
    """Rank 0's thread is held up longer than HANG_TIMEOUT (paused, or a store outage) while rank 1
    could not beat either; both come back. Rank 0 has seen nothing meanwhile: no report."""
    ranks = _ranks(store, 2)
    try:
        watcher, neighbour = ranks
        watcher.store = _GatedStore(watcher.store)
        assert watcher.store.entered.wait(30)  # rank 0 is waiting in set()
        _freeze(neighbour)
        time.sleep(TIMEOUT_S + 1.0)  # both held up longer than HANG_TIMEOUT (at least this long)
        neighbour._stop.clear()
        neighbour._changed = time.monotonic()  # what its own pause check does in a real process
        neighbour._thread = threading.Thread(target=neighbour._run, daemon=True)
        neighbour._thread.start()
        watcher.store.gate.set()
        # Rank 0 has read a beat its neighbour sent after coming back, and judged it: no report.
        back = neighbour._seq
        assert _wait(lambda: watcher._beat is not None and watcher._beat["seq"] > back
                     or watcher.ended is not None, 30)
        _rounds_after([watcher], 0)
        assert watcher.ended is None and neighbour.ended is None, watcher.ended or neighbour.ended
        _freeze(neighbour)  # and a real silence after that is still caught
        assert _wait(lambda: watcher.ended is not None, TIMEOUT_S + 4)
        assert watcher.ended.startswith("rank 1 (node 0, ")
    finally:
        for hb in ranks:
            hb._stop.set()
            hb.store = getattr(hb.store, "store", hb.store)


KILL_SIBLING = """
import importlib.util, os, subprocess, sys, time
if sys.argv[1] == "parent":
    a = subprocess.Popen([sys.executable, "-c", sys.argv[2], "sleeper"])
    b = subprocess.run([sys.executable, "-c", sys.argv[2], "killer", str(a.pid)])
    print("sleeper", a.wait(timeout=30), "killer", b.returncode)
elif sys.argv[1] == "sleeper":
    time.sleep(30)
else:
    # heartbeat.py by its path: importing zoo.launch (and torch) would take seconds.
    spec = importlib.util.spec_from_file_location("hb", "zoo/launch/heartbeat.py")
    hb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hb)
    kill_if_sibling = hb.kill_if_sibling
    # Not itself, not its parent (not a sibling), but its sibling: killed.
    assert not kill_if_sibling(os.getpid()) and not kill_if_sibling(os.getppid())
    sys.exit(0 if kill_if_sibling(int(sys.argv[2])) else 3)
"""


def test_only_a_sibling_worker_is_killed():
    import subprocess

    out = subprocess.run([sys.executable, "-c", KILL_SIBLING, "parent", KILL_SIBLING], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"sleeper {-signal.SIGKILL} killer 0", out.stdout + out.stderr


def test_hang_timeout_zero_or_one_rank_starts_nothing(store):
    assert heartbeat.start(store, 0, 4, 0, announce=False, timeout_s=0,
                           init_timeout_s=300) is None
    assert heartbeat.start(store, 0, 1, 0, announce=False, timeout_s=5,
                           init_timeout_s=300) is None


def test_negative_hang_timeout_is_refused_naming_the_key():
    from zoo.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="DDP_CONFIG.HANG_TIMEOUT"):
        load_config(None, ["DDP_CONFIG.HANG_TIMEOUT", "-1"])


# ------------------------------------------------------------------- real jobs (slow tier)
# A toy model whose forward sleeps: every step is longer than the beat interval, and with
# FIRST_SLEEP each rank's first step is longer than HANG_TIMEOUT (like a torch.compile warm-up).
SLEEPY_MODEL = TOY_MODEL + '''

import os
import time


class _Sleepy(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = toy_conv3d(num_classes)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.training:  # validation runs at full speed
            first = float(os.environ.get("FIRST_SLEEP", "0"))
            every = float(os.environ.get("SLEEP", "0.25"))
            time.sleep(first if self.calls == 1 and first else every)
        return self.net(x)


@MODEL_REGISTRY.register()
def toy_sleepy(num_classes=10, **kwargs):
    return _Sleepy(num_classes)
'''


def _job_args(tmp_path, synth_root, hang_timeout, epochs, port):
    from helpers import toy_args

    return toy_args(tmp_path, synth_root, model="toy_sleepy", model_src=SLEEPY_MODEL,
                     epochs=epochs, procs=2) + [
        "DDP_CONFIG.HANG_TIMEOUT", str(hang_timeout), "DDP_CONFIG.INIT_TIMEOUT", "60",
        "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}"]


def _worker_with_log(log_name):
    """The pid of the process that holds ``log_name`` (a rank's log file) open, from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") == log_name for fd in fds):
                return int(entry)
        except OSError:
            continue
    return None


def _stop_rank_in_training(procs, log, rank_log):
    """Wait until ``log`` shows a step, SIGSTOP the process writing ``rank_log``; its pid."""
    from helpers import finish_processes

    deadline = time.monotonic() + 150
    while not (log.exists() and "epoch 2 iter 1/" in log.read_text()):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            "training did not start:\n" + "\n".join(out for _, out in finish_processes(procs, 5))
        time.sleep(0.2)
    pid = _worker_with_log(str(rank_log))
    assert pid is not None
    # A few beats (every 0.6 s) carry a finished step: wait until the rank itself has logged
    # 8 more steps (each sleeps >= 0.25 s in its forward), whatever the machine's load.
    steps = len(re.findall(r"epoch \d+ iter \d+/", rank_log.read_text()))
    deadline = time.monotonic() + 150
    while len(re.findall(r"epoch \d+ iter \d+/", rank_log.read_text())) < steps + 8:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            "training stopped:\n" + "\n".join(out for _, out in finish_processes(procs, 5))
        time.sleep(0.2)
    os.kill(pid, signal.SIGSTOP)
    return pid


def _assert_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    os.kill(pid, signal.SIGKILL)  # leave nothing behind, then fail
    pytest.fail(f"the stopped worker {pid} outlived the job")


@pytest.mark.slow
def test_a_slow_healthy_job_under_torchrun_is_not_ended(tmp_path, synth_root):
    """Steps longer than the beat interval, and a first step longer than HANG_TIMEOUT itself: the
    heartbeat thread keeps beating, so the job trains to the end. Under torchrun, whose store
    (env://) the heartbeat finds by itself."""
    from helpers import finish_processes, start_process

    hang_s = 3  # beats every 0.5 s; every step sleeps 1 s, the first one 5 s
    torchrun = shutil.which("torchrun")
    launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    args = _job_args(tmp_path, synth_root, hang_s, epochs=1, port=0)[:-2]  # no DIST_URL
    cmd = [*launcher, "--standalone", "--nproc_per_node", "2",
           os.path.join(ROOT, "tools", "train_ddp.py"), *args]
    [(rc, out)] = finish_processes([start_process(cmd, env={"SLEEP": "1.0", "FIRST_SLEEP": "5"})],
                                   timeout=240)
    assert rc == 0, out
    assert "sent no heartbeat" not in out
    assert f"a rank silent for {hang_s} s ends the job" in out  # it was on (rank 0's console)
    run = tmp_path / "runs" / "job"
    for rank in (0, 1):
        assert "training finished" in (run / f"log_rank{rank}.txt").read_text()


@pytest.mark.slow
@pytest.mark.multinode
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the worker in /proc")
def test_a_sigstopped_worker_ends_the_whole_job_naming_its_rank(tmp_path, synth_root):
    """Must-show 3. Two launchers on this host: node 0 runs ranks 0 and 1, node 1 runs rank 2.
    Rank 1 is SIGSTOPped mid-epoch: rank 0 reports it, node 0's launcher kills it and prints the
    report, node 1 stops on it too; all within HANG_TIMEOUT + 10 s, nothing left running."""
    from helpers import error_line, finish_processes, free_port, toy_args, two_nodes_here

    hang_s = 6
    args = toy_args(tmp_path, synth_root, model="toy_sleepy", model_src=SLEEPY_MODEL,
                     epochs=50) + ["DDP_CONFIG.HANG_TIMEOUT", str(hang_s),
                                   "DDP_CONFIG.INIT_TIMEOUT", "60"]
    procs = two_nodes_here(args, free_port(), node_args=(("DDP_CONFIG.NUM_CPU_PROCS", "2"), ()))
    run = tmp_path / "runs" / "job"
    pid = _stop_rank_in_training(procs, run / "log_rank2.txt", run / "log_rank1.txt")
    stopped_at = time.monotonic()
    try:
        (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=hang_s + 60)
        took = time.monotonic() - stopped_at
    finally:
        _assert_gone(pid)
    assert rc0 != 0 and rc1 != 0
    # The report names a step rank 1 logged (its log is the independent record), at most a beat
    # interval (0.6 s: steps take >= 0.25 s) before the last one it logged.
    logged = [tuple(map(int, m)) for m in
              re.findall(r"epoch (\d+) iter (\d+)/", (run / "log_rank1.txt").read_text())]
    named = f"rank 1 (node 0, {socket.gethostname()}) sent no heartbeat for {hang_s} s; "
    for out in (out0, out1):
        line = error_line(out)
        assert named in line, f"{line!r} does not contain {named!r}"
        step = re.search(r"the last step it reported was epoch (\d+) iter (\d+) ", line)
        assert step and tuple(map(int, step.groups())) in logged[-3:], (line, logged[-3:])
    print(f"the job ended {took:.1f}s after the SIGSTOP (HANG_TIMEOUT {hang_s} s)")
    assert took < hang_s + 10, f"took {took:.1f}s:\nnode 0:\n{out0}\nnode 1:\n{out1}"


@pytest.mark.slow
@pytest.mark.multinode
def test_a_node_cut_off_from_node_0_stops_too_naming_the_silent_rendezvous(
        two_netns, tmp_path, synth_root):
    """The link of node 1's namespace goes down mid-epoch. Node 0 reports node 1's rank silent
    (the heartbeat); node 1, which can reach nothing, stops its worker (stuck in requests to node
    0's store that never get an answer) and ends with one line naming node 0's rendezvous and
    HANG_TIMEOUT. Both within HANG_TIMEOUT + 15 s, nothing left running."""
    import subprocess

    from helpers import error_line, finish_processes, start_process, tool_command

    (ns0, ip0), (ns1, ip1) = two_netns
    hang_s = 8
    args = _sleepy_job(tmp_path, synth_root) + [
        "DDP_CONFIG.HANG_TIMEOUT", str(hang_s), "DDP_CONFIG.INIT_TIMEOUT", "60",
        "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", repr([ip0, ip1]),
        "DDP_CONFIG.DIST_URL", f"tcp://{ip0}:29500", "DDP_CONFIG.AUTO_RANK_MATCH", "True"]
    procs = [start_process(tool_command("train_ddp.py", args, netns=ns)) for ns in (ns0, ns1)]
    run = tmp_path / "runs" / "job"
    deadline = time.monotonic() + 150
    while not ((run / "log_rank1.txt").exists()
               and "epoch 3 iter 1/" in (run / "log_rank1.txt").read_text()):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            "training did not start:\n" + "\n".join(out for _, out in finish_processes(procs, 5))
        time.sleep(0.2)
    [veth] = [line.split(":")[1].strip().split("@")[0] for line in subprocess.run(
        ["ip", "-n", ns1, "-o", "link", "show"], capture_output=True, text=True,
        check=True).stdout.splitlines() if ": lo:" not in line]
    subprocess.run(["ip", "-n", ns1, "link", "set", veth, "down"], check=True)
    cut_at = time.monotonic()
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=hang_s + 90)
    took = time.monotonic() - cut_at
    assert rc0 != 0 and rc1 != 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    assert "rank 1 (node 1," in error_line(out0) and "sent no heartbeat" in error_line(out0)
    line = error_line(out1)
    assert (f"node 1: node 0's rendezvous at {ip0}:29500 has not answered for " in line
            and f"(DDP_CONFIG.HANG_TIMEOUT = {hang_s}): this node lost its network to node 0"
            in line and line.endswith("; stopped this node's workers")), line
    print(f"both nodes ended {took:.1f}s after the cut (HANG_TIMEOUT {hang_s} s)")
    assert took < hang_s + 15, f"took {took:.1f}s:\nnode 0:\n{out0}\nnode 1:\n{out1}"
    assert _worker_with_log(str(run / "log_rank1.txt")) is None, "node 1's worker outlived it"


def _sleepy_job(tmp_path, synth_root):
    """A long job of the sleepy toy model, one process per node."""
    from helpers import toy_args

    return toy_args(tmp_path, synth_root, model="toy_sleepy", model_src=SLEEPY_MODEL, epochs=300)
