"""The GPU check (benchmarks/gpu_check.sh -> ``zoo-benchmark gpu``) end to end on the CPU with
small sizes, so it keeps working between GPU runs; and a failed step still prints the table and
makes the exit status non-zero."""

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT

from zoo.cli import benchmark

STEPS = ["cuda_tests", "quickstart", "train_step", "stems", "compiled_step", "loader",
         "real_decoding", "real_decoding_compiled", "real_decoding_resize_on_device", "memory",
         "balance"]
COMPILED = ("compiled_step", "real_decoding_compiled",
            "real_decoding_resize_on_device")  # GPU only


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
    for step in COMPILED:
        assert "| skipped | needs a CUDA device" in rows[step], rows[step]
    for step in STEPS[1:]:
        if step not in COMPILED:
            assert "| ok |" in rows[step], rows[step]
    assert "val top-1" in rows["quickstart"] and "test top-1" in rows["quickstart"]
    assert "fp32" in rows["train_step"] and "bf16" in rows["train_step"]
    for mode in ("bf16", "fp32"):  # a CPU that emulates bf16 names its GEMM as no peak
        assert re.search(rf"% of ({mode} peak|the \d+² {mode} GEMM, which ran slower than the "
                         "step: no peak on this device)", rows["train_step"]), rows["train_step"]
    assert "input uint8;" in rows["train_step"]
    assert "1x7x7 stem" in rows["stems"] and "5x7x7 stem" in rows["stems"], rows["stems"]
    assert "padded 3-D" in rows["stems"]
    assert "clips/s over epochs 2-2 by the wall clock" in rows["real_decoding"]
    assert "GPU busy n/a" in rows["real_decoding"]
    assert "activation checkpointing" in rows["memory"] and "RSS rise" in rows["memory"]
    assert "data wait " in rows["real_decoding"]
    # The host-wait hook ran in the training process; on a CPU it has nothing to count.
    waits = json.loads((out / "real_decoding" / "run" / "host_waits.json").read_text())
    assert waits == {"device": "cpu", "steps": 0, "waits": []}
    assert "host waits" not in rows["real_decoding"]
    # Both places of the resize, each with its clips per CPU second, and the host's cores.
    assert re.search(r"\d+ workers on \d+ cores( \(\d hardware threads? per core\))?; resized "
                     r"in the workers: [\d.]+ clips/s.*, [\d.]+ per CPU second; resized in the "
                     r"step: [\d.]+ clips/s", rows["loader"]), rows["loader"]
    for figure in ("model-only", "loader-only", "end-to-end", "GPU busy n/a", "data wait",
                   "limit: the "):
        assert figure in rows["balance"], rows["balance"]
    for step in STEPS:
        if step not in COMPILED:
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


def test_the_budget_skips_the_steps_it_cannot_start_and_the_table_still_comes(tmp_path,
                                                                              capsys):
    rc = benchmark.main(["gpu", "--device", "cpu", "--steps", "cuda_tests", "balance",
                         "--budget", "0", "--out", str(tmp_path / "out")])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0  # nothing failed: a step not started is skipped
    assert lines[-2] == "| cuda_tests | skipped | not started: the budget of 0 s was spent | 0.0 |"
    assert lines[-1].startswith("| balance | skipped | needs train_step")  # it needs no child
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["status"] for r in summary["rows"]] == ["skipped", "skipped"]


def test_a_child_is_killed_when_the_budget_is_spent(tmp_path):
    from benchmarks.gpu_check import Check

    check = Check(str(tmp_path), "cpu", quick=True, timeout_s=600, budget_s=2)
    rc = check.run("sleepy", [sys.executable, "-c", "import time; time.sleep(60)"])
    assert rc == 124
    assert (tmp_path / "sleepy.log").read_text().splitlines()[-1].startswith("killed after ")


def test_the_wait_counter_counts_sync_warnings_by_line_and_thread(tmp_path):
    """torch's sync debug mode warns at each call that waits for the GPU; the counter counts
    those warnings by source line and thread, and lets other warnings through."""
    import threading
    import warnings

    from benchmarks.host_waits import SYNC_WARNING, WaitCounter, summary

    def wait_here():
        warnings.warn(f"{SYNC_WARNING} (Triggered internally at CUDAFunctions.cpp)")

    line = wait_here.__code__.co_firstlineno + 1
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with WaitCounter() as counter:
            for _ in range(3):
                wait_here()
            writer = threading.Thread(target=wait_here, name="checkpoint-writer")
            writer.start()
            writer.join()
            warnings.warn("something else")
    assert [str(w.message) for w in shown] == ["something else"]
    where = f"tests/test_gpu_check.py:{line}"
    assert counter.table() == [{"where": where, "thread": "MainThread", "count": 3},
                               {"where": where, "thread": "checkpoint-writer", "count": 1}]
    path = tmp_path / "host_waits.json"
    path.write_text(json.dumps({"device": "cuda", "steps": 96, "waits": counter.table()}))
    assert summary(str(path)) == (f"host waits after epoch 1: 4 in 96 steps, main thread 3 "
                                  f"({where} 3)")
    path.write_text(json.dumps({"device": "cpu", "steps": 0, "waits": []}))
    assert summary(str(path)) == "" and summary(str(tmp_path / "missing.json")) == ""


def test_a_cut_short_cuda_run_still_names_its_failures():
    """The cuda tests log each outcome as it ends (-v): a run the budget kills before pytest's
    summary still says which tests failed, with or without xdist's worker prefix."""
    from benchmarks.gpu_check import outcomes_so_far

    lines = ["tests/test_a.py::test_x[cuda] PASSED                       [ 10%]",
             "[gw1] [ 20%] FAILED tests/test_cuda.py::test_y[cuda] ",
             "[gw0] [ 30%] PASSED tests/test_b.py::test_z",
             "tests/test_c.py::test_w ERROR                               [ 40%]",
             "[gw2] [ 50%] SKIPPED tests/test_d.py::test_s",
             "bringing up nodes..."]
    assert outcomes_so_far(lines) == ("2 passed, 2 failed (tests/test_cuda.py::test_y[cuda], "
                                      "tests/test_c.py::test_w)")


def test_the_real_decoding_runs_time_the_epochs_after_the_warm_ones():
    """At full size the first two epochs are untimed (start-up, then the batches made ahead
    meanwhile), and the wall clock runs from the second's end; shorter runs time what they can."""
    from benchmarks.gpu_check import _timed_epochs

    records = [{"epoch": e} for e in range(1, 7)]
    ends = [100.0, 110.0, 113.0, 116.0, 119.0, 122.0]
    timed, since, until = _timed_epochs(records, ends, warm=2)
    assert [r["epoch"] for r in timed] == [3, 4, 5, 6] and (since, until) == (110.0, 122.0)
    timed, since, until = _timed_epochs(records[:2], ends[:2], warm=2)  # cut short: epoch 2
    assert [r["epoch"] for r in timed] == [2] and (since, until) == (100.0, 110.0)
    timed, since, _ = _timed_epochs(records[:1], ends[:1], warm=2)  # one epoch: itself, no span
    assert [r["epoch"] for r in timed] == [1] and since is None
    _, since, _ = _timed_epochs(records, ends[:5], warm=2)  # a line missed: no wall clock
    assert since is None
