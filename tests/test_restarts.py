"""DDP_CONFIG.MAX_RESTARTS: a job on two namespaced nodes survives a killed worker and a killed node
(its launcher re-run by hand), and ends with weights bitwise equal to an uninterrupted run's.

The uninterrupted reference runs once per module (two launchers on this host, the same 2-rank
layout); the interrupted runs use two network namespaces as tests/test_multinode.py does. A
test-only hook (CONFIG.TRAIN.HOOKS) on global rank 1 SIGKILLs its worker, or its node's whole
process group, once: right after the first optimizer step of epoch 2, leaving a marker file so the
restarted worker does not kill again.
"""

import os
import signal
import subprocess
import time

import pytest
import torch
from helpers import ROOT, finish_processes, free_port, start_process, tool_command, toy_args

SLOW = pytest.mark.slow  # each test trains a few epochs in spawned processes
MULTINODE = pytest.mark.multinode  # several processes per test, network namespaces


EPOCHS = 2
STEPS_PER_EPOCH = 2  # TINY_DATA: 8 training clips, 2 ranks x batch 2
KILL_AT = STEPS_PER_EPOCH + 1  # the first optimizer step of epoch 2

KILL_HOOK = """
import os
import signal

from zoo.train.hooks import HookBase
from zoo.utils import comm


class KillOnce(HookBase):
    def after_step(self):
        if self.trainer.iteration != {kill_at} or os.path.exists({marker!r}):
            return
        # Rank 0's checkpoint write of epoch 1 is on disk before the kill, so that every run
        # resumes from it.
        self.trainer.checkpoint_writes.wait()
        comm.synchronize()
        if comm.get_rank() == {victim}:
            open({marker!r}, "w").close()
            if {whole_node}:
                os.killpg(os.getpgrp(), signal.SIGKILL)  # the launcher and its workers
            os.kill(os.getpid(), signal.SIGKILL)
"""


def _job_args(tmp_path, synth_root, exp):
    args = toy_args(tmp_path, synth_root, epochs=EPOCHS)
    # One thread per rank everywhere, so that one node with 2 processes computes as 2 nodes do.
    return [*args, "LOG.EXP_NAME", exp, "DDP_CONFIG.MAX_RESTARTS", "2",
            "DDP_CONFIG.INIT_TIMEOUT", "60", "DDP_CONFIG.THREADS_PER_PROC", "1"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, synth_root):
    """The final checkpoint of the same job run without interruption (two launchers here)."""
    tmp = tmp_path_factory.mktemp("reference")
    port = free_port()
    common = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
              "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}",
              *_job_args(tmp, synth_root, "straight")]
    procs = [start_process(tool_command("train_ddp.py", common), env={"ZOO_NODE_RANK": str(k)})
             for k in (0, 1)]
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=240)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    assert "restart" not in out0 + out1
    return torch.load(tmp / "runs" / "straight" / "checkpoints" / f"epoch_{EPOCHS}.pth",
                      weights_only=True)


def _netns_job(two_netns, tmp_path, synth_root, whole_node, victim=1):
    """Arguments of the interrupted job, with the kill hook for global rank ``victim`` (node
    ``victim``: one process per node); returns (args, marker)."""
    (_, ip0), (_, ip1) = two_netns
    marker = tmp_path / "killed_once"
    hook = tmp_path / "kill_hook.py"
    hook.write_text(KILL_HOOK.format(kill_at=KILL_AT, marker=str(marker), whole_node=whole_node,
                                     victim=victim))
    args = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", repr([ip0, ip1]),
            "DDP_CONFIG.DIST_URL", f"tcp://{ip0}:29500", "DDP_CONFIG.AUTO_RANK_MATCH", "True",
            *_job_args(tmp_path, synth_root, "job"), "TRAIN.HOOKS", repr([f"{hook}:KillOnce"])]
    return args, marker


def _start_node(args, netns):
    """Start one node's launcher in its own session, so that the hook's killpg reaches this
    launcher and its workers only."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "ZOO_NODE_RANK"):
        env.pop(var, None)
    return subprocess.Popen(tool_command("train_ddp.py", args, netns=netns), cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _assert_same_weights(reference, tmp_path):
    final = torch.load(tmp_path / "runs" / "job" / "checkpoints" / f"epoch_{EPOCHS}.pth",
                       weights_only=True)
    assert final["iteration"] == reference["iteration"] == EPOCHS * STEPS_PER_EPOCH
    assert final["model"].keys() == reference["model"].keys()
    for k in reference["model"]:
        assert torch.equal(final["model"][k], reference["model"][k]), k
    log = (tmp_path / "runs" / "job" / "log_rank0.txt").read_text()
    assert "continuing at epoch 2" in log, log[-3000:]


@SLOW
@MULTINODE
def test_a_killed_worker_restarts_the_job_and_it_ends_bitwise_equal(
        two_netns, tmp_path, synth_root, reference):
    (ns0, _), (ns1, _) = two_netns
    args, marker = _netns_job(two_netns, tmp_path, synth_root, whole_node=False)
    procs = [_start_node(args, ns) for ns in (ns0, ns1)]
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=300)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    assert marker.exists(), "the hook never killed the worker"
    [line1] = [ln for ln in out1.splitlines() if "restart 1 of 2" in ln]
    assert "global rank 1 (node 1, local process 0) died with signal SIGKILL" in line1, line1
    [line0] = [ln for ln in out0.splitlines() if "restart 1 of 2" in ln]
    assert "global rank 1 (node 1" in line0 and "SIGKILL" in line0, line0
    assert "restart 2 of 2" not in out0 + out1
    _assert_same_weights(reference, tmp_path)


@SLOW
@MULTINODE
@pytest.mark.parametrize("victim", [1, 0])
def test_a_killed_node_rejoins_when_its_command_is_run_again(
        two_netns, tmp_path, synth_root, reference, victim):
    """Node ``victim``'s launcher and workers are SIGKILLed; the other node waits for it (node 0
    in its next rendezvous round; node 1 reconnecting to node 0's port) until it is re-run."""
    args, marker = _netns_job(two_netns, tmp_path, synth_root, whole_node=True, victim=victim)
    netns = [ns for ns, _ in two_netns]
    nodes = [_start_node(args, ns) for ns in netns]
    deadline = time.monotonic() + 240
    while nodes[victim].poll() is None:
        assert time.monotonic() < deadline and nodes[1 - victim].poll() is None, \
            "\n".join(out for _, out in finish_processes(nodes, 5))
        time.sleep(0.2)
    [(rc, out)] = finish_processes([nodes[victim]])
    assert rc == -signal.SIGKILL and marker.exists(), out
    assert nodes[1 - victim].poll() is None, f"node {1 - victim} gave up instead of waiting"
    nodes[victim] = _start_node(args, netns[victim])  # the same command on the same node
    (rc0, out0), (rc1, out1) = finish_processes(nodes, timeout=300)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    survivor, rerun = (out0, out1) if victim == 1 else (out1, out0)
    [line] = [ln for ln in survivor.splitlines() if "restart 1 of 2" in ln]
    # Its worker lost the connection to the dead node mid-collective; the line names that node.
    assert f"lost its connection to node {victim} ({two_netns[victim][1]})" in line, line
    assert "restart 1 of 2" not in rerun  # the re-run node joins the restarted group
    _assert_same_weights(reference, tmp_path)


# A hook on rank 1 at the first step of epoch 2: the first time a RuntimeError (a failure like any
# other: restarted), the second time a user error (ConfigError, whose message says what to change:
# it would fail the same way again, so it is not restarted).
RAISE_HOOK = """
import os

from zoo.config import ConfigError
from zoo.train.hooks import HookBase
from zoo.utils import comm


class Raise(HookBase):
    def after_step(self):
        if self.trainer.iteration == {kill_at} and comm.get_rank() == 1:
            if not os.path.exists({marker!r}):
                open({marker!r}, "w").close()
                raise RuntimeError("a one-off failure")
            raise ConfigError("CONFIG.TEST_KEY is wrong; set it right")
"""


@SLOW
def test_one_node_restarts_after_an_error_but_not_after_a_user_error(tmp_path, synth_root):
    hook = tmp_path / "raise_hook.py"
    hook.write_text(RAISE_HOOK.format(kill_at=KILL_AT, marker=str(tmp_path / "raised_once")))
    args = [*_job_args(tmp_path, synth_root, "job"), "DDP_CONFIG.NUM_CPU_PROCS", "2",
            "TRAIN.HOOKS", repr([f"{hook}:Raise"])]
    [(rc, out)] = finish_processes([start_process(tool_command("train_ddp.py", args))], timeout=240)
    assert rc != 0, out
    [restart] = [ln for ln in out.splitlines() if "restart 1 of 2" in ln]
    # The hook's error is the user's code (named as such), and it is restarted as any error is.
    assert "global rank 1 (node 0, local process 1) failed: RuntimeError: a one-off failure " \
           f"raised in {hook}:" in restart, restart
    assert "(your code in hook Raise.after_step, not zoo's;" in restart, restart
    assert "restart 2 of 2" not in out
    [line] = [ln for ln in out.splitlines() if "error:" in ln]
    assert "global rank 1" in line and "CONFIG.TEST_KEY is wrong; set it right" in line, line
    assert line.endswith("(not restarted: it would fail the same way again)"), line
    log = (tmp_path / "runs" / "job" / "log_rank0.txt").read_text()
    assert "continuing at epoch 2" in log  # the restart resumed from epoch 1's checkpoint


# ------------------------------------------------------------------------------ fast checks
def test_a_restart_resumes_from_the_newest_checkpoint_whatever_the_config_says():
    from zoo.config import load_config
    from zoo.launch.job import resume_config

    cfg = load_config(None, ["TRAIN.AUTO_RESUME", "False", "TRAIN.RESUME_EPOCH", "3"])
    new = resume_config(cfg)
    assert (new.CONFIG.TRAIN.AUTO_RESUME, new.CONFIG.TRAIN.RESUME_EPOCH) == (True, -1)
    assert (cfg.CONFIG.TRAIN.AUTO_RESUME, cfg.CONFIG.TRAIN.RESUME_EPOCH) == (False, 3)
    assert new.is_frozen() == cfg.is_frozen()


@pytest.mark.parametrize("urls,message,named", [
    (["10.0.0.1", "10.0.0.2"], "RuntimeError: Connection closed by peer [10.0.0.2]:4242",
     "node 1 (10.0.0.2)"),
    (["10.0.0.1", "10.0.0.2"], "RuntimeError: Read error [10.0.0.1]:29337: Connection reset by "
     "peer", "node 0 (10.0.0.1)"),
    # two entries with that address: which node is not known
    (["127.0.0.1", "127.0.0.1"], "Connection closed by peer [127.0.0.1]:9",
     "the process at 127.0.0.1"),
    (["10.0.0.1", "10.0.0.2"], "RuntimeError: CUDA out of memory", ""),
])
def test_a_lost_peer_is_named_by_its_world_urls_entry(urls, message, named):
    from zoo.launch.launch import _lost_peer

    assert _lost_peer(message, urls) == named
