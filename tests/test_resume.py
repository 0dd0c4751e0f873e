"""Exact resume: 2 epochs straight == 1 epoch, SIGKILL mid-epoch 2, same command again
(auto-resume), bit for bit. Two gloo ranks with a data worker each, random crops and Mixup on, so
every random stream of the job matters."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, TINY_DATA, run_tool

ARGS = [
    "DDP_CONFIG.NUM_CPU_PROCS", "2",
    "MODEL.NAME", "toy_conv3d",
    "TRAIN.EPOCH_NUM", "2",
    "TRAIN.AUTO_RESUME", "True",
    "TRAIN.MIXUP_ALPHA", "0.4",
    "TRAIN.OPTIMIZER", "AdamW", "TRAIN.LR", "0.01",
    *TINY_DATA,
    "DATA.SYNTHETIC.TRAIN_PER_CLASS", "60",
    # a persistent data worker per rank: its RNG is not in any checkpoint, so the clips must not
    # depend on it
    "DATA.NUM_WORKERS", "1",
]


def _train_epoch_2_started(metrics_path):
    if not os.path.isfile(metrics_path):
        return False
    with open(metrics_path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("split") == "train" and r.get("epoch") == 2:
                return True
    return False


@pytest.mark.slow
def test_sigkill_then_auto_resume_is_bitwise_identical(tmp_path, synth_root, toy_model_file):
    common = ["--extra-modules", toy_model_file, *ARGS, "DATA.SYNTHETIC.ROOT", synth_root,
              "LOG.BASE_PATH", str(tmp_path)]
    straight = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "straight"])
    assert straight.returncode == 0, straight.stdout[-3000:]

    # The same job, killed with SIGKILL (the whole process group: launcher and workers) as soon
    # as epoch 2 has started.
    run_dir = tmp_path / "killed"
    cmd = [sys.executable, os.path.join(ROOT, "tools", "train_ddp.py"), *common,
           "LOG.EXP_NAME", "killed"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if _train_epoch_2_started(run_dir / "metrics.jsonl"):
            break
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    ckpts = sorted(os.listdir(run_dir / "checkpoints"))
    assert ckpts == ["best.pth", "epoch_1.pth"], f"killed at the wrong moment: {ckpts}"

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
    # The error line goes to stderr (zoo/engine/errors.py), the log lines before it to stdout.
    err = [ln for ln in again.stderr.splitlines() if "different config" in ln]
    assert err and "CONFIG.TRAIN.LR: 0.1 -> 0.5" in err[0]
