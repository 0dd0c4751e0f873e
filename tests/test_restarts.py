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
import test_multinode
import torch
from helpers import ROOT
from test_multinode import _finish, _free_port, _start, _tool, _toy_args

pytestmark = pytest.mark.slow
MULTINODE = pytest.mark.multinode  # several processes per test, network namespaces

two_netns = test_multinode.two_netns  # the fixture: two network namespaces on a veth pair

EPOCHS = 3
STEPS_PER_EPOCH = 2  # TINY_DATA: 8 training clips, 2 ranks x batch 2
KILL_AT = STEPS_PER_EPOCH + 1  # the first optimizer step of epoch 2

KILL_HOOK = """
import os
import signal

from zoo.engine.hooks import HookBase
from zoo.utils import comm


class KillOnce(HookBase):
    def after_step(self):
        if (self.trainer.iteration == {kill_at} and comm.get_rank() == 1
                and not os.path.exists({marker!r})):
            open({marker!r}, "w").close()
            if {whole_node}:
                os.killpg(os.getpgrp(), signal.SIGKILL)  # the launcher and its workers
            os.kill(os.getpid(), signal.SIGKILL)
"""


def _job_args(tmp_path, synth_root, exp):
    args = _toy_args(tmp_path, synth_root, epochs=EPOCHS)
    # One thread per rank everywhere, so that one node with 2 processes computes as 2 nodes do.
    return [*args, "LOG.EXP_NAME", exp, "DDP_CONFIG.MAX_RESTARTS", "2",
            "DDP_CONFIG.INIT_TIMEOUT", "60", "DDP_CONFIG.THREADS_PER_PROC", "1"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, synth_root):
    """The final checkpoint of the same job run without interruption (two launchers here)."""
    tmp = tmp_path_factory.mktemp("reference")
    port = _free_port()
    common = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
              "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}",
              *_job_args(tmp, synth_root, "straight")]
    procs = [_start(_tool("train_ddp.py", common), env={"ZOO_NODE_RANK": str(k)}) for k in (0, 1)]
    (rc0, out0), (rc1, out1) = _finish(procs, timeout=240)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    assert "restart" not in out0 + out1
    return torch.load(tmp / "runs" / "straight" / "checkpoints" / f"epoch_{EPOCHS}.pth",
                      weights_only=True)


def _netns_job(two_netns, tmp_path, synth_root, whole_node):
    """Arguments of the interrupted job, with the kill hook; returns (args, marker)."""
    (_, ip0), (_, ip1) = two_netns
    marker = tmp_path / "killed_once"
    hook = tmp_path / "kill_hook.py"
    hook.write_text(KILL_HOOK.format(kill_at=KILL_AT, marker=str(marker), whole_node=whole_node))
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
    return subprocess.Popen(_tool("train_ddp.py", args, netns=netns), cwd=ROOT, env=env,
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


@MULTINODE
def test_a_killed_worker_restarts_the_job_and_it_ends_bitwise_equal(
        two_netns, tmp_path, synth_root, reference):
    (ns0, _), (ns1, _) = two_netns
    args, marker = _netns_job(two_netns, tmp_path, synth_root, whole_node=False)
    procs = [_start_node(args, ns) for ns in (ns0, ns1)]
    (rc0, out0), (rc1, out1) = _finish(procs, timeout=300)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1:\n{out1}"
    assert marker.exists(), "the hook never killed the worker"
    [line1] = [ln for ln in out1.splitlines() if "restart 1 of 2" in ln]
    assert "global rank 1 (node 1, local process 0) died with signal SIGKILL" in line1, line1
    [line0] = [ln for ln in out0.splitlines() if "restart 1 of 2" in ln]
    assert "global rank 1 (node 1" in line0 and "SIGKILL" in line0, line0
    assert "restart 2 of 2" not in out0 + out1
    _assert_same_weights(reference, tmp_path)


@MULTINODE
def test_a_killed_node_rejoins_when_its_command_is_run_again(
        two_netns, tmp_path, synth_root, reference):
    (ns0, _), (ns1, _) = two_netns
    args, marker = _netns_job(two_netns, tmp_path, synth_root, whole_node=True)
    node0, node1 = _start_node(args, ns0), _start_node(args, ns1)
    deadline = time.monotonic() + 240
    while node1.poll() is None:
        assert time.monotonic() < deadline and node0.poll() is None, \
            "\n".join(out for _, out in _finish([node0, node1], 5))
        time.sleep(0.2)
    [(rc1, out1)] = _finish([node1])
    assert rc1 == -signal.SIGKILL and marker.exists(), out1
    assert node0.poll() is None, "node 0 gave up instead of waiting for node 1"
    again = _start_node(args, ns1)  # the same command on the same node
    (rc0, out0), (rc1, out1) = _finish([node0, again], timeout=300)
    assert rc0 == 0 and rc1 == 0, f"node 0:\n{out0}\nnode 1 (re-run):\n{out1}"
    [line0] = [ln for ln in out0.splitlines() if "restart 1 of 2" in ln]
    assert "global rank 0 (node 0" in line0, line0  # its peer vanished mid-collective
    assert "restart 1 of 2" not in out1  # the re-run node joins the restarted group
    _assert_same_weights(reference, tmp_path)


# A hook that raises in epoch 2 on rank 1: a RuntimeError once (marker file), or a user error
# (ConfigError: the message says what to change) every time.
RAISE_HOOK = """
import os

from zoo.config import ConfigError
from zoo.engine.hooks import HookBase
from zoo.utils import comm


class RaiseOnce(HookBase):
    def after_step(self):
        if self.trainer.iteration == {kill_at} and comm.get_rank() == 1:
            if {user_error}:
                raise ConfigError("CONFIG.TEST_KEY is wrong; set it right")
            if not os.path.exists({marker!r}):
                open({marker!r}, "w").close()
                raise RuntimeError("a one-off failure")
"""


def _one_node_run(tmp_path, synth_root, user_error):
    hook = tmp_path / "raise_hook.py"
    hook.write_text(RAISE_HOOK.format(kill_at=KILL_AT, user_error=user_error,
                                      marker=str(tmp_path / "raised_once")))
    args = [*_job_args(tmp_path, synth_root, "job"), "DDP_CONFIG.NUM_CPU_PROCS", "2",
            "DDP_CONFIG.MAX_RESTARTS", "1", "TRAIN.HOOKS", repr([f"{hook}:RaiseOnce"])]
    return _finish([_start(_tool("train_ddp.py", args))], timeout=240)[0]


def test_one_node_restarts_after_an_unexpected_error_and_ends_bitwise_equal(
        tmp_path, synth_root, reference):
    rc, out = _one_node_run(tmp_path, synth_root, user_error=False)
    assert rc == 0, out
    [line] = [ln for ln in out.splitlines() if "restart 1 of 1" in ln]
    assert "global rank 1 (node 0, local process 1) failed: unexpected RuntimeError: a one-off " \
           "failure" in line, line
    _assert_same_weights(reference, tmp_path)


def test_a_user_error_is_not_restarted(tmp_path, synth_root):
    rc, out = _one_node_run(tmp_path, synth_root, user_error=True)
    assert rc != 0
    assert "restart 1 of" not in out
    [line] = [ln for ln in out.splitlines() if "error:" in ln]
    assert "global rank 1" in line and "CONFIG.TEST_KEY is wrong; set it right" in line, line
    assert "(not restarted: it would fail the same way again)" in line
