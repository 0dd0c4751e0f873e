"""End to end through tools/: multi-process gloo training, DISTRIBUTED False, testing, bad input."""

import json

import pytest
from helpers import TINY_DATA, run_tool


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.slow
def test_two_process_gloo_training_with_a_user_model(tmp_path, synth_root, toy_model_file):
    out = tmp_path / "runs"
    r = run_tool("train_ddp.py", [
        "--extra-modules", toy_model_file,
        "DDP_CONFIG.NUM_CPU_PROCS", "2",
        "MODEL.NAME", "toy_conv3d",
        "TRAIN.EPOCH_NUM", "2",
        "DATA.SYNTHETIC.ROOT", synth_root,
        "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "gloo2",
        *TINY_DATA,
    ])
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = out / "gloo2"
    for rank in (0, 1):
        log = (run_dir / f"log_rank{rank}.txt").read_text()
        assert f"rank {rank}/2" in log
        assert "training finished" in log
    cfg_text = (run_dir / "config.yaml").read_text()
    assert "GPU_WORLD_SIZE: 2" in cfg_text and "toy_conv3d" in cfg_text
    records = _read_jsonl(run_dir / "metrics.jsonl")
    val = [r for r in records if r.get("split") == "val"]
    assert val and val[-1]["epoch"] == 2
    assert {"top1", "top5", "loss"} <= set(val[-1])
    # 2 classes: top-5 is clipped to top-2, which is always 100%.
    assert val[-1]["top5"] == 100.0
    assert val[-1]["num_videos"] == 6
    assert (run_dir / "checkpoints" / "epoch_2.pth").is_file()
    assert list((run_dir / "tb_log").iterdir()), "no TensorBoard events"

    # test_ddp.py on the same run (2 ranks, 7 test views would not divide; 6 videos here).
    t = run_tool("test_ddp.py", [
        "--extra-modules", toy_model_file,
        "DDP_CONFIG.NUM_CPU_PROCS", "2",
        "MODEL.NAME", "toy_conv3d",
        "DATA.SYNTHETIC.ROOT", synth_root,
        "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "gloo2",
        *TINY_DATA,
    ])
    assert t.returncode == 0, t.stdout + t.stderr
    metrics = json.loads((run_dir / "test_metrics.json").read_text())
    assert metrics["num_videos"] == 6 and metrics["views"] == 6
    assert {"top1", "top5", "mean_class_acc"} <= set(metrics)
    rows = (run_dir / "predictions.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 6
    assert rows[0].startswith("video,label,label_name,pred")


@pytest.mark.slow
def test_not_distributed_runs_without_a_process_group(tmp_path, synth_root, toy_model_file):
    out = tmp_path / "runs"
    r = run_tool("train_ddp.py", [
        "--extra-modules", toy_model_file,
        "DDP_CONFIG.DISTRIBUTED", "False",
        "DDP_CONFIG.NUM_CPU_PROCS", "2",  # ignored: one process
        "MODEL.NAME", "toy_conv3d",
        "TRAIN.EPOCH_NUM", "1",
        "DATA.SYNTHETIC.ROOT", synth_root,
        "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "single",
        *TINY_DATA,
    ])
    assert r.returncode == 0, r.stdout + r.stderr
    log = (out / "single" / "log_rank0.txt").read_text()
    assert "rank 0/1" in log and "training finished" in log
    assert not (out / "single" / "log_rank1.txt").exists()


@pytest.mark.slow
def test_bad_config_fails_in_one_line(tmp_path):
    r = run_tool("train_ddp.py", ["TRAIN.EPOCH_NUMS", "3"], timeout=60)
    assert r.returncode == 2
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "error" in ln]
    assert len(lines) == 1 and "did you mean CONFIG.TRAIN.EPOCH_NUM" in lines[0]


@pytest.mark.slow
def test_unknown_model_fails_in_one_line(tmp_path):
    r = run_tool("train_ddp.py", ["MODEL.NAME", "slowfast_4x16_resnet05",
                                  "DATA.SYNTHETIC.ENABLE", "True"], timeout=60)
    assert r.returncode == 1
    err = [ln for ln in (r.stdout + r.stderr).splitlines() if "error" in ln]
    assert len(err) == 1 and "slowfast_4x16_resnet50" in err[0]
