"""The README's quick start, for real: the tiny SlowFast learns the generated motion classes with
2 CPU processes, tools/test_ddp.py agrees with validation, and a single-frame model cannot learn
them (the classes need motion). About 2-3 minutes on 2 cores."""

import json
import os

import numpy as np
import pytest
from helpers import run_tool

QUICKSTART = "configs/quickstart/slowfast_tiny_motion.yaml"
BASELINE = "configs/quickstart/resnet18_single_frame.yaml"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("quickstart_cache"))


def _last_val(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r.get("split") == "val"][-1]


@pytest.mark.slow
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

    # The training curves of the run, drawn by tools/plot_log.py.
    p = run_tool("plot_log.py", [str(run_dir)], timeout=120)
    assert p.returncode == 0, p.stderr
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    n_train = sum(r.get("split") == "train" for r in records)
    n_val = sum(r.get("split") == "val" for r in records)
    assert f"{n_train} train points, {n_val} val points" in p.stdout
    best = max(r["top1"] for r in records if r.get("split") == "val")
    assert f"best top-1 {best:.2f}" in p.stdout
    from PIL import Image

    with Image.open(run_dir / "curves.png") as im:
        im.verify()
    with Image.open(run_dir / "curves.png") as im:
        pixels = np.asarray(im.convert("L"))
        assert im.size[0] > 800 and len(np.unique(pixels)) > 10  # not blank

    # tools/predict.py names the right class of generated videos (one per class).
    rows = [ln.split() for ln in open(run_dir / "config.yaml").read().splitlines()]
    val_list = next(r[1] for r in rows if r and r[0] == "VAL_ANNO_PATH:")
    data_root = next(r[1] for r in rows if r and r[0] == "VAL_DATA_PATH:")
    picks = {}
    for line in open(val_list):
        path, _, label = line.rsplit(maxsplit=2)
        picks.setdefault(int(label), path)
    names = open(os.path.join(os.path.dirname(val_list), "classes.txt")).read().split()
    videos = [os.path.join(data_root, picks[c]) for c in sorted(picks)]
    pr = run_tool("predict.py", ["--config-file", QUICKSTART, "--checkpoint",
                                 str(run_dir / "checkpoints" / "epoch_16.pth"), "--json",
                                 *videos, *common], timeout=120)
    assert pr.returncode == 0, pr.stdout[-2000:] + pr.stderr[-2000:]
    out = json.loads(pr.stdout)
    assert [r["top"][0]["name"] for r in out] == [names[c] for c in sorted(picks)]
    assert all(len(r["top"]) == 4 for r in out)  # top-5 clipped to the 4 classes


@pytest.mark.slow
def test_single_frame_baseline_stays_below_50(tmp_path, cache):
    r = run_tool("train_ddp.py", ["--config-file", BASELINE, "DATA.SYNTHETIC.ROOT", cache,
                                  "LOG.BASE_PATH", str(tmp_path)], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    val = _last_val(tmp_path / "quickstart_resnet18_single_frame")
    assert val["top1"] < 50.0, val
