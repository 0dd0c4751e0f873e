"""Exactness with the fine-tuning recipe's model keys on (TRAIN.LAYER_DECAY 0.75, MODEL.DROP_PATH
0.1, TRAIN.ACT_CHECKPOINT True) on a tiny VideoMAE: a SIGKILL mid-epoch then auto-resume ends bit
for bit where the uninterrupted run ends (two gloo ranks, so every rank's drop-path stream is
restored), and 2 processes with batch B/2 end where 1 process with batch B ends.

Drop path draws a keep mask per sample from the rank's own random stream (seeded SEED + rank), as
dropout does, so N processes equal 1 process with drop path off only; with it on they agree in
distribution. The resume test keeps it on."""

import os

import pytest
import torch
from helpers import TINY_DATA, run_tool, train_killed_at
from test_ddp_correctness import CLASSES, _changed, _max_diff, _train
from test_resume import _records

from zoo.models import MODEL_REGISTRY
from zoo.utils.env import seed_all

# videomae_vit_s cut down to 2 blocks of width 16: 4 frames of 28 pixels (TINY_DATA's clip) in
# tubelets of 2 x 7 x 7.
TINY_VIT = ["MODEL.NAME", "videomae_vit_s",
            "MODEL.KWARGS", "['embed_dim', 16, 'depth', 2, 'num_heads', 2, 'patch', 7, "
                            "'frames', 4, 'crop_size', 28]"]
RECIPE = ["TRAIN.LAYER_DECAY", "0.75", "MODEL.DROP_PATH", "0.1", "TRAIN.ACT_CHECKPOINT", "True",
          "TRAIN.OPTIMIZER", "AdamW", "TRAIN.W_DECAY", "0.05"]


@pytest.mark.slow
def test_recipe_keys_sigkill_then_auto_resume_is_bitwise_identical(tmp_path, synth_root):
    # 16 videos, 2 ranks x 2 clips: 4 steps an epoch.
    common = [*TINY_VIT, *RECIPE, "DDP_CONFIG.NUM_CPU_PROCS", "2", "TRAIN.EPOCH_NUM", "2",
              "TRAIN.AUTO_RESUME", "True", "TRAIN.LR", "0.01", "TRAIN.BATCH_SIZE", "2",
              *TINY_DATA, "DATA.SYNTHETIC.TRAIN_PER_CLASS", "8", "DATA.NUM_WORKERS", "0",
              "VAL.FREQ", "10", "DATA.SYNTHETIC.ROOT", synth_root, "LOG.BASE_PATH", str(tmp_path)]
    straight = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "straight"])
    assert straight.returncode == 0, straight.stdout[-3000:] + straight.stderr[-3000:]
    steps_per_epoch = torch.load(tmp_path / "straight" / "checkpoints" / "epoch_1.pth",
                                 weights_only=True)["iteration"]
    kill_at = steps_per_epoch + 2  # the 2nd optimizer step of epoch 2

    run_dir = train_killed_at(tmp_path, common, kill_at)
    assert "epoch_1.pth" in os.listdir(run_dir / "checkpoints")
    assert "epoch_2.pth" not in os.listdir(run_dir / "checkpoints")
    trained = [r for r in _records(run_dir / "metrics.jsonl") if r.get("split") == "train"]
    assert trained[-1]["epoch"] == 2 and trained[-1]["iter"] == kill_at

    resumed = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "killed"])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "continuing at epoch 2" in (run_dir / "log_rank0.txt").read_text()

    a = torch.load(tmp_path / "straight" / "checkpoints" / "epoch_2.pth", weights_only=True)
    b = torch.load(run_dir / "checkpoints" / "epoch_2.pth", weights_only=True)
    first = torch.load(tmp_path / "straight" / "checkpoints" / "epoch_1.pth", weights_only=True)
    assert _max_diff(first["model"], a["model"]) > 1e-5, "epoch 2 did not train: a vacuous test"
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for k, s in a["optimizer"]["state"].items():
        for name, v in s.items():
            assert torch.equal(v, b["optimizer"]["state"][k][name]), (k, name)
    # The optimizer really has VideoMAE's layer-wise groups: 0.75 ** (3 - layer), 4 layers.
    mults = {round(g["lr_mult"], 9) for g in a["optimizer"]["param_groups"]}
    assert mults == {round(0.75 ** i, 9) for i in range(4)}


@pytest.mark.slow
def test_recipe_keys_ddp_equals_single_process(tmp_path):
    """Layer decay, activation checkpointing, AdamW with weight decay; drop path off (see the
    module docstring). The clips of test_ddp_correctness: 3 x 4 x 8 x 8."""
    extra = ["MODEL.KWARGS", "['embed_dim', 16, 'depth', 2, 'num_heads', 2, 'patch', 4, "
                             "'frames', 4, 'crop_size', 8]",
             "TRAIN.LAYER_DECAY", "0.75", "TRAIN.ACT_CHECKPOINT", "True", "TRAIN.OPTIMIZER",
             "AdamW", "TRAIN.LR", "0.01", "TRAIN.W_DECAY", "0.05", "DATA.CROP_SIZE", "8",
             "DATA.CLIP_LEN", "4"]
    single = _train(tmp_path, "single", "videomae_vit_s", 1, extra=extra)
    ddp = _train(tmp_path, "ddp", "videomae_vit_s", 2, extra=extra)
    seed_all(0)
    init = MODEL_REGISTRY.get("videomae_vit_s")(
        num_classes=CLASSES, embed_dim=16, depth=2, num_heads=2, patch=4, frames=4,
        crop_size=8).state_dict()
    assert _changed(init, single), "training did not move the weights; the test would be vacuous"
    assert _max_diff(single, ddp) < 1e-5
