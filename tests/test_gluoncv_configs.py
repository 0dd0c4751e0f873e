"""gluon-cv's 48 action-recognition YAMLs (rendered from their values by tests/gluoncv_configs.py)
load unedited, read gluoncv keys with gluoncv's meaning, and pass ``--dry-run``.

Needs the `models` branch (gluoncv model names registered) and the `weights` branch
(``MODEL.PRETRAINED: True/False``) merged.
"""

import logging
import re

import numpy as np
import pytest
import torch
import torchvision
from gluoncv_configs import CONFIGS, FEAT_CONFIGS, expected_classes, write_all
from helpers import run_tool
from videos_for_tests import write

from zoo.cli.dry_run import dry_run_file
from zoo.config import load_config
from zoo.data import build_dataset

# Independent parameter references at 400 classes: SlowFast R50 from PySlowFast
# (/work/shared/REFERENCE.md); its head is Linear(2048 + 256 -> classes).
_SLOWFAST_R50 = {"slowfast_4x16_resnet50": 34_480_216, "slowfast_8x8_resnet50": 34_566_488}
_SLOWFAST_HEAD_IN = 2048 + 256


def _torchvision_params(depth: int, classes: int) -> int:
    """gluoncv's ResNet-v1b TSN = torchvision's ResNet (same layers) with a `classes` head."""
    with torch.device("meta"):
        net = getattr(torchvision.models, f"resnet{depth}")(num_classes=classes)
    return sum(p.numel() for p in net.parameters())


def _reference_params(model: str, classes: int):
    for arch, at400 in _SLOWFAST_R50.items():
        if model.startswith(arch + "_"):
            return at400 - (_SLOWFAST_HEAD_IN + 1) * (400 - classes)
    m = re.match(r"resnet(\d+)_v1b_", model)
    if m:
        return _torchvision_params(int(m.group(1)), classes)
    return None  # checked against gluoncv's code by the models branch's tests


@pytest.fixture(scope="module")
def gluoncv_dir(tmp_path_factory):
    return write_all(str(tmp_path_factory.mktemp("gluoncv")))


def test_there_are_48_configs_six_of_them_feat():
    assert len(CONFIGS) == 48
    assert len(FEAT_CONFIGS) == 6


@pytest.mark.slow
def test_every_config_passes_the_dry_run(gluoncv_dir):
    checked = 0
    for stem, path in gluoncv_dir.items():
        mode = "features" if stem in FEAT_CONFIGS else "train"
        result = dry_run_file(path, mode=mode)
        assert result.model == CONFIGS[stem]["model"], stem
        assert result.num_classes == expected_classes(stem), stem
        assert result.params > 1_000_000, stem
        ref = _reference_params(result.model, result.num_classes)
        if ref is not None:
            assert result.params == ref, (stem, result.params, ref)
            checked += 1
        if CONFIGS[stem]["pretrained"]:  # True: the table's Kinetics weights, or one warning
            assert result.pretrained.startswith("tag ") or any(
                w.startswith("pretrained: MODEL.PRETRAINED True") for w in result.warnings), stem
        else:
            assert result.pretrained == "random init", (stem, result.pretrained)
        # The data lives on gluon-cv's machines: every list is reported missing, one line each.
        missing = [w for w in result.warnings if w.startswith("missing data:")]
        assert any("VAL_ANNO_PATH" in w for w in missing), stem
        assert (mode == "features") != any("TRAIN_ANNO_PATH" in w for w in missing), stem
        if not torch.cuda.is_available():
            assert any("nccl" in w for w in result.warnings), stem
    assert checked == 12  # 8 ResNet-v1b TSN + 4 SlowFast R50 configs have a reference count


def test_gluoncv_keys_take_gluoncv_meaning(gluoncv_dir):
    tsn = load_config(gluoncv_dir["resnet50_v1b_kinetics400"], validate=True)
    assert tsn.CONFIG.DATA.SAMPLING == "tsn" and tsn.CONFIG.DATA.NUM_SEGMENT == 7
    assert tsn.CONFIG.TRAIN.LR_POLICY == "Step" and tsn.CONFIG.TRAIN.LR_MILESTONE == [40, 80]
    # No LR_POLICY in the file: gluoncv's trainer stepped the LR at LR_MILESTONE.
    i3d = load_config(gluoncv_dir["i3d_resnet50_v1_kinetics400"])
    assert i3d.CONFIG.TRAIN.LR_POLICY == "Step" and i3d.CONFIG.DATA.SAMPLING == "dense"
    assert i3d.CONFIG.TRAIN.W_DECAY == pytest.approx(1e-4)  # YAML's string '1e-4'
    assert list(i3d.DDP_CONFIG.WORLD_URLS) == ["172.31.72.195"]  # from WOLRD_URLS
    # gluoncv: short side SHORT_SIDE_SIZE, then a random scale in [1, 1.25] for training.
    r21d = load_config(gluoncv_dir["r2plus1d_v1_resnet18_kinetics400"])
    assert r21d.CONFIG.DATA.CROP_SIZE == 112 and r21d.CONFIG.DATA.SHORT_SIDE_SIZE == 128
    assert list(r21d.CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE) == [128, 160]
    # gluoncv's warmup goes from 0 to LR (it never reads WARMUP_START_LR / WARMUP_END_LR).
    sf = load_config(gluoncv_dir["slowfast_4x16_resnet50_custom"])
    t = sf.CONFIG.TRAIN
    assert t.USE_WARMUP and t.WARMUP_START_LR == 0.0 and t.WARMUP_END_LR == 0.0  # ends on LR
    assert t.LR_POLICY == "Cosine" and t.WARMUP_EPOCHS == 34
    assert not i3d.CONFIG.DATA.KEEP_ASPECT_RATIO  # frames squashed to 340x256 as in gluoncv
    assert (i3d.CONFIG.DATA.NEW_WIDTH, i3d.CONFIG.DATA.NEW_HEIGHT) == (340, 256)
    assert (r21d.CONFIG.DATA.NEW_WIDTH, r21d.CONFIG.DATA.NEW_HEIGHT) == (171, 128)
    csn = load_config(gluoncv_dir["ircsn_v2_resnet152_f32s2_kinetics400"])
    assert csn.CONFIG.DATA.KEEP_ASPECT_RATIO  # the file says True
    feat = load_config(gluoncv_dir["tpn_resnet50_f32s2_feat"])
    assert feat.CONFIG.INFERENCE.FEAT is True and feat.CONFIG.LOG.SAVE_DIR == "features"


def test_differences_are_one_warning_each(gluoncv_dir, caplog):
    with caplog.at_level(logging.WARNING):
        load_config(gluoncv_dir["slowfast_4x16_resnet50_sthsthv2"])
    text = [r.getMessage() for r in caplog.records]
    assert sum("MULTIGRID True" in m for m in text) == 1
    assert sum("EVAL_DIR" in m for m in text) == 1
    # NUM_CROP 1 and KEEP_ASPECT_RATIO / NEW_HEIGHT / NEW_WIDTH mean in zoo what they meant.
    assert not any(k in m for m in text for k in ("NUM_CROP", "KEEP_ASPECT", "NEW_HEIGHT"))


def test_an_i3d_or_tpn_file_without_weights_says_it_starts_from_random_weights(gluoncv_dir,
                                                                              tmp_path, caplog):
    """gluoncv inflates an ImageNet ResNet into those nets (MODEL.PRETRAINED_BASE, True by
    default); zoo downloads none, so the file's run starts from random weights: one warning."""
    def warnings_for(path):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            load_config(path)
        return [r.getMessage() for r in caplog.records if "inflated to 3D" in r.getMessage()]

    for name in ("i3d_resnet50_v1_kinetics400", "tpn_resnet101_f32s2_kinetics400"):
        [line] = warnings_for(gluoncv_dir[name])
        assert "starts from random weights" in line and "inflate_from" in line
        assert ("ResNet-101" in line) == ("resnet101" in name)
    # Whole-model weights, a SlowFast (gluoncv trains it from scratch), or inflate_from: silent.
    assert warnings_for(gluoncv_dir["i3d_resnet50_v1_feat"]) == []
    assert warnings_for(gluoncv_dir["slowfast_4x16_resnet50_kinetics400"]) == []
    text = open(gluoncv_dir["i3d_resnet50_v1_kinetics400"]).read()
    inflated = tmp_path / "inflated.yaml"
    kwargs = "  MODEL:\n    KWARGS: [inflate_from, r50.pth]\n"
    inflated.write_text(text.replace("  MODEL:\n", kwargs))
    assert "inflate_from" in inflated.read_text()
    assert warnings_for(str(inflated)) == []


def _stripes(path: str) -> None:
    """A 64x32 video of four 16-pixel vertical stripes: red, green, blue, white."""
    frame = np.zeros((32, 64, 3), np.uint8)
    for i, colour in enumerate([(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)]):
        frame[:, 16 * i: 16 * (i + 1)] = colour
    write(path, np.stack([frame] * 8))


@pytest.mark.parametrize("keep", [False, True])
def test_keep_aspect_ratio_false_squashes_frames_like_gluoncv(tmp_path, keep):
    _stripes(str(tmp_path / "v.mp4"))
    (tmp_path / "list.txt").write_text("v.mp4 8 0\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"""
CONFIG:
  DATA:
    VAL_ANNO_PATH: '{tmp_path / "list.txt"}'
    VAL_DATA_PATH: '{tmp_path}/'
    NUM_CLASSES: 2
    CLIP_LEN: 2
    FRAME_RATE: 1
    NUM_SEGMENT: 1
    NUM_CROP: 1
    MULTIGRID: False
    KEEP_ASPECT_RATIO: {keep}
    NEW_HEIGHT: 32
    NEW_WIDTH: 32
    CROP_SIZE: 32
    SHORT_SIDE_SIZE: 32
    TRAIN_SHORT_SIDE_RANGE: [32, 40]
    MEAN: [0.0, 0.0, 0.0]
    STD: [1.0, 1.0, 1.0]
""")
    clip = build_dataset(load_config(str(cfg)), "val")[0][0]  # (C, T, 32, 32) in [0, 1]
    row = clip[:, 0, 16]  # (C, 32): the middle row
    rgb = lambda x: [round(float(v)) for v in row[:, x]]  # noqa: E731
    if keep:  # the centre 32x32 of the 64x32 frame: green then blue
        assert rgb(4) == [0, 1, 0] and rgb(27) == [0, 0, 1]
    else:  # gluoncv: the whole frame squashed to 32x32, four 8-pixel stripes
        assert [rgb(x) for x in (3, 11, 19, 27)] == [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]


def _params(stdout: str) -> int:
    m = re.search(r"model: (\S+), ([\d,]+) parameters, (\d+) classes", stdout)
    assert m, stdout
    return int(m.group(2).replace(",", ""))


@pytest.mark.slow
def test_train_tool_dry_run(gluoncv_dir):
    proc = run_tool("train_ddp.py", ["--config-file",
                                     gluoncv_dir["slowfast_4x16_resnet50_kinetics400"],
                                     "--dry-run"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "model: slowfast_4x16_resnet50_kinetics400," in out
    assert _params(out) == 34_480_216
    assert "pretrained: random init" in out
    assert "warning: missing data: CONFIG.DATA.TRAIN_ANNO_PATH" in out


@pytest.mark.slow
def test_test_tool_dry_run(gluoncv_dir):
    proc = run_tool("test_ddp.py", ["--config-file", gluoncv_dir["resnet50_v1b_custom"],
                                    "--dry-run"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert _params(out) == _torchvision_params(50, 174)
    assert "TRAIN_ANNO_PATH" not in out and "missing data: CONFIG.DATA.VAL_ANNO_PATH" in out
    # The test tool evaluates the run's newest checkpoint: it does not exist yet.
    assert "warning: missing data: the checkpoint './logs/resnet50_v1b_custom/default/" \
        "checkpoints' does not exist" in out


@pytest.mark.slow
def test_invalid_config_fails_the_dry_run(gluoncv_dir, tmp_path):
    bad = tmp_path / "bad.yaml"
    text = open(gluoncv_dir["i3d_resnet50_v1_kinetics400"]).read()
    bad.write_text(text.replace("STEP: 0.1", "STEP: 0.1\n    EPOCHS: 3"))
    proc = run_tool("train_ddp.py", ["--config-file", str(bad), "--dry-run"])
    assert proc.returncode != 0
    assert "unknown config key CONFIG.TRAIN.EPOCHS" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_feature_config_dry_run(gluoncv_dir):
    proc = run_tool("extract_features.py", ["--config-file", gluoncv_dir["resnet50_v1b_feat"],
                                            "--dry-run"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "model: resnet50_v1b_kinetics400," in out
    assert _params(out) == _torchvision_params(50, 400)
    assert "pretrained: tag " in out or "warning: pretrained: MODEL.PRETRAINED True" in out
    # gluoncv's folder for features: BASE_PATH/EXP_NAME/SAVE_DIR.
    assert "resnet50_v1b_kinetics400/default/features" in out


def test_model_that_cannot_be_built_fails_the_dry_run(caplog):
    from zoo.cli.dry_run import run_dry_run

    good = load_config(None, ["MODEL.NAME", "slowfast_tiny_resnet18", "DATA.SYNTHETIC.ENABLE",
                              "True", "DATA.NUM_CLASSES", "4"])
    assert run_dry_run(good, "train") == 0
    bad = load_config(None, ["MODEL.NAME", "slowfast_tiny_resnet18", "MODEL.KWARGS",
                             "['no_such_argument', 1]"])
    with caplog.at_level(logging.ERROR):
        assert run_dry_run(bad, "train") == 1
    assert any("error: model slowfast_tiny_resnet18 cannot be built" in r.getMessage()
               for r in caplog.records)


def test_world_urls_of_other_hosts_are_a_warning_in_a_dry_run():
    from zoo.cli.dry_run import dry_run

    cfg = load_config(None, ["MODEL.NAME", "slowfast_tiny_resnet18", "DATA.NUM_CLASSES", "4",
                             "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.DIST_BACKEND", "gloo",
                             "DDP_CONFIG.WORLD_URLS", "['192.0.2.10', '192.0.2.11']",
                             "DDP_CONFIG.DIST_URL", "tcp://192.0.2.10:23456"])
    result = dry_run(cfg, "train")
    machine = [w for w in result.warnings if w.startswith("on this machine:")]
    assert len(machine) == 1 and "WORLD_URLS" in machine[0], result.warnings


def test_older_gluoncv_spellings_take_effect(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("""
CONFIG:
  DATA:
    NUM_CROP: 1
    NEW_LENGTH: 8
    NEW_STEP: 4
  MODEL:
    NAME: 'slowfast_tiny_resnet18'
    LOAD: True
    PRETRAINED_PATH: '/models/k400.pth'
    BN_FROZEN: True
""")
    cfg = load_config(str(path))
    assert (cfg.CONFIG.DATA.CLIP_LEN, cfg.CONFIG.DATA.FRAME_RATE) == (8, 4)
    assert cfg.CONFIG.MODEL.PRETRAINED == "/models/k400.pth" and cfg.CONFIG.MODEL.FREEZE_BN


def test_dry_run_says_where_weights_come_from_without_downloading(tmp_path, monkeypatch):
    from zoo.cli.dry_run import dry_run

    monkeypatch.setenv("ZOO_HOME", str(tmp_path))
    base = ["MODEL.NAME", "slowfast_8x8_resnet50", "DATA.NUM_CLASSES", "400",
            "DDP_CONFIG.DIST_BACKEND", "gloo"]
    tag = dry_run(load_config(None, base + ["MODEL.PRETRAINED", "True"]))
    assert tag.pretrained.startswith("tag 'kinetics400'") and "not downloaded yet" in tag.pretrained
    assert not any(tmp_path.rglob("*.pyth")) and not any(tmp_path.rglob("*.pth"))
    url = dry_run(load_config(None, base + ["MODEL.PRETRAINED", "http://127.0.0.1:9/x.pth"]))
    assert url.pretrained.startswith("http://127.0.0.1:9/x.pth -> ")
    missing = dry_run(load_config(None, base + ["MODEL.PRETRAINED", "/no/such/k400.pth"]))
    assert missing.pretrained.startswith("unresolved")
    lines = [w for w in missing.warnings if w.startswith("pretrained:")]
    assert len(lines) == 1
    assert lines[0].startswith("pretrained: MODEL.PRETRAINED '/no/such/k400.pth' does not exist")


def test_a_gluoncv_warmup_ends_on_lr_when_lr_is_overridden(gluoncv_dir):
    # gluoncv's GradualWarmupScheduler(multiplier=1.0) goes from 0 to LR and never reads
    # WARMUP_END_LR, which its files set to other values (0.1 with LR 0.01).
    import torch.nn as nn

    from zoo.solver import build_lr_scheduler

    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    for stem, extra in (("slowfast_4x16_resnet50_custom", []),
                        ("i3d_slow_resnet101_f16s4_kinetics400", ["TRAIN.USE_WARMUP", "True"])):
        cfg = load_config(gluoncv_dir[stem], ["TRAIN.LR", "0.002", *extra])
        s = build_lr_scheduler(cfg, opt, steps_per_epoch=4)
        assert s.warmup_iters > 0 and s.lr_at(0) == 0.0, stem
        assert s.lr_at(s.warmup_iters) == pytest.approx(0.002), stem
        assert max(s.lr_at(i) for i in range(4 * cfg.CONFIG.TRAIN.EPOCH_NUM)) == \
            pytest.approx(0.002), stem
