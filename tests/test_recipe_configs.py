"""The published Kinetics-400 recipes shipped in configs/kinetics400: MViTv2-S is what
tools/convert_config.py makes of PySlowFast's own MVITv2_S_16x4.yaml, VideoMAE ViT-B carries the
values of VideoMAE's ViT-B fine-tuning script, and both build their model and optimizer."""

import pathlib

import torch
import yaml

from zoo.config import flatten_cfg, load_config
from zoo.config.convert_pyslowfast import convert_pyslowfast
from zoo.config.yaml_files import read_yaml as read_zoo_yaml
from zoo.models import build_model
from zoo.models.registry import model_facts
from zoo.solver import build_optimizer


def read_yaml(path: str):
    """A PySlowFast file as its own loader reads it (a key set twice: the last wins)."""
    return read_zoo_yaml(path, unique_keys=False)


ROOT = pathlib.Path(__file__).resolve().parents[1]
MVIT = ROOT / "configs" / "kinetics400" / "mvit_v2_s_16x4.yaml"
VIDEOMAE = ROOT / "configs" / "kinetics400" / "videomae_vit_b_finetune.yaml"
PYSLOWFAST = ROOT / "tests" / "data" / "pyslowfast" / "configs" / "Kinetics" / "MVITv2_S_16x4.yaml"
# Keys that are the user's (data, output, evaluation batches), not the recipe's.
_NOT_RECIPE = ("CONFIG.DATA.TRAIN_", "CONFIG.DATA.VAL_", "CONFIG.LOG.BASE_PATH",
               "CONFIG.LOG.EXP_NAME", "CONFIG.VAL.BATCH_SIZE", "CONFIG.TEST.BATCH_SIZE")


def _built(cfg):
    with torch.device("meta"):
        return build_model(cfg)


def test_mvit_v2_s_config_is_the_conversion_of_pyslowfasts_recipe(tmp_path):
    converted, _, _ = convert_pyslowfast(read_yaml(str(PYSLOWFAST)))
    out = tmp_path / "converted.yaml"
    out.write_text(yaml.safe_dump(converted))
    ours, theirs = flatten_cfg(load_config(str(MVIT))), flatten_cfg(load_config(str(out)))
    differ = {k for k in ours if ours[k] != theirs[k] and not k.startswith(_NOT_RECIPE)}
    # The converter leaves the model's own defaults (PySlowFast's DATA.MEAN / STD, which are
    # mvit_v2_s's facts; DROPPATH_RATE, DROPOUT_RATE, the builder's) implicit; the config states
    # them.
    assert differ == {"CONFIG.DATA.MEAN", "CONFIG.DATA.STD", "CONFIG.MODEL.DROP_PATH",
                      "CONFIG.MODEL.KWARGS"}
    cfg = load_config(str(MVIT))
    model = _built(cfg)
    default = _built(load_config(str(out)))
    assert model.blocks[-1].drop_path.p == default.blocks[-1].drop_path.p == 0.2
    assert model.head.dropout.p == default.head.dropout.p == 0.5
    facts = model_facts("mvit_v2_s")
    assert (list(facts["mean"]), list(facts["std"])) == (theirs["CONFIG.DATA.MEAN"],
                                                         theirs["CONFIG.DATA.STD"])


def test_videomae_vit_b_config_has_videomaes_finetuning_values():
    cfg = load_config(str(VIDEOMAE))
    t, d = cfg.CONFIG.TRAIN, cfg.CONFIG.DATA
    # finetune.sh of the 1600-epoch ViT-B: --batch_size 6 --num_sample 2 --lr 5e-4 --epochs 75
    # on 64 GPUs; run_class_finetuning.py scales the LR by videos / 256.
    videomae_lr = 5e-4 * (6 * 64) / 256
    assert t.LR * (t.BATCH_SIZE * 64) / t.REFERENCE_BATCH == videomae_lr
    assert (t.BATCH_SIZE, d.CLIPS_PER_VIDEO, d.CLIPS_WINDOW, t.EPOCH_NUM) == (12, 2, "shared", 75)
    assert (t.OPTIMIZER, t.W_DECAY, t.WARMUP_EPOCHS, t.WARMUP_START_LR) == (
        "AdamW", 0.05, 5.0, 1e-6)
    assert t.WARMUP_END_LR == 0.0 and t.LR_POLICY == "Cosine"  # the warmup ends on LR
    # run_class_finetuning.py's defaults the script keeps.
    assert (t.LAYER_DECAY, cfg.CONFIG.MODEL.DROP_PATH, t.LABEL_SMOOTHING) == (0.75, 0.1, 0.1)
    assert (t.MIXUP_ALPHA, t.CUTMIX_ALPHA) == (0.8, 1.0)
    assert (d.RAND_AUGMENT, d.RANDOM_ERASE) == ("rand-m7-n4-mstd0.5-inc1", 0.25)
    assert (d.CLIP_LEN, d.FRAME_RATE, d.CROP_SIZE, d.SHORT_SIDE_SIZE) == (16, 4, 224, 224)
    assert (d.TEST_NUM_SEGMENT, d.TEST_NUM_CROP) == (5, 3)


def test_videomae_vit_b_config_builds_its_layer_decayed_optimizer():
    cfg = load_config(str(VIDEOMAE))
    model = _built(cfg)
    assert model.blocks[-1].drop_path.p == 0.1
    assert isinstance(model.blocks[0].drop_path, torch.nn.Identity)  # rate 0
    opt = build_optimizer(cfg, model)
    # VideoMAE's LayerDecayValueAssigner: 0.75 ** (13 - i) for the 14 layers of ViT-B.
    mults = sorted({round(g["lr_mult"], 12) for g in opt.param_groups})
    assert mults == sorted(round(0.75 ** (13 - i), 12) for i in range(14))
