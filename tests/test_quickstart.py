"""The README's quick start, for real: the tiny SlowFast learns the generated motion classes with
2 CPU processes, tools/test_ddp.py agrees with validation, and a single-frame model cannot learn
them (the classes need motion). About 2-3 minutes on 2 cores."""

import json

import pytest

from conftest import run_tool

QUICKSTART = "configs/quickstart/slowfast_tiny_motion.yaml"
BASELINE = "configs/quickstart/resnet18_single_frame.yaml"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("quickstart_cache"))


def _last_val(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r.get("split") == "val"][-1]


def test_quickstart_trains_to_95_and_test_agrees(tmp_path, cache):
    common = ["DATA.SYNTHETIC.ROOT", cache, "LOG.BASE_PATH", str(tmp_path)]
    r = run_tool("train_ddp.py", ["--config-file", QUICKSTART, *common], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = tmp_path / "quickstart_slowfast_tiny"
    val = _last_val(run_dir)
    assert val["epoch"] == 16 and val["num_videos"] == 200
    assert val["top1"] >= 95.0, val

    t = run_tool("test_ddp.py", ["--config-file", QUICKSTART, *common], timeout=300)
    assert t.returncode == 0, t.stdout[-3000:] + t.stderr[-3000:]
    test = json.loads((run_dir / "test_metrics.json").read_text())
    assert test["num_videos"] == 200 and test["views"] == 6
    assert abs(test["top1"] - val["top1"]) <= 2.0, (test, val)


def test_single_frame_baseline_stays_below_50(tmp_path, cache):
    r = run_tool("train_ddp.py", ["--config-file", BASELINE, "DATA.SYNTHETIC.ROOT", cache,
                                  "LOG.BASE_PATH", str(tmp_path)], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    val = _last_val(tmp_path / "quickstart_resnet18_single_frame")
    assert val["top1"] < 50.0, val
