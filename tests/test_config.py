"""Config: defaults are documented, shipped YAMLs load, bad input fails in one line naming
the key."""

import glob
import os
import re

import pytest

from zoo.config import ConfigError, cfg_to_yaml, flatten_cfg, get_cfg, load_config

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
    for key in flatten_cfg(get_cfg()):
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
    ("TRAIN.FIND_UNUSED_PARAMETERS", "1", "CONFIG.TRAIN.FIND_UNUSED_PARAMETERS"),
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


# ----------------------------------------------------------------- tree helpers (zoo.config.tree)
def test_flatten_cfg_walks_nodes_and_dicts_alike():
    nested = {"A": {"B": 1, "C": {"D": (1, 2)}, "E": {}}, "F": "x"}
    assert flatten_cfg(nested) == {"A.B": 1, "A.C.D": [1, 2], "F": "x"}
    flat = flatten_cfg(get_cfg())
    assert flat["CONFIG.TRAIN.LR"] == get_cfg().CONFIG.TRAIN.LR
    assert flat["DDP_CONFIG.WORLD_URLS"] == ["127.0.0.1"] and "CONFIG.TRAIN" not in flat
    # Flattening a flat mapping changes nothing.
    assert flatten_cfg(flat) == flat


def test_diff_cfg_reports_changed_missing_and_ignored_keys():
    from zoo.config import diff_cfg

    old = {"CONFIG": {"TRAIN": {"LR": 0.1, "EPOCH_NUM": 5}, "LOG": {"EXP_NAME": "a"}}}
    new = {"CONFIG": {"TRAIN": {"LR": 0.2, "EPOCH_NUM": 5, "NEW": 1}, "LOG": {"EXP_NAME": "b"}}}
    assert diff_cfg(old, new) == [("CONFIG.LOG.EXP_NAME", "a", "b"), ("CONFIG.TRAIN.LR", 0.1, 0.2),
                                  ("CONFIG.TRAIN.NEW", "<missing>", 1)]
    assert diff_cfg(old, new, ignore=("CONFIG.LOG.", "CONFIG.TRAIN.N"), missing=None) == [
        ("CONFIG.TRAIN.LR", 0.1, 0.2)]


def test_parse_literal_and_lookup_key():
    from zoo.config import lookup_key, parse_literal

    assert parse_literal("8") == 8 and parse_literal("False") is False
    assert parse_literal("[0.5, 1]") == [0.5, 1] and parse_literal("1e-4") == 0.0001
    assert parse_literal("resnet50") == "resnet50" and parse_literal("a b") == "a b"
    cfg = get_cfg()
    assert lookup_key(cfg, "CONFIG.DATA.CLIP_LEN") == 32
    assert lookup_key({"A": {"B": 2}}, "A.C", None) is None
    with pytest.raises(KeyError):
        lookup_key(cfg, "CONFIG.DATA.NOPE")


# ------------------------------------------------------------------------------------- _BASE_
def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_base_is_loaded_first_and_the_file_merges_over_it(tmp_path):
    _write(tmp_path / "bases" / "root.yaml",
           "CONFIG:\n  TRAIN:\n    LR: 0.5\n    EPOCH_NUM: 7\n  DATA:\n    MEAN: [0.1, 0.2, 0.3]\n")
    _write(tmp_path / "bases" / "mid.yaml",
           "_BASE_: root.yaml\nCONFIG:\n  TRAIN:\n    EPOCH_NUM: 9\n"
           "  DATA:\n    MEAN: [0.4, 0.4, 0.4]\n")
    top = _write(tmp_path / "sub" / "top.yaml",
                 "_BASE_: ../bases/mid.yaml\nCONFIG:\n  TRAIN:\n    BATCH_SIZE: 3\n")
    cfg = load_config(top)
    # LR from the root, EPOCH_NUM from the middle file, BATCH_SIZE from the top; lists replace.
    assert (cfg.CONFIG.TRAIN.LR, cfg.CONFIG.TRAIN.EPOCH_NUM, cfg.CONFIG.TRAIN.BATCH_SIZE) == (
        0.5, 9, 3)
    assert cfg.CONFIG.DATA.MEAN == [0.4, 0.4, 0.4]
    text = cfg_to_yaml(cfg)
    assert "_BASE_" not in text
    written = _write(tmp_path / "out" / "config.yaml", text)
    assert load_config(written) == cfg


def test_absolute_base_path(tmp_path):
    base = _write(tmp_path / "a" / "base.yaml", "CONFIG:\n  SEED: 42\n")
    top = _write(tmp_path / "b" / "top.yaml", f"_BASE_: {base}\n")
    assert load_config(top).CONFIG.SEED == 42


def test_base_cycle_is_one_line_naming_the_files(tmp_path):
    a = _write(tmp_path / "a.yaml", "_BASE_: b.yaml\n")
    _write(tmp_path / "b.yaml", "_BASE_: a.yaml\n")
    with pytest.raises(ConfigError) as e:
        load_config(a)
    msg = _one_line(e.value)
    assert "include each other" in msg and "a.yaml" in msg and "b.yaml" in msg
    selfish = _write(tmp_path / "self.yaml", "_BASE_: ./self.yaml\n")
    with pytest.raises(ConfigError, match="include each other"):
        load_config(selfish)


@pytest.mark.parametrize("base,needle", [("missing.yaml", "does not exist"),
                                         ("[a.yaml, b.yaml]", "expected the path of one YAML"),
                                         ("''", "expected the path of one YAML")])
def test_bad_base_is_one_line(tmp_path, base, needle):
    top = _write(tmp_path / "top.yaml", f"_BASE_: {base}\n")
    with pytest.raises(ConfigError) as e:
        load_config(top)
    assert needle in _one_line(e.value) and "top.yaml" in str(e.value)


def test_gluoncv_base_keeps_its_meaning(tmp_path):
    # The gluoncv markers (WOLRD_URLS, EVAL_DIR) are in the base; the merged file reads as gluoncv.
    _write(tmp_path / "gluoncv.yaml",
           "DDP_CONFIG:\n  WOLRD_URLS: ['10.0.0.1']\nCONFIG:\n  DATA:\n    SHORT_SIDE_SIZE: 256\n"
           "  LOG:\n    EVAL_DIR: './eval'\n")
    top = _write(tmp_path / "mine.yaml",
                 "_BASE_: gluoncv.yaml\nCONFIG:\n  DATA:\n    SHORT_SIDE_SIZE: 320\n")
    cfg = load_config(top)
    assert cfg.DDP_CONFIG.WORLD_URLS == ["10.0.0.1"]
    assert cfg.CONFIG.DATA.KEEP_ASPECT_RATIO is False  # gluoncv's default
    assert cfg.CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE == [320, 400]  # from the merged SHORT_SIDE_SIZE


def test_pyslowfast_file_with_a_base_is_recognised_and_converts(tmp_path):
    from zoo.config.convert_pyslowfast import write_converted

    _write(tmp_path / "base.yaml", "TRAIN:\n  ENABLE: True\nMODEL:\n  ARCH: slowfast\n"
           "SOLVER:\n  BASE_LR: 0.2\n")
    top = _write(tmp_path / "SLOWFAST.yaml", "_BASE_: base.yaml\nSOLVER:\n  MAX_EPOCH: 7\n")
    with pytest.raises(ConfigError, match="is a PySlowFast config"):
        load_config(top)
    out = tmp_path / "zoo.yaml"
    write_converted(top, str(out))
    cfg = load_config(str(out))
    assert cfg.CONFIG.TRAIN.LR == 0.2 and cfg.CONFIG.TRAIN.EPOCH_NUM == 7


FLAT = os.path.join(ROOT, "tests", "data", "configs_flat")


@pytest.mark.parametrize("name", sorted(os.path.relpath(p, FLAT) for p in glob.glob(
    os.path.join(FLAT, "*", "*.yaml"))))
def test_shipped_configs_load_as_before_their_base_files(name):
    """tests/data/configs_flat holds the shipped YAMLs as they were before configs/_base_/: the
    converted files must load to exactly the same config."""
    new = load_config(os.path.join(ROOT, "configs", name))
    old = load_config(os.path.join(FLAT, name))
    assert new == old
    assert "_BASE_" in open(os.path.join(ROOT, "configs", name), encoding="utf-8").read()


def test_every_flat_copy_has_its_shipped_config():
    shipped = {os.path.relpath(p, os.path.join(ROOT, "configs"))
               for p in glob.glob(os.path.join(ROOT, "configs", "*", "*.yaml"))
               if "_base_" not in p}
    flat = glob.glob(os.path.join(FLAT, "*", "*.yaml"))
    # Configs added after the base files came in have no flat copy: nothing to compare them with.
    assert {os.path.relpath(p, FLAT) for p in flat} <= shipped


# ------------------------------------------------------------------------------------ VERSION
def test_version_defaults_to_the_current_one():
    from zoo.config import version

    assert get_cfg().VERSION == version.CURRENT_VERSION
    assert load_config(None).VERSION == version.CURRENT_VERSION
    assert cfg_to_yaml(load_config(None)).startswith(f"VERSION: {version.CURRENT_VERSION}\n")


@pytest.fixture
def version_2(monkeypatch):
    """Pretend zoo is at VERSION 2, having renamed CONFIG.TRAIN.BASE_LR (made up) to LR."""
    from zoo.config import version

    monkeypatch.setattr(version, "CURRENT_VERSION", 2)
    monkeypatch.setattr(version, "UPGRADES", {1: {"CONFIG.TRAIN.BASE_LR": "CONFIG.TRAIN.LR",
                                                  "CONFIG.OLD_SEED": "CONFIG.SEED"}})


def test_older_version_is_upgraded_with_one_line(tmp_path, caplog, version_2):
    p = _write(tmp_path / "old.yaml", "VERSION: 1\nCONFIG:\n  OLD_SEED: 3\n  TRAIN:\n"
               "    BASE_LR: 0.7\n")
    cfg = load_config(p)
    assert cfg.CONFIG.TRAIN.LR == 0.7 and cfg.CONFIG.SEED == 3 and cfg.VERSION == 2
    lines = [r.getMessage() for r in caplog.records if "VERSION" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "CONFIG.TRAIN.BASE_LR -> CONFIG.TRAIN.LR" in lines[0]
    assert "CONFIG.OLD_SEED -> CONFIG.SEED" in lines[0]
    # A file without VERSION was written before the key existed: VERSION 1.
    q = _write(tmp_path / "unversioned.yaml", "CONFIG:\n  TRAIN:\n    BASE_LR: 0.3\n")
    assert load_config(q).CONFIG.TRAIN.LR == 0.3
    # Written at VERSION 2, the old name is an unknown key.
    r = _write(tmp_path / "new.yaml", "VERSION: 2\nCONFIG:\n  TRAIN:\n    BASE_LR: 0.3\n")
    with pytest.raises(ConfigError, match="unknown config key CONFIG.TRAIN.BASE_LR"):
        load_config(r)


def test_each_base_file_is_upgraded_from_its_own_version(tmp_path, version_2):
    _write(tmp_path / "old_base.yaml", "CONFIG:\n  TRAIN:\n    BASE_LR: 0.7\n")
    top = _write(tmp_path / "top.yaml", "VERSION: 2\n_BASE_: old_base.yaml\nCONFIG:\n  SEED: 5\n")
    cfg = load_config(top)
    assert cfg.CONFIG.TRAIN.LR == 0.7 and cfg.CONFIG.SEED == 5


def test_old_and_new_name_together_is_refused(tmp_path, version_2):
    p = _write(tmp_path / "both.yaml", "VERSION: 1\nCONFIG:\n  TRAIN:\n    BASE_LR: 0.7\n"
               "    LR: 0.1\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "CONFIG.TRAIN.BASE_LR" in _one_line(e.value) and "keep CONFIG.TRAIN.LR" in str(e.value)


@pytest.mark.parametrize("value,needle", [("99", "newer than this zoo understands"),
                                          ("0", "expected an integer >= 1"),
                                          ("'1'", "expected an integer >= 1")])
def test_unknown_version_is_refused_in_one_line(tmp_path, value, needle):
    p = _write(tmp_path / "v.yaml", f"VERSION: {value}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert needle in _one_line(e.value) and "v.yaml" in str(e.value)


def test_version_cannot_be_overridden():
    with pytest.raises(ConfigError, match="VERSION"):
        load_config(None, ["VERSION", "2"])


def test_resume_check_reads_an_older_checkpoint_config_with_new_names(version_2):
    import yaml

    from zoo.train.checkpoint import config_differences

    cfg = load_config(None, ["TRAIN.LR", "0.7"])
    saved = yaml.safe_load(cfg_to_yaml(cfg))
    saved["VERSION"] = 1
    saved["CONFIG"]["TRAIN"]["BASE_LR"] = saved["CONFIG"]["TRAIN"].pop("LR")
    assert config_differences(yaml.safe_dump(saved), cfg) == []
    saved["CONFIG"]["TRAIN"]["BASE_LR"] = 0.1
    assert config_differences(yaml.safe_dump(saved), cfg) == ["CONFIG.TRAIN.LR: 0.1 -> 0.7"]
    # A checkpoint written before VERSION existed has no VERSION key: no difference for that.
    del saved["VERSION"]
    saved["CONFIG"]["TRAIN"]["BASE_LR"] = 0.7
    assert config_differences(yaml.safe_dump(saved), cfg) == []


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path, encoding):
    path = tmp_path / "x.yaml"
    path.write_bytes("# café\r\nCONFIG:\r\n  TRAIN:\r\n    EPOCH_NUM: 3\r\n".encode(encoding))
    assert load_config(str(path), []).CONFIG.TRAIN.EPOCH_NUM == 3


@pytest.mark.parametrize("text, says", [
    ("CONFIG:\n  TRAIN:\n    EPOCH_NUM: 3  # café\n".encode("latin-1"),
     "line 3: not UTF-8 text (byte 0xe9)"),
    (b"CONFIG:\n  TRAIN:\n    EPOCH_NUM: 3\x07\n",
     "line 3: the control character 0x07 is not allowed"),
])
def test_a_config_that_is_not_text_yaml_reads_stops_with_one_line(tmp_path, text, says):
    path = tmp_path / "x.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as e:
        load_config(str(path), [])
    assert str(e.value).startswith(f"{path}: {says}") and "\n" not in str(e.value)


@pytest.mark.parametrize("text, says", [
    ("CONFIG:\n  TRAIN:\n    EPOCH_NUM: 3\nCONFIG:\n  DATA:\n    CLIP_LEN: 4\n",
     "line 4: 'CONFIG' is set twice in one section (first on line 1)"),
    ("CONFIG:\n  TRAIN:\n    EPOCH_NUM: 3\n    LR: 0.1\n    EPOCH_NUM: 5\n",
     "line 5: 'EPOCH_NUM' is set twice in one section (first on line 3)"),
])
def test_a_key_set_twice_in_a_config_stops_with_one_line(tmp_path, text, says):
    """YAML's loaders keep the last of a duplicated key: a section written twice lost all of the
    first without a word."""
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(str(path), [])
    assert str(e.value).startswith(f"{path} {says}") and "\n" not in str(e.value)
    # The same key in two sections is no duplicate.
    path.write_text("CONFIG:\n  TRAIN:\n    LR: 0.1\n  VAL:\n    FREQ: 2\n")
    load_config(str(path), [])


def test_an_mmaction2_python_config_stops_with_one_line_naming_what_to_do(tmp_path):
    """MMAction2's configs are Python (mmengine); parsed as YAML one is a plain string."""
    path = tmp_path / "slowfast_r50_8xb8-4x16x1-256e_kinetics400-rgb.py"
    path.write_text("_base_ = ['../../_base_/models/slowfast_r50.py']\n"
                    "train_dataloader = dict(batch_size=8, num_workers=8)\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(path), [])
    message = str(e.value)
    assert message.startswith(f"{path} is a Python file, not a YAML config") and "\n" not in message
    assert "--from mmaction2" in message and "docs/migrating.md" in message


def test_old_spelling_in_a_zoo_file_keeps_zoo_meaning(tmp_path, caplog):
    """WOLRD_URLS is gluoncv's spelling, but in a file with a _BASE_ or a VERSION (gluoncv has
    neither) it is only a misspelling: zoo's defaults and the base's values stay."""
    _write(tmp_path / "base.yaml",
           "CONFIG:\n  TRAIN:\n    USE_WARMUP: True\n    WARMUP_START_LR: 0.0003\n    LR: 0.1\n")
    spelt = "DDP_CONFIG:\n  WOLRD_URLS: ['10.0.0.1']\nCONFIG:\n  DATA:\n    CLIP_LEN: 8\n"
    for name, text in (("based.yaml", "_BASE_: base.yaml\n" + spelt),
                       ("versioned.yaml", "VERSION: 1\n" + spelt)):
        cfg = load_config(_write(tmp_path / name, text))
        assert cfg.DDP_CONFIG.WORLD_URLS == ["10.0.0.1"]
        assert cfg.CONFIG.DATA.KEEP_ASPECT_RATIO is True  # zoo's default, not gluoncv's
        if name == "based.yaml":
            assert cfg.CONFIG.TRAIN.WARMUP_START_LR == 0.0003
    assert not any("gluoncv.torch config" in r.getMessage() for r in caplog.records)
    # Without either, the file reads as gluoncv's, and the log line says why and how not to.
    caplog.clear()
    with caplog.at_level("INFO", logger="zoo"):
        cfg = load_config(_write(tmp_path / "plain.yaml", spelt))
    assert cfg.CONFIG.DATA.KEEP_ASPECT_RATIO is False
    line = next(r.getMessage() for r in caplog.records if "gluoncv.torch config" in r.getMessage())
    assert "it has DDP_CONFIG.WOLRD_URLS" in line and "no KEEP_ASPECT_RATIO -> False" in line
    assert "rename WOLRD_URLS to WORLD_URLS" in line



@pytest.mark.parametrize("order", ["old first", "new first"])
def test_a_key_and_its_old_spelling_together_stop_with_one_line(tmp_path, order):
    """NEW_LENGTH and CLIP_LEN in one section: whichever came last won, without a word."""
    lines = ["    CLIP_LEN: 16\n", "    NEW_LENGTH: 8\n"]
    if order == "old first":
        lines.reverse()
    path = _write(tmp_path / "x.yaml", "CONFIG:\n  DATA:\n" + "".join(lines))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "sets both CONFIG.DATA.NEW_LENGTH and CONFIG.DATA.CLIP_LEN" in str(e.value)
    assert "keep CONFIG.DATA.CLIP_LEN alone" in str(e.value)


@pytest.mark.parametrize("text, key", [
    ("  TRAIN:\n    LR_POLICY: Step\n    LR_MILESTONE: [30 60]\n", "CONFIG.TRAIN.LR_MILESTONE"),
    ("  TRAIN:\n    LR_MILESTONE: [20, 10]\n", "CONFIG.TRAIN.LR_MILESTONE"),
    ("  DATA:\n    TRAIN_SHORT_SIDE_RANGE: [64, null]\n", "CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE"),
    ("  DATA:\n    COLOR_JITTER: [x, 0, 0, 0]\n", "CONFIG.DATA.COLOR_JITTER"),
    ("  DATA:\n    MEAN: [a, b, c]\n", "CONFIG.DATA.MEAN"),
    ("  TRAIN:\n    MULTIGRID_LONG_CYCLE_FACTORS: [[a, b]]\n",
     "CONFIG.TRAIN.MULTIGRID_LONG_CYCLE_FACTORS"),
])
def test_list_entries_of_another_type_stop_with_one_line(tmp_path, text, key):
    """A missing comma or a word in a list of numbers: an internal TypeError (or a failure later
    in the run) before; now the key's one line."""
    path = _write(tmp_path / "x.yaml", "CONFIG:\n" + text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{key} = ") and "is not allowed: expected" in str(e.value)


def test_segments_without_tsn_sampling_stop_with_one_line():
    """NUM_SEGMENT 3 with the default dense sampling was ignored without a word."""
    with pytest.raises(ConfigError, match=r"^CONFIG.DATA.NUM_SEGMENT = 3 is read only by "
                                          r"CONFIG.DATA.SAMPLING tsn, and SAMPLING is 'dense'"):
        load_config(None, ["DATA.NUM_SEGMENT", "3"])
    assert load_config(None, ["DATA.NUM_SEGMENT", "3", "DATA.SAMPLING", "tsn"]).CONFIG.DATA.\
        NUM_SEGMENT == 3


def test_command_line_slips_get_the_fix_in_their_line(tmp_path):
    """KEY=VALUE, a lower-case key, a section at the top level, digits for a name."""
    with pytest.raises(ConfigError, match=r"write KEY VALUE with a space, not =: "
                                          r"TRAIN.EPOCH_NUM 2$"):
        load_config(None, ["TRAIN.EPOCH_NUM=2"])
    with pytest.raises(ConfigError, match=r"did you mean CONFIG.TRAIN.EPOCH_NUM\?$"):
        load_config(None, ["train.epoch_num", "2"])
    with pytest.raises(ConfigError, match=r"did you mean CONFIG.TRAIN \(indent it under CONFIG:"):
        load_config(_write(tmp_path / "x.yaml", "TRAIN:\n  EPOCH_NUM: 3\n"))
    cfg = load_config(None, ["LOG.EXP_NAME", "2024", "MODEL.PRETRAINED", "0"])
    assert cfg.CONFIG.LOG.EXP_NAME == "2024" and cfg.CONFIG.MODEL.PRETRAINED == "0"
    with pytest.raises(ConfigError, match=r"\"'1.5'\" on the command line"):
        load_config(None, ["LOG.EXP_NAME", "1.5"])


def test_a_gluoncv_only_key_in_a_zoo_file_stops_with_one_line(tmp_path, caplog):
    """DATA.NUM_CROP beside a _BASE_ turned the whole file into a gluoncv one (frames squashed,
    warmup from 0) with a log line blaming WOLRD_URLS, which the file did not have."""
    _write(tmp_path / "base.yaml", "CONFIG:\n  TRAIN:\n    LR: 0.1\n")
    path = _write(tmp_path / "x.yaml", "_BASE_: base.yaml\nCONFIG:\n  DATA:\n    NUM_CROP: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "CONFIG.DATA.NUM_CROP is a gluoncv.torch key" in str(e.value)
    assert "has a _BASE_ or a VERSION" in str(e.value) and "\n" not in str(e.value)
    # Named as the _BASE_, a gluoncv file keeps gluoncv's meaning (test above).
    # A gluoncv file (neither) with both kinds of marker: the log names its gluoncv-only keys.
    with caplog.at_level("INFO", logger="zoo"):
        load_config(_write(tmp_path / "g.yaml", "DDP_CONFIG:\n  WOLRD_URLS: ['a']\nCONFIG:\n"
                                                "  DATA:\n    NUM_CROP: 1\n"))
    line = next(r.getMessage() for r in caplog.records if "gluoncv.torch config" in r.getMessage())
    assert "it has gluoncv-only keys" in line and "rename WOLRD_URLS" not in line


def test_find_unused_parameters_is_off_by_default_and_reaches_ddp():
    from zoo.train.model_setup import ddp_options

    assert ddp_options(get_cfg())["find_unused_parameters"] is False
    cfg = load_config(None, ["TRAIN.FIND_UNUSED_PARAMETERS", "True"])
    assert ddp_options(cfg)["find_unused_parameters"] is True
