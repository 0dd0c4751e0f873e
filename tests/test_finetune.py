"""Fine-tuning in one command: a checkpoint trained on 4 generated classes fine-tunes on a
generated 3-class dataset; the class count is read from the data and the head is re-initialised."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT, TINY_DATA, run_tool

SMALL_MODEL = ["MODEL.KWARGS", "['width', 8, 'dropout', 0.0]", "DATA.CLIP_LEN", "4"]


def _overrides_without(keys, pairs):
    out = []
    for k, v in zip(pairs[0::2], pairs[1::2]):
        if k not in keys:
            out += [k, v]
    return out


@pytest.mark.slow
def test_finetune_to_a_different_class_count(tmp_path, synth_root):
    # 1. A "pretrained" checkpoint: 4 generated classes.
    pre = run_tool("train_ddp.py", [
        "MODEL.NAME", "slowfast_tiny_resnet18", *TINY_DATA, *SMALL_MODEL,
        "DATA.NUM_CLASSES", "4", "TRAIN.EPOCH_NUM", "1", "DDP_CONFIG.DISTRIBUTED", "False",
        "DATA.SYNTHETIC.ROOT", synth_root, "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "pre",
    ])
    assert pre.returncode == 0, pre.stdout[-3000:]
    ckpt = tmp_path / "pre" / "checkpoints" / "epoch_1.pth"

    # 2. The user's data: 3 classes, as lists + classes.txt.
    data = tmp_path / "mine"
    gen = subprocess.run([sys.executable, "-m", "zoo.data.synthetic", "--out", str(data),
                          "--num-classes", "3", "--train-per-class", "4", "--val-per-class", "3",
                          "--frames", "8", "--size", "32", "--seed", "7"],
                         cwd=ROOT, capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr

    # 3. One command.
    tiny = _overrides_without({"DATA.SYNTHETIC.ENABLE", "DATA.NUM_CLASSES"}, TINY_DATA)
    ft = run_tool("train_ddp.py", [
        "--config-file", "configs/custom/slowfast_tiny_finetune.yaml",
        "MODEL.PRETRAINED", str(ckpt), *tiny, *SMALL_MODEL, "TRAIN.EPOCH_NUM", "2",
        "DATA.TRAIN_ANNO_PATH", str(data / "train.txt"), "DATA.TRAIN_DATA_PATH", str(data),
        "DATA.VAL_ANNO_PATH", str(data / "val.txt"), "DATA.VAL_DATA_PATH", str(data),
        "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "ft",
    ])
    assert ft.returncode == 0, ft.stdout[-3000:]
    run_dir = tmp_path / "ft"
    assert "NUM_CLASSES: 3" in (run_dir / "config.yaml").read_text()
    log = (run_dir / "log_rank0.txt").read_text()
    assert "re-initialised head.proj" in log
    val = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in val if r.get("split") == "val"][-1]
    assert val["num_videos"] == 9
    assert val["top5"] == 100.0  # top-5 of 3 classes is top-3: always right
    assert 0.0 <= val["top1"] <= 100.0
