"""PySlowFast configs: recognised when loaded, converted by tools/convert_config.py to a zoo config
with the same model (parameter count), input, solver, schedule, batch and test views."""

import bisect

import pytest
import yaml
from helpers import run_tool

from zoo.cli.dry_run import dry_run_file
from zoo.config import ConfigError, load_config
from zoo.config.convert_pyslowfast import convert_pyslowfast, write_converted
from zoo.solver.lr_scheduler import WarmupScheduler

# PySlowFast's Kinetics SlowFast R50 recipes (configs/Kinetics/SLOWFAST_{4x16,8x8}_R50.yaml in
# facebookresearch/SlowFast): the two differ only in ALPHA and the fusion kernel. Parameter counts
# at 400 classes from PySlowFast (/work/shared/REFERENCE.md).
_NETS = {"4x16": (8, 5, 34_480_216), "8x8": (4, 7, 34_566_488)}


def pyslowfast_yaml(alpha: int, fusion_kernel: int) -> dict:
    """The SLOWFAST_*_R50.yaml mapping, built from its values."""
    pairs = lambda v: [[v, v]] * 4  # noqa: E731 - slow and fast pathway, four stages
    return {
        "TRAIN": {"ENABLE": True, "DATASET": "kinetics", "BATCH_SIZE": 64, "EVAL_PERIOD": 10,
                  "CHECKPOINT_PERIOD": 1, "AUTO_RESUME": True},
        "DATA": {"NUM_FRAMES": 32, "SAMPLING_RATE": 2, "TRAIN_JITTER_SCALES": [256, 320],
                 "TRAIN_CROP_SIZE": 224, "TEST_CROP_SIZE": 256, "INPUT_CHANNEL_NUM": [3, 3]},
        "SLOWFAST": {"ALPHA": alpha, "BETA_INV": 8, "FUSION_CONV_CHANNEL_RATIO": 2,
                     "FUSION_KERNEL_SZ": fusion_kernel},
        "RESNET": {"ZERO_INIT_FINAL_BN": True, "WIDTH_PER_GROUP": 64, "NUM_GROUPS": 1,
                   "DEPTH": 50, "TRANS_FUNC": "bottleneck_transform", "STRIDE_1X1": False,
                   "NUM_BLOCK_TEMP_KERNEL": [[3, 3], [4, 4], [6, 6], [3, 3]],
                   "SPATIAL_STRIDES": [[1, 1]] + [[2, 2]] * 3, "SPATIAL_DILATIONS": pairs(1)},
        "NONLOCAL": {"LOCATION": [[[], []]] * 4, "GROUP": pairs(1),
                     "INSTANTIATION": "dot_product"},
        "BN": {"USE_PRECISE_STATS": True, "NUM_BATCHES_PRECISE": 200, "MOMENTUM": 0.1,
               "WEIGHT_DECAY": 0.0},
        "SOLVER": {"BASE_LR": 0.1, "LR_POLICY": "cosine", "MAX_EPOCH": 196, "MOMENTUM": 0.9,
                   "WEIGHT_DECAY": "1e-4", "WARMUP_EPOCHS": 34, "WARMUP_START_LR": 0.01,
                   "OPTIMIZING_METHOD": "sgd"},
        "MODEL": {"NUM_CLASSES": 400, "ARCH": "slowfast", "LOSS_FUNC": "cross_entropy",
                  "DROPOUT_RATE": 0.5},
        "TEST": {"ENABLE": True, "DATASET": "kinetics", "BATCH_SIZE": 64},
        "DATA_LOADER": {"NUM_WORKERS": 8, "PIN_MEMORY": True},
        "NUM_GPUS": 8, "NUM_SHARDS": 1, "RNG_SEED": 0, "OUTPUT_DIR": ".",
    }


def _write(tmp_path, name: str, data: dict) -> str:
    path = tmp_path / name
    # WEIGHT_DECAY as PySlowFast writes it (1e-4, which YAML reads as a string).
    path.write_text(yaml.safe_dump(data, sort_keys=False).replace("'1e-4'", "1e-4"))
    return str(path)


@pytest.mark.parametrize("variant", sorted(_NETS))
def test_converted_kinetics_configs_build_pyslowfasts_model(tmp_path, variant):
    alpha, kernel, params = _NETS[variant]
    src = _write(tmp_path, f"SLOWFAST_{variant}_R50.yaml", pyslowfast_yaml(alpha, kernel))
    out = str(tmp_path / "zoo.yaml")
    name, unmatched, _ = write_converted(src, out)
    assert name == f"slowfast_{variant}_resnet50"
    assert unmatched == ["DATA_LOADER.PIN_MEMORY"]
    result = dry_run_file(out)
    assert (result.model, result.params, result.num_classes) == (name, params, 400)
    cfg = load_config(out)
    t, d = cfg.CONFIG.TRAIN, cfg.CONFIG.DATA
    assert (t.LR, t.EPOCH_NUM, t.MOMENTUM, t.W_DECAY, t.OPTIMIZER) == (0.1, 196, 0.9, 1e-4, "SGD")
    assert (t.LR_POLICY, t.USE_WARMUP, t.WARMUP_EPOCHS, t.WARMUP_START_LR) == (
        "Cosine", True, 34, 0.01)
    assert t.COSINE_AFTER_WARMUP is False  # PySlowFast's default: the cosine spans all epochs
    # 64 clips over 8 GPUs: 8 per process; the LR recipe is for a global batch of 64.
    assert (t.BATCH_SIZE, t.REFERENCE_BATCH, t.PRECISE_BN_ITERS) == (8, 64, 200)
    assert (d.CLIP_LEN, d.FRAME_RATE, d.CROP_SIZE, d.TARGET_FPS) == (32, 2, 224, 30)
    assert list(d.TRAIN_SHORT_SIDE_RANGE) == [256, 320] and d.SHORT_SIDE_SIZE == 256
    assert d.TEST_SHORT_SIDE_SIZE == 0  # 3 crops at TEST_CROP_SIZE 256: the val short side
    assert list(d.MEAN) == [0.45] * 3 and list(d.STD) == [0.225] * 3  # PySlowFast defaults
    assert (d.TEST_NUM_SEGMENT, d.TEST_NUM_CROP) == (10, 3)
    assert (cfg.CONFIG.VAL.FREQ, cfg.CONFIG.LOG.SAVE_FREQ, cfg.CONFIG.SEED) == (10, 1, 0)


@pytest.mark.slow
def test_tool_converts_and_the_result_passes_the_dry_run(tmp_path):
    src = _write(tmp_path, "SLOWFAST_8x8_R50.yaml", pyslowfast_yaml(4, 7))
    out = str(tmp_path / "slowfast_8x8.yaml")
    proc = run_tool("convert_config.py", ["--from", "pyslowfast", src, out])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CONFIG.MODEL.NAME slowfast_8x8_resnet50" in proc.stdout
    assert "no zoo counterpart (not converted): DATA_LOADER.PIN_MEMORY" in proc.stdout
    assert "per-process CONFIG.TRAIN.BATCH_SIZE is 8" in proc.stdout
    proc = run_tool("train_ddp.py", ["--config-file", out, "--dry-run"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "model: slowfast_8x8_resnet50, 34,566,488 parameters" in proc.stdout + proc.stderr


def test_loading_a_pyslowfast_yaml_says_what_it_is(tmp_path):
    src = _write(tmp_path, "SLOWFAST_4x16_R50.yaml", pyslowfast_yaml(8, 5))
    with pytest.raises(ConfigError) as e:
        load_config(src)
    assert str(e.value) == (f"{src} is a PySlowFast config; convert it with python "
                            f"tools/convert_config.py --from pyslowfast {src} OUT.yaml")


def test_relative_step_schedule_gives_pyslowfasts_lr_at_every_epoch():
    data = pyslowfast_yaml(4, 7)
    steps, lrs = [0, 94, 154, 196], [1, 0.1, 0.05]  # a step at MAX_EPOCH is never reached
    data["SOLVER"].update(LR_POLICY="steps_with_relative_lrs", STEPS=steps, LRS=lrs,
                          WARMUP_EPOCHS=0)
    out, _, _ = convert_pyslowfast(data)
    t = out["CONFIG"]["TRAIN"]
    assert (t["LR_MILESTONE"], t["LR_FACTORS"]) == ([94, 154], [1, 0.1, 0.05])
    sched = WarmupScheduler(_Opt(), base_lr=t["LR"], total_iters=t["EPOCH_NUM"],
                            policy=t["LR_POLICY"], milestones=t["LR_MILESTONE"],
                            factors=t["LR_FACTORS"])
    for epoch in range(196):
        # PySlowFast: BASE_LR * LRS[i] for STEPS[i] <= epoch < STEPS[i + 1].
        want = 0.1 * lrs[bisect.bisect_right(steps, epoch) - 1]
        assert sched.lr_at(epoch) == pytest.approx(want), epoch


def test_lr_factors_are_validated(tmp_path):
    path = tmp_path / "zoo.yaml"
    path.write_text("CONFIG:\n  TRAIN:\n    LR_POLICY: Step\n    LR_MILESTONE: [10, 20]\n"
                    "    LR_FACTORS: [1, 0.1]\n")
    with pytest.raises(ConfigError, match="LR_FACTORS has 2 entries but CONFIG.TRAIN.LR_MILES"):
        load_config(str(path))


class _Opt:
    param_groups = [{}]


def test_unknown_keys_are_listed_recipe_keys_noted_and_unsupported_ones_stop(tmp_path):
    data = pyslowfast_yaml(8, 5)
    data["DETECTION"] = {"ENABLE": False}
    data["MIXUP"] = {"ENABLE": True, "ALPHA": 0.8}
    data["AUG"] = {"ENABLE": True, "RE_PROB": 0.25}
    data["SOLVER"]["LAYER_DECAY"] = 0.75
    data["DATA_LOADER"]["MYSTERY"] = 1
    out, unmatched, notes = convert_pyslowfast(data)
    assert unmatched == ["DATA_LOADER.MYSTERY", "DATA_LOADER.PIN_MEMORY"]
    assert out["CONFIG"]["TRAIN"]["MIXUP_ALPHA"] == 0.8
    # AUG.ENABLE: PySlowFast's default policy, and the erasing chance given.
    assert (out["CONFIG"]["DATA"]["RAND_AUGMENT"], out["CONFIG"]["DATA"]["RANDOM_ERASE"]) == (
        "rand-m9-mstd0.5-inc1", 0.25)
    assert out["CONFIG"]["TRAIN"]["LAYER_DECAY"] == 0.75
    assert not any("LAYER_DECAY" in n for n in notes)
    data["NONLOCAL"]["INSTANTIATION"] = "gaussian"
    data["NONLOCAL"]["LOCATION"] = [[[], []], [[1, 3], []], [[], []], [[], []]]
    with pytest.raises(ConfigError, match="NONLOCAL.INSTANTIATION = 'gaussian' is not supp"):
        convert_pyslowfast(data)
    data["NONLOCAL"]["INSTANTIATION"] = "softmax"
    data["MODEL"]["LOSS_FUNC"] = "mse"
    with pytest.raises(ConfigError, match="MODEL.LOSS_FUNC = 'mse' has no zoo counterpart"):
        convert_pyslowfast(data)


def test_a_zoo_yaml_without_its_config_level_is_not_called_pyslowfast(tmp_path):
    path = tmp_path / "flat.yaml"
    path.write_text("TRAIN:\n  EPOCH_NUM: 5\n")
    with pytest.raises(ConfigError, match="unknown config key TRAIN"):
        load_config(str(path))


def test_batch_is_per_machine_and_shard_scaling_covers_the_warmup():
    # PySlowFast's loader divides TRAIN.BATCH_SIZE by NUM_GPUS only: it is per machine, and
    # BASE_LR_SCALE_NUM_SHARDS scales BASE_LR, WARMUP_START_LR and COSINE_END_LR together.
    data = pyslowfast_yaml(4, 7)
    data["NUM_SHARDS"] = 4
    data["SOLVER"].update(BASE_LR_SCALE_NUM_SHARDS=True, DAMPENING=0.5)
    data["TEST"]["BATCH_SIZE"] = 480  # clips per machine: 60 per GPU, 2 videos of 30 views
    out, _, notes = convert_pyslowfast(data)
    train = out["CONFIG"]["TRAIN"]
    # 64 clips per machine over 8 GPUs, 4 machines: 8 per process, a global batch of 256.
    assert (train["BATCH_SIZE"], train["REFERENCE_BATCH"]) == (8, 256)
    assert out["CONFIG"]["TEST"]["BATCH_SIZE"] == 2
    assert (train["LR"], train["WARMUP_START_LR"]) == (0.4, 0.04)
    assert any("per machine" in n and "NUM_SHARDS = 4 machines (32 processes)" in n
               for n in notes)
    assert any(n.startswith("SOLVER.DAMPENING 0.5") for n in notes)


def test_nesterov_follows_pyslowfasts_solver_nesterov_default_true():
    data = pyslowfast_yaml(4, 7)
    out, _, notes = convert_pyslowfast(data)
    assert out["CONFIG"]["TRAIN"]["NESTEROV"] is True  # PySlowFast's default, not in the file
    assert not any("NESTEROV" in n for n in notes)
    data["SOLVER"]["NESTEROV"] = False
    assert convert_pyslowfast(data)[0]["CONFIG"]["TRAIN"]["NESTEROV"] is False
    data["SOLVER"].update(NESTEROV=True, OPTIMIZING_METHOD="adamw")
    assert "NESTEROV" not in convert_pyslowfast(data)[0]["CONFIG"]["TRAIN"]


def test_the_cosine_start_follows_cosine_after_warmup():
    data = pyslowfast_yaml(4, 7)
    out, _, notes = convert_pyslowfast(data)
    assert out["CONFIG"]["TRAIN"]["COSINE_AFTER_WARMUP"] is False
    assert not any("COSINE_AFTER_WARMUP" in n for n in notes)
    data["SOLVER"]["COSINE_AFTER_WARMUP"] = True
    out, _, _ = convert_pyslowfast(data)
    assert out["CONFIG"]["TRAIN"]["COSINE_AFTER_WARMUP"] is True


@pytest.mark.parametrize("crops, test_crop, expected", [
    (3, 256, 0),     # short side TEST_CROP_SIZE 256 = the val short side (the jitter's 256)
    (3, 224, 224),   # MMAction2-like: 3 crops of 224 at short side 224
    (1, 224, 0),     # 1 crop: short side TRAIN_JITTER_SCALES[0] 256, a centre 224 crop
])
def test_the_test_short_side_is_pyslowfasts(crops, test_crop, expected):
    # slowfast/datasets/kinetics.py, test mode: [TEST_CROP_SIZE] * 3 with NUM_SPATIAL_CROPS > 1,
    # else [TRAIN_JITTER_SCALES[0]] * 2 + [TEST_CROP_SIZE].
    data = pyslowfast_yaml(4, 7)
    data["TEST"]["NUM_SPATIAL_CROPS"] = crops
    data["DATA"]["TEST_CROP_SIZE"] = test_crop
    out, _, notes = convert_pyslowfast(data)
    d = out["CONFIG"]["DATA"]
    assert d["SHORT_SIDE_SIZE"] == 256 and d.get("TEST_SHORT_SIDE_SIZE", 0) == expected
    assert any(n.startswith("DATA.TRAIN_JITTER_SCALES [256, 320]: PySlowFast's val split") and
               "short side 256" in n for n in notes)
