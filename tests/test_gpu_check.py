"""The GPU check (benchmarks/gpu_check.sh -> ``zoo-benchmark gpu``) end to end on the CPU with
small sizes, so it keeps working between GPU runs; and a failed step still prints the table and
makes the exit status non-zero."""

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

from zoo.cli import benchmark

STEPS = ["cuda_tests", "quickstart", "train_step", "loader", "real_decoding", "balance"]


@pytest.mark.slow
def test_gpu_check_script_runs_every_step_on_the_cpu(tmp_path):
    out = tmp_path / "check"
    env = dict(os.environ, PYTHON=sys.executable)
    r = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu_check.sh"), "--device",
                        "cpu", "--quick", "--out", str(out)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    table = r.stdout.strip().splitlines()[-(len(STEPS) + 2):]  # the table comes last
    assert table[0] == "| step | status | key figures | seconds |"
    rows = {line.split(" | ")[0].strip("| "): line for line in table[2:]}
    assert list(rows) == STEPS
    assert "| skipped |" in rows["cuda_tests"] and " skipped" in rows["cuda_tests"]
    for step in STEPS[1:]:
        assert "| ok |" in rows[step], rows[step]
    assert "val top-1" in rows["quickstart"] and "test top-1" in rows["quickstart"]
    assert "fp32" in rows["train_step"] and "bf16" in rows["train_step"]
    assert "% of bf16 peak" in rows["train_step"] and "% of fp32 peak" in rows["train_step"]
    assert "input uint8;" in rows["train_step"]
    assert "clips/s" in rows["real_decoding"] and "GPU busy n/a" in rows["real_decoding"]
    assert "data wait " in rows["real_decoding"]
    assert "clips/s with 0 workers" in rows["loader"] or "per worker" in rows["loader"]
    for figure in ("model-only", "loader-only", "end-to-end", "GPU busy n/a", "data wait",
                   "limit: the "):
        assert figure in rows["balance"], rows["balance"]
    for step in STEPS:
        assert (out / f"{step}.log").stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert [r["step"] for r in summary["rows"]] == STEPS and summary["device"] == "cpu"
    assert "rank 0/1 on cpu" in (out / "quickstart" / "run" / "log_rank0.txt").read_text()


def test_a_failed_step_is_reported_and_fails_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no tests/ here: the cuda_tests step fails
    rc = benchmark.main(["gpu", "--device", "cpu", "--steps", "cuda_tests", "--out",
                         str(tmp_path / "out")])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 1
    assert lines[-1].startswith("| cuda_tests | FAILED | tests/ not found")
    assert lines[-3] == "| step | status | key figures | seconds |"
