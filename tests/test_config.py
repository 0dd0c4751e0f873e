"""Config: defaults are documented, shipped YAMLs load, bad input fails in one line naming
the key."""

import glob
import os
import re

import pytest

from zoo.config import ConfigError, cfg_to_yaml, get_cfg, load_config
from zoo.config.config import _all_keys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS = os.path.join(ROOT, "zoo", "config", "defaults.py")


def test_every_default_key_has_a_comment_above_it():
    lines = open(DEFAULTS, encoding="utf-8").read().splitlines()
    assigned = set()
    for i, line in enumerate(lines):
        m = re.match(r"^_C\.([A-Z0-9_.]+) = ", line)
        if not m:
            continue
        assigned.add(m.group(1))
        j = i - 1
        while j >= 0 and lines[j].startswith("#") is False and lines[j].strip() == "":
            j -= 1
        assert lines[j].lstrip().startswith("#"), f"_C.{m.group(1)} has no comment above it"
    # Every key the config holds was assigned (and so documented) in defaults.py.
    for key in _all_keys(get_cfg()):
        assert key in assigned, f"{key} is not assigned with a comment in defaults.py"


def test_required_sections_and_gluoncv_names():
    cfg = get_cfg()
    for key in ["WORLD_SIZE", "WORLD_RANK", "WORLD_URLS", "AUTO_RANK_MATCH", "DIST_URL",
                "DIST_BACKEND", "GPU_WORLD_SIZE", "GPU_WORLD_RANK", "GPU", "DISTRIBUTED"]:
        assert key in cfg.DDP_CONFIG
    for section in ["TRAIN", "VAL", "DATA", "MODEL", "LOG"]:
        assert section in cfg.CONFIG
    for key in ["EPOCH_NUM", "BATCH_SIZE", "LR", "MOMENTUM", "W_DECAY", "LR_POLICY",
                "LR_MILESTONE", "STEP", "USE_WARMUP", "WARMUP_EPOCHS", "WARMUP_START_LR",
                "WARMUP_END_LR", "RESUME_EPOCH"]:
        assert key in cfg.CONFIG.TRAIN
    for key in ["CLIP_LEN", "FRAME_RATE", "TEST_NUM_SEGMENT", "TEST_NUM_CROP", "CROP_SIZE",
                "SHORT_SIDE_SIZE", "TRAIN_ANNO_PATH", "VAL_ANNO_PATH", "NUM_CLASSES"]:
        assert key in cfg.CONFIG.DATA


def test_defaults_validate():
    load_config(None, [])


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.yaml"),
                                               recursive=True)))
def test_every_shipped_yaml_loads(path):
    cfg = load_config(path)
    assert cfg.CONFIG.MODEL.NAME


def test_there_are_shipped_configs():
    assert glob.glob(os.path.join(ROOT, "configs", "**", "*.yaml"), recursive=True)


def _one_line(err: Exception) -> str:
    msg = str(err)
    assert "\n" not in msg
    return msg


def test_unknown_key_in_yaml_suggests_the_near_miss(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("CONFIG:\n  TRAIN:\n    EPOCH_NUMS: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    msg = _one_line(e.value)
    assert "CONFIG.TRAIN.EPOCH_NUMS" in msg and "did you mean CONFIG.TRAIN.EPOCH_NUM" in msg


def test_unknown_override_key():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["CONFIG.DATA.CLIPLEN", "8"])
    assert "CONFIG.DATA.CLIPLEN" in _one_line(e.value)
    assert "CLIP_LEN" in str(e.value)


def test_wrong_type_is_reported():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["TRAIN.BATCH_SIZE", "eight"])
    assert "CONFIG.TRAIN.BATCH_SIZE" in _one_line(e.value) and "integer" in str(e.value)


@pytest.mark.parametrize("key,value,needle", [
    ("TRAIN.BATCH_SIZE", "0", "CONFIG.TRAIN.BATCH_SIZE"),
    ("TRAIN.LR_POLICY", "Linear", "Cosine, Step"),
    ("DDP_CONFIG.DIST_BACKEND", "mpi", "nccl, gloo, auto"),
    ("DDP_CONFIG.DIST_URL", "127.0.0.1:1234", "tcp://"),
    ("DATA.CROP_SIZE", "300", "SHORT_SIDE_SIZE"),
    ("DATA.TEST_NUM_CROP", "2", "1 or 3"),
])
def test_impossible_values(key, value, needle):
    with pytest.raises(ConfigError) as e:
        load_config(None, [key, value])
    assert needle in _one_line(e.value)


def test_override_parsing_and_int_to_float():
    cfg = load_config(None, ["CONFIG.TRAIN.LR", "1", "DATA.MEAN", "[0.5, 0.5, 0.5]",
                             "MODEL.NAME", "resnet50"])
    assert cfg.CONFIG.TRAIN.LR == 1.0 and isinstance(cfg.CONFIG.TRAIN.LR, float)
    assert cfg.CONFIG.DATA.MEAN == [0.5, 0.5, 0.5]
    assert cfg.CONFIG.MODEL.NAME == "resnet50"


def test_odd_override_list():
    with pytest.raises(ConfigError, match="KEY VALUE pairs"):
        load_config(None, ["TRAIN.LR"])


def test_old_misspelling_is_accepted_with_a_warning(tmp_path, caplog):
    p = tmp_path / "old.yaml"
    p.write_text("DDP_CONFIG:\n  WOLRD_URLS: ['10.0.0.1']\n")
    cfg = load_config(str(p))
    assert cfg.DDP_CONFIG.WORLD_URLS == ["10.0.0.1"]
    assert any("WOLRD_URLS" in r.message for r in caplog.records)


def test_gluoncv_yaml_carries_over(tmp_path):
    p = tmp_path / "gluoncv.yaml"
    p.write_text(
        "DDP_CONFIG:\n  WORLD_SIZE: 1\n  WOLRD_URLS: ['127.0.0.1']\n  DIST_BACKEND: 'nccl'\n"
        "CONFIG:\n  TRAIN:\n    EPOCH_NUM: 196\n    W_DECAY: 1e-4\n"
        "  DATA:\n    CLIP_LEN: 32\n    KEEP_ASPECT_RATIO: False\n    NEW_HEIGHT: 256\n"
        "  LOG:\n    EVAL_DIR: './eval'\n"
    )
    cfg = load_config(str(p))
    assert cfg.CONFIG.TRAIN.EPOCH_NUM == 196 and cfg.CONFIG.TRAIN.W_DECAY == 1e-4


def test_merged_config_round_trips(tmp_path):
    cfg = load_config(None, ["TRAIN.EPOCH_NUM", "3"])
    p = tmp_path / "config.yaml"
    p.write_text(cfg_to_yaml(cfg))
    again = load_config(str(p))
    assert again == cfg
