"""Multi-node launching end to end: real processes, real sockets, failures that must end quickly.

Two "nodes" are either two network namespaces with their own addresses (10.77.0.1 / 10.77.0.2 on a
veth pair, no default route; needs root, skipped where namespaces are refused) or two launchers on
this host told their node rank with ``ZOO_NODE_RANK`` / ``DDP_CONFIG.WORLD_RANK``.
"""

import json
import os
import shutil
import signal
import socket
import sys
import threading
import time

import pytest
from helpers import (
    ROOT,
    TINY_DATA,
    TOY_MODEL,
    error_line,
    finish_processes,
    free_port,
    start_process,
    tool_command,
    toy_args,
    two_nodes_here,
)

# Several processes per test, network namespaces: deselect with -m "not multinode".
pytestmark = [pytest.mark.multinode, pytest.mark.slow]


QUICKSTART = os.path.join(ROOT, "configs", "quickstart", "slowfast_tiny_motion.yaml")
FAILURE_BUDGET_S = 30  # every failure below must end within this, with a one-line reason

# A toy model whose forward sleeps, so an epoch lasts long enough to kill a worker in the middle.
SLOW_MODEL = TOY_MODEL + '''

import time


class _Slow(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = toy_conv3d(num_classes)

    def forward(self, x):
        time.sleep(0.25)
        return self.net(x)


@MODEL_REGISTRY.register()
def toy_slow(num_classes=10, **kwargs):
    return _Slow(num_classes)
'''


# ------------------------------------------------------------------------- jobs that must work
def test_two_namespaces_auto_rank_match_train_one_4_rank_job(two_netns, tmp_path, synth_root):
    """Must-show 1: the quick start config on two 'hosts' found by their own addresses."""
    (ns0, ip0), (ns1, ip1) = two_netns
    out = tmp_path / "runs"
    args = ["--config-file", QUICKSTART,
            "DDP_CONFIG.WORLD_SIZE", "2",
            "DDP_CONFIG.WORLD_URLS", repr([ip0, ip1]),
            "DDP_CONFIG.DIST_URL", f"tcp://{ip0}:29500",
            "DDP_CONFIG.AUTO_RANK_MATCH", "True",
            "DDP_CONFIG.NUM_CPU_PROCS", "2",
            "DDP_CONFIG.INIT_TIMEOUT", "60",
            *TINY_DATA,
            "DATA.SYNTHETIC.ROOT", synth_root, "TRAIN.EPOCH_NUM", "1",
            "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "netns"]
    procs = [start_process(tool_command("train_ddp.py", args, netns=ns)) for ns in (ns1, ns0)]
    (rc1, out1), (rc0, out0) = finish_processes(procs)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    assert f"AUTO_RANK_MATCH: this host is WORLD_URLS[0] = {ip0}" in out0
    assert f"AUTO_RANK_MATCH: this host is WORLD_URLS[1] = {ip1}" in out1
    assert "global ranks 0..1 of 4" in out0 and "global ranks 2..3 of 4" in out1
    run = out / "netns"
    for rank in range(4):
        log = (run / f"log_rank{rank}.txt").read_text()
        assert f"rank {rank}/4" in log and "training finished" in log
    assert not (run / "log_rank4.txt").exists()
    assert "GPU_WORLD_SIZE: 4" in (run / "config.yaml").read_text()


def test_doctor_in_two_namespaces_by_hostname(two_netns):
    """WORLD_URLS by hostname; tools/doctor.py joins both 'hosts' and runs one all-reduce."""
    (ns0, ip0), (ns1, ip1) = two_netns
    args = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['node-a', 'node-b']",
            "DDP_CONFIG.DIST_URL", "tcp://node-a:29500", "DDP_CONFIG.DIST_BACKEND", "gloo",
            "DDP_CONFIG.NUM_CPU_PROCS", "1", "DDP_CONFIG.INIT_TIMEOUT", "30"]
    procs = [start_process(tool_command("doctor.py", args, netns=ns)) for ns in (ns0, ns1)]
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=120)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    assert "this host is WORLD_URLS[0] = node-a" in out0
    assert "this host is WORLD_URLS[1] = node-b" in out1
    assert f"addresses {ip1}" in out1  # found on its interface, with no default route
    assert "all_reduce over 2 ranks gave 2" in out1


def test_the_doctor_fails_at_once_where_node_0_is_out_of_reach(two_netns):
    """Node 1 with no route to node 0's address: one FAIL line and a non-zero exit within the
    failure budget, not "does not answer yet; fine if node 0 is not started yet"."""
    (_, _), (ns1, ip1) = two_netns
    args = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", f"['10.99.0.1', '{ip1}']",
            "DDP_CONFIG.DIST_URL", "tcp://10.99.0.1:29500", "DDP_CONFIG.DIST_BACKEND", "gloo",
            "DDP_CONFIG.NUM_CPU_PROCS", "1", "DDP_CONFIG.INIT_TIMEOUT", "60"]
    start = time.monotonic()
    [(rc, out)] = finish_processes([start_process(tool_command("doctor.py", args, netns=ns1))],
                                   timeout=120)
    assert rc != 0 and time.monotonic() - start < FAILURE_BUDGET_S, out
    assert "FAIL  rendezvous   10.99.0.1:29500 cannot be reached from this host" in out, out
    assert "fine if node 0 is not started yet" not in out and "None" not in out, out


def test_torchrun_runs_one_2_rank_job_without_spawning_again(tmp_path, synth_root):
    """Must-show 2: under torchrun the tool is one rank; NUM_CPU_PROCS 2 is not spawned again."""
    torchrun = shutil.which("torchrun")
    launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    out = tmp_path / "runs"
    cmd = [*launcher, "--standalone", "--nproc_per_node", "2",
           os.path.join(ROOT, "tools", "train_ddp.py"), "--config-file", QUICKSTART, *TINY_DATA,
           "DATA.SYNTHETIC.ROOT", synth_root, "TRAIN.EPOCH_NUM", "1",
           "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "torchrun"]
    [(rc, text)] = finish_processes([start_process(cmd)])
    assert rc == 0, text
    # Only rank 0 talks on the console; each process being one rank shows in the rank logs below.
    assert text.count("torchrun started this process as rank") == 1
    assert "process(es), global ranks" not in text  # the launcher's spawn path never ran
    run = out / "torchrun"
    assert sorted(p.name for p in run.glob("log_rank*.txt")) == ["log_rank0.txt", "log_rank1.txt"]
    assert "rank 1/2" in (run / "log_rank1.txt").read_text()
    assert "GPU_WORLD_SIZE: 2" in (run / "config.yaml").read_text()


def test_file_store_rendezvous_across_two_nodes_and_a_reused_file(tmp_path, synth_root):
    """file:// (shared file system, seed 000): two nodes meet in a file; a second run reuses it."""
    rdzv = tmp_path / "shared" / "rdzv"
    args = toy_args(tmp_path, synth_root) + [
        "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.AUTO_RANK_MATCH", "False",
        "DDP_CONFIG.DIST_URL", f"file://{rdzv}"]
    for attempt in range(2):
        # The second time node 1 starts well before node 0 and finds the first run's file: it must
        # wait for node 0's new session instead of acting on the old one.
        before = _file_state(rdzv)
        node1 = start_process(tool_command("train_ddp.py", args), env={"ZOO_NODE_RANK": "1"})
        if attempt:  # node 1 has written to the old file before node 0 starts
            _wait_for_change(rdzv, before, node1)
        node0 = start_process(tool_command("train_ddp.py", args), env={"ZOO_NODE_RANK": "0"})
        (rc1, out1), (rc0, out0) = finish_processes([node1, node0], timeout=120)
        assert rc0 == 0 and rc1 == 0, f"run {attempt}\nnode 0:\n{out0}\nnode 1:\n{out1}"
        assert "global ranks 1..1 of 2" in out1
    assert rdzv.exists()


def _file_state(path):
    try:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    except FileNotFoundError:
        return None


def _wait_for_change(path, before, proc, timeout=60):
    """Block until ``path`` differs from ``before`` (a store write), failing if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while _file_state(path) == before:
        assert proc.poll() is None, finish_processes([proc])[0][1]
        assert time.monotonic() < deadline, f"nothing was written to {path} in {timeout}s"
        time.sleep(0.05)


def _world_and_rank(cfg, box):
    import torch.distributed as dist

    from zoo.utils import comm

    box.append((dist.get_world_size(), comm.get_rank()))


def test_file_init_on_one_node_runs_twice_and_cleans_up(tmp_path):
    from zoo.config import load_config
    from zoo.launch.job import resolve_job
    from zoo.launch.launch import launch

    rdzv = tmp_path / "pg"
    cfg = load_config(None, ["DDP_CONFIG.DIST_URL", f"file://{rdzv}"])
    box = []
    launch(_world_and_rank, resolve_job(cfg), cfg, box)
    launch(_world_and_rank, resolve_job(cfg), cfg, box)
    assert box == [(1, 0), (1, 0)]
    assert not rdzv.exists()


def test_doctor_checks_two_nodes_with_different_process_counts(tmp_path):
    port = free_port()
    args = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
            "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}", "DDP_CONFIG.DIST_BACKEND", "gloo",
            "DDP_CONFIG.INIT_TIMEOUT", "20"]
    procs = [start_process(
        tool_command("doctor.py", [*args, "DDP_CONFIG.NUM_CPU_PROCS", str(2 - k)]),
        env={"ZOO_NODE_RANK": str(k)}) for k in (0, 1)]
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=120)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    assert "node 0 of 2 (ZOO_NODE_RANK=0), 2 CPU process(es)" in out0
    assert "node 1 of 2 (ZOO_NODE_RANK=1), 1 CPU process(es)" in out1
    assert "all_reduce over 3 ranks gave 3" in out0 and "all_reduce over 3 ranks gave 3" in out1


def test_slurm_tasks_as_ranks_join_one_job():
    """Slurm variables set by hand, one task per rank: each process is a rank, nothing spawned."""
    env = {"SLURM_NTASKS": "2", "SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_STEP_ID": "0",
           "SLURM_JOB_NODELIST": "localhost", "MASTER_PORT": str(free_port())}
    args = ["DDP_CONFIG.DIST_BACKEND", "gloo", "DDP_CONFIG.INIT_TIMEOUT", "20"]
    procs = [start_process(tool_command("doctor.py", args), env=dict(env, SLURM_PROCID=str(k),
                                                       SLURM_LOCALID=str(k))) for k in (0, 1)]
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=120)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    assert "Slurm: rank 1 of 2 (SLURM_PROCID=1 of SLURM_NTASKS=2); nothing is spawned" in out1
    assert "all_reduce over 2 ranks gave 2" in out0


# ------------------------------------------------------------- failures: fast, one line, non-zero
def test_ranks_from_the_environment_with_different_configs_stop(tmp_path, synth_root):
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    # Valid data, so that the data checks made before the group forms pass on both ranks.
    data = ["DATA.SYNTHETIC.ROOT", synth_root, "LOG.BASE_PATH", str(tmp_path), *TINY_DATA]
    start = time.monotonic()
    procs = [start_process(tool_command("train_ddp.py", ["DDP_CONFIG.DIST_BACKEND", "gloo", *data,
                                           "TRAIN.LR", str(0.1 * (k + 1))]),
                    env=dict(env, RANK=str(k), LOCAL_RANK=str(k))) for k in (0, 1)]
    results = finish_processes(procs, timeout=FAILURE_BUDGET_S + 30)
    assert time.monotonic() - start < FAILURE_BUDGET_S
    assert all(rc != 0 for rc, _ in results)
    # One console line per node: local rank 1 would repeat it (its log file has it).
    (_, out0), (_, out1) = results
    assert "the config on rank 1 (" in error_line(out0) and "CONFIG.TRAIN.LR = 0.2" in out0
    assert "error:" not in out1, out1
def _fails_fast(cmd, env=None, expect=()):
    start = time.monotonic()
    [(rc, out)] = finish_processes([start_process(cmd, env)], timeout=FAILURE_BUDGET_S + 30)
    elapsed = time.monotonic() - start
    assert rc != 0, out
    assert elapsed < FAILURE_BUDGET_S, f"took {elapsed:.1f}s\n{out}"
    line = error_line(out)
    for text in expect:
        assert text in line, line
    return line, elapsed, out


def test_this_host_not_in_world_urls():
    _fails_fast(tool_command("train_ddp.py", [
        "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['203.0.113.10', '203.0.113.11']",
        "DDP_CONFIG.DIST_URL", "tcp://203.0.113.10:29500"]),
        expect=["matches none of ['203.0.113.10', '203.0.113.11']", "127.0.0.1", "WORLD_RANK"])


def test_world_urls_and_world_size_disagree():
    _fails_fast(tool_command("train_ddp.py", [
        "DDP_CONFIG.WORLD_SIZE", "3", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '203.0.113.11']"]),
        expect=["WORLD_URLS has 2 entries", "WORLD_SIZE is 3"])


def test_dist_url_host_is_not_node_0():
    _fails_fast(tool_command("train_ddp.py", [
        "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '203.0.113.11']",
        "DDP_CONFIG.DIST_URL", "tcp://203.0.113.11:29500"]),
        expect=["its host is not node 0", "tcp://127.0.0.1:29500"])


def _listed_files(tmp_path):
    """A list of 8 placeholder files: enough for the data checks made before launching (they
    read the list, not the videos), for failures that happen while the job forms."""
    (tmp_path / "videos").mkdir()
    for i in range(8):
        (tmp_path / "videos" / f"v{i}.mp4").write_bytes(b"")
    (tmp_path / "train.txt").write_text("".join(f"v{i}.mp4 8 {i % 2}\n" for i in range(8)))
    return ["DATA.TRAIN_ANNO_PATH", str(tmp_path / "train.txt"),
            "DATA.TRAIN_DATA_PATH", str(tmp_path / "videos"), "DATA.NUM_CLASSES", "2",
            "TRAIN.BATCH_SIZE", "1", "LOG.BASE_PATH", str(tmp_path / "runs")]


def test_node_0_never_comes_up(tmp_path):
    port = free_port()
    _, elapsed, _ = _fails_fast(tool_command("train_ddp.py", [
        *_listed_files(tmp_path),
        "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
        "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}", "DDP_CONFIG.INIT_TIMEOUT", "5"]),
        env={"ZOO_NODE_RANK": "1"}, expect=[f"127.0.0.1:{port}", "within 5s"])
    assert elapsed >= 5


def test_node_1_started_before_node_0_says_it_waits_and_labels_its_lines(tmp_path):
    """A node started first prints, once, that it waits for node 0 (where, why, how much longer),
    and its launcher's lines, the generated-data one included, say node1, not rank0."""
    port = free_port()
    _, _, out = _fails_fast(tool_command("train_ddp.py", [
        "--config-file", QUICKSTART, "DATA.SYNTHETIC.ROOT", str(tmp_path / "synth"),
        "DATA.SYNTHETIC.TRAIN_PER_CLASS", "2", "DATA.SYNTHETIC.VAL_PER_CLASS", "1",
        "DATA.SYNTHETIC.NUM_FRAMES", "8", "TRAIN.BATCH_SIZE", "1",
        "LOG.BASE_PATH", str(tmp_path / "runs"),
        "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
        "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}", "DDP_CONFIG.INIT_TIMEOUT", "8"]),
        env={"ZOO_NODE_RANK": "1"}, expect=[f"127.0.0.1:{port}", "within 8s"])
    info = [ln for ln in out.splitlines() if ln.startswith("[")]
    generated = [ln for ln in info if "generated the motion dataset" in ln]
    waiting = [ln for ln in info if "waiting for node 0's rendezvous" in ln]
    assert len(generated) == 1 and " node1] " in generated[0], out
    assert len(waiting) == 1 and " node1] " in waiting[0], out
    assert f"127.0.0.1:{port} (connection refused)" in waiting[0], waiting
    assert "start the same command on node 0" in waiting[0], waiting
    assert "more (DDP_CONFIG.INIT_TIMEOUT)" in waiting[0], waiting
    assert not any(" rank0] " in ln for ln in info), out


def test_busy_port_on_node_0(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        _fails_fast(tool_command("train_ddp.py", [
            *_listed_files(tmp_path),
        "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
            "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}"]),
            env={"ZOO_NODE_RANK": "0"}, expect=[f"port {port} on node 0 is already in use"])


def _silent_listener():
    """A plain TCP listener on 127.0.0.1 that accepts connections (the kernel's backlog does)
    and never answers: another program on DIST_URL's port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def test_a_port_that_accepts_but_never_answers_ends_the_store_wait_with_one_line():
    """The store's handshake with a program that never answers ends within INIT_TIMEOUT (the
    call runs in a child process, so that a wait without end fails the test at its limit)."""
    with _silent_listener() as silent:
        port = silent.getsockname()[1]
        code = ("from zoo.launch.store import open_store\n"
                "from zoo.launch.topology import LaunchError\n"
                "try:\n"
                f"    open_store('tcp://127.0.0.1:{port}', host_it=False, timeout_s=3)\n"
                "except LaunchError as e:\n"
                "    print('LaunchError:', e, flush=True)\n")
        proc = start_process([sys.executable, "-c", code])
        [(rc, out)] = finish_processes([proc], timeout=FAILURE_BUDGET_S + 30)
    [line] = [ln for ln in out.splitlines() if ln.startswith("LaunchError:")] or [out]
    assert f"127.0.0.1:{port} accepts connections but did not answer" in line, out
    assert "within 3s (DDP_CONFIG.INIT_TIMEOUT)" in line and "another program" in line, line
    assert "DDP_CONFIG.DIST_URL" in line, line


def test_node_1_at_a_port_that_never_answers_stops_with_one_line_and_hears_sigterm(tmp_path):
    """Node 1's launcher waiting on a program that accepts and never answers: one error line
    within INIT_TIMEOUT, and SIGTERM stops it at once during a long wait."""
    with _silent_listener() as silent:
        port = silent.getsockname()[1]
        args = [*_listed_files(tmp_path), "DDP_CONFIG.WORLD_SIZE", "2",
                "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
                "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}"]
        _fails_fast(tool_command("train_ddp.py", [*args, "DDP_CONFIG.INIT_TIMEOUT", "4"]),
                    env={"ZOO_NODE_RANK": "1"},
                    expect=[f"127.0.0.1:{port} accepts connections but did not answer",
                            "within 4s", "another program holds that port on node 0"])
        proc = start_process(tool_command("train_ddp.py", [*args, "DDP_CONFIG.INIT_TIMEOUT",
                                                           "600"]), env={"ZOO_NODE_RANK": "1"})
        lines, waiting = [], threading.Event()

        def read():
            for line in proc.stdout:
                lines.append(line)
                if "has not answered as a rendezvous" in line:
                    waiting.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert waiting.wait(120), "".join(lines)  # the launcher waits on the silent port
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            rc = proc.wait(timeout=FAILURE_BUDGET_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(10)
    assert time.monotonic() - signalled < FAILURE_BUDGET_S, "".join(lines)
    assert rc != 0, "".join(lines)


def test_a_one_node_store_takes_a_free_port_when_its_port_was_taken_meanwhile():
    """Two one-node jobs started at the same moment both find the default port free; the one
    that binds second listens elsewhere (nothing outside the node has to find it), while a
    multi-node job's node 0 stops naming the port."""
    from zoo.launch.store import open_store
    from zoo.launch.topology import LaunchError

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        store, url = open_store(f"tcp://127.0.0.1:{port}", True, 5, any_port=True)
        assert url != f"tcp://127.0.0.1:{port}" and url == f"tcp://127.0.0.1:{store.port}"
        store.set("k", "v")
        assert store.get("k") == b"v"
        del store
        with pytest.raises(LaunchError, match=f"port {port} on node 0 is already in use"):
            open_store(f"tcp://127.0.0.1:{port}", True, 5)


def test_nodes_with_different_configs_stop_naming_the_keys(tmp_path, synth_root):
    start = time.monotonic()
    procs = two_nodes_here(toy_args(tmp_path, synth_root), free_port(),
                            node_args=((), ("TRAIN.LR", "0.2")))
    results = finish_processes(procs, timeout=FAILURE_BUDGET_S + 30)
    assert time.monotonic() - start < FAILURE_BUDGET_S
    for rc, out in results:
        assert rc != 0
        line = error_line(out)
        assert "config on node 1" in line and "CONFIG.TRAIN.LR = 0.2 (on node 0" in line, line


def _workers_of(pid):
    """Spawned worker processes whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(entry))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds worker processes in /proc")
def test_worker_killed_mid_epoch_stops_every_node_naming_the_rank(tmp_path, synth_root):
    args = toy_args(tmp_path, synth_root, model="toy_slow", model_src=SLOW_MODEL, epochs=50)
    procs = two_nodes_here(args + ["DDP_CONFIG.INIT_TIMEOUT", "15"], free_port())
    log = tmp_path / "runs" / "job" / "log_rank1.txt"
    deadline = time.monotonic() + 120
    while not (log.exists() and "epoch 1 iter 1/" in log.read_text()):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            "training did not start:\n" + "\n".join(out for _, out in finish_processes(procs, 5))
        time.sleep(0.2)
    [victim] = _workers_of(procs[1].pid)  # node 1's only worker: global rank 1
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=FAILURE_BUDGET_S + 30)
    assert time.monotonic() - killed_at < FAILURE_BUDGET_S
    assert rc0 != 0 and rc1 != 0
    assert "global rank 1 (node 1, local process 0) died with signal SIGKILL" in error_line(out1)
    line0 = error_line(out0)
    assert "global rank 1 (node 1" in line0 and "SIGKILL" in line0, line0


# ------------------------------------------------------ node-local keys and job isolation (#14)
def test_nodes_differing_only_in_base_path_train_together_with_one_warning(tmp_path, synth_root):
    """Each node writes under its own BASE_PATH; node 0 names the key and both values once."""
    base = [tmp_path / "out0", tmp_path / "out1"]
    procs = two_nodes_here(toy_args(tmp_path, synth_root), free_port(),
                            node_args=tuple(("LOG.BASE_PATH", str(b)) for b in base))
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=120)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    [line] = [ln for ln in out0.splitlines() if "node-local key(s) differ" in ln]
    assert "CONFIG.LOG.BASE_PATH" in line and repr(str(base[0])) in line
    assert repr(str(base[1])) in line and "CONFIG.TRAIN" not in line
    assert "node-local" not in out1
    for rank, b in enumerate(base):
        log = (b / "job" / f"log_rank{rank}.txt").read_text()
        assert f"rank {rank}/2" in log and "training finished" in log
        assert not (b / "job" / f"log_rank{1 - rank}.txt").exists()
    assert (base[0] / "job" / "config.yaml").exists()


def _wait_for_training(procs, log, timeout=120):
    deadline = time.monotonic() + timeout
    while not (log.exists() and "epoch 1 iter 1/" in log.read_text()):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            "training did not start:\n" + "\n".join(out for _, out in finish_processes(procs, 5))
        time.sleep(0.2)


# A toy model that, after its first forward, waits for a gate file (at most 240 s): the job stays
# mid-training, however slowly the machine starts the stranger, until the test opens the gate.
GATED_MODEL = TOY_MODEL + '''

import os
import time


class _Gated(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = toy_conv3d(num_classes)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        deadline = time.monotonic() + 240
        while self.calls > 1 and not os.path.exists(GATE) and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.net(x)


@MODEL_REGISTRY.register()
def toy_gated(num_classes=10, **kwargs):
    return _Gated(num_classes)
'''


@pytest.mark.parametrize("job_token,stranger_token", [("alpha-1", "beta-2"), ("alpha-1", "")])
def test_a_stranger_on_the_port_is_refused_and_the_job_finishes(tmp_path, synth_root, job_token,
                                                                stranger_token):
    """Another job's node 1 (another token, or the same config with no token) started on a running
    job's port: one error line for it, one warning on node 0, and the job finishes unharmed."""
    port = free_port()
    gate = tmp_path / "gate"
    args = toy_args(tmp_path, synth_root, model="toy_gated",
                     model_src=GATED_MODEL + f"\nGATE = {str(gate)!r}\n", epochs=2)
    procs = two_nodes_here([*args, "DDP_CONFIG.JOB_TOKEN", job_token], port)
    _wait_for_training(procs, tmp_path / "runs" / "job" / "log_rank1.txt")
    stranger_env = {"ZOO_NODE_RANK": "1", "ZOO_JOB_TOKEN": stranger_token}
    common = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
              "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}", *args,
              "LOG.BASE_PATH", str(tmp_path / "stranger")]
    line, _, _ = _fails_fast(tool_command("train_ddp.py", common), env=stranger_env,
                          expect=["is held by another job", f"127.0.0.1:{port}", "JOB_TOKEN"])
    assert all(p.poll() is None for p in procs), "the running job stopped"
    gate.touch()
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=120)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    warned = [ln for ln in out0.splitlines() if "another job identity" in ln]
    assert len(warned) == 1 and "was refused" in warned[0] and "node 1" in warned[0], out0
    run = tmp_path / "runs" / "job"
    epochs = [json.loads(ln)["epoch"] for ln in (run / "metrics.jsonl").read_text().splitlines()
              if '"epoch"' in ln]
    assert max(epochs) == 2, epochs
    for rank in (0, 1):
        assert "training finished" in (run / f"log_rank{rank}.txt").read_text()
    assert not (tmp_path / "stranger" / "job").exists()
    # The secret is in no file the job wrote, nor on any console.
    for path in run.rglob("*"):
        if path.is_file():
            assert job_token.encode() not in path.read_bytes(), path
    assert job_token not in out0 + out1 + line


def test_a_stranger_while_node_0_waits_for_nodes_is_refused_and_the_job_still_forms(
        tmp_path, synth_root):
    """The stranger arrives while node 0 is still waiting for node 1: it is refused and writes
    nothing node 0 waits on; the real node 1 then joins and the job trains."""
    port = free_port()
    common = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
              "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}", *toy_args(tmp_path, synth_root)]
    node0 = start_process(tool_command("train_ddp.py", common), env={"ZOO_NODE_RANK": "0"})
    _fails_fast(tool_command("train_ddp.py", [*common, "DDP_CONFIG.JOB_TOKEN", "other-job"]),
                env={"ZOO_NODE_RANK": "1"}, expect=["is held by another job", "JOB_TOKEN"])
    assert node0.poll() is None, finish_processes([node0])[0][1]
    node1 = start_process(tool_command("train_ddp.py", common), env={"ZOO_NODE_RANK": "1"})
    (rc0, out0), (rc1, out1) = finish_processes([node0, node1], timeout=120)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    assert sum("another job identity" in ln for ln in out0.splitlines()) == 1, out0
    assert "other-job" not in out0 + out1


def test_a_second_launcher_of_a_running_node_stops_at_once_and_the_job_finishes(
        tmp_path, synth_root):
    """The same command for node 1 run again while the job trains: it stops with one line naming
    the running node 1, node 0 logs one warning, and the job finishes unharmed."""
    port = free_port()
    gate = tmp_path / "gate"
    args = toy_args(tmp_path, synth_root, model="toy_gated",
                    model_src=GATED_MODEL + f"\nGATE = {str(gate)!r}\n", epochs=2)
    procs = two_nodes_here(args, port)
    _wait_for_training(procs, tmp_path / "runs" / "job" / "log_rank1.txt")
    common = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
              "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}", *args]
    _fails_fast(tool_command("train_ddp.py", common), env={"ZOO_NODE_RANK": "1"},
                expect=["node 1: node 0 is already running this job", f"127.0.0.1:{port}",
                        "another launcher of node 1", "ZOO_NODE_RANK"])
    assert all(p.poll() is None for p in procs), "the running job stopped"
    gate.touch()
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=120)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    warned = [ln for ln in out0.splitlines() if "a second launcher of node 1" in ln]
    assert len(warned) == 1 and "told to stop" in warned[0], out0
    run = tmp_path / "runs" / "job"
    epochs = [json.loads(ln)["epoch"] for ln in (run / "metrics.jsonl").read_text().splitlines()
              if '"epoch"' in ln]
    assert max(epochs) == 2, epochs
