"""Loading a config: defaults <- YAML file <- command-line ``KEY VALUE`` pairs, then validation.

Unlike a plain yacs merge, every problem is reported as one ``ConfigError`` line that names the key:
unknown keys get a "did you mean", an int where a float is expected is accepted, and keys from
gluoncv.torch YAMLs that zoo does not use are dropped with a warning instead of failing.
"""

from __future__ import annotations

import copy
import difflib
import logging
from typing import Any, Dict, List, Optional, Sequence

import yaml
from yacs.config import CfgNode

from . import version
from .defaults import _C
from .gluoncv import adapt_gluoncv, refuse_in_zoo_file
from .tree import flatten_cfg, parse_literal, to_dict
from .validation import ConfigError, validate_config
from .yaml_files import DuplicateKeyError, read_yaml_with_base

logger = logging.getLogger(__name__)

# Old spellings that still work, with a deprecation warning: old full key -> new full key.
# NEW_LENGTH / NEW_STEP are gluoncv's (MXNet) names of the clip length and the frame stride.
_RENAMED_KEYS = {
    "DDP_CONFIG.WOLRD_URLS": "DDP_CONFIG.WORLD_URLS",
    "CONFIG.DATA.NEW_LENGTH": "CONFIG.DATA.CLIP_LEN",
    "CONFIG.DATA.NEW_STEP": "CONFIG.DATA.FRAME_RATE",
    "CONFIG.MODEL.BN_FROZEN": "CONFIG.MODEL.FREEZE_BN",
}

# gluoncv.torch keys zoo deliberately does not use; they are dropped with a warning so that a
# gluoncv YAML loads. Each value says what zoo does instead. The gluoncv keys zoo does use with
# gluoncv's meaning (NUM_SEGMENT, NUM_CROP, KEEP_ASPECT_RATIO, NEW_HEIGHT/WIDTH, MULTIGRID, LOAD,
# PRETRAINED_PATH, ...) are read by zoo.config.gluoncv before the merge. A key zoo itself uses (one
# in get_cfg()) must never be listed here or in _RENAMED_KEYS: its value would be thrown away
# (tests/test_checkpoint_model.py checks that the lists and the live keys never overlap).
_GLUONCV_UNUSED_KEYS = {
    "CONFIG.LOG.EVAL_DIR": "test results go to BASE_PATH/EXP_NAME",
    "CONFIG.LOG.LEVEL": "the console shows INFO and up; each rank's log file has everything",
    "CONFIG.LOG.LOG_FILENAME": "each rank logs to BASE_PATH/EXP_NAME/log_rank<r>.txt",
    "CONFIG.TRAIN.USE_AMP": "set CONFIG.TRAIN.PRECISION (auto, bf16, fp16, fp32) instead",
    "CONFIG.TRAIN.ADAM_BETA2": "CONFIG.TRAIN.OPTIMIZER AdamW uses betas (0.9, 0.999)",
    "CONFIG.TRAIN.ADAM_EPS": "CONFIG.TRAIN.OPTIMIZER AdamW uses eps 1e-8",
    "CONFIG.MODEL.PRETRAINED_BASE": "2D-inflated starts are the model's inflate_from kwarg "
    "(CONFIG.MODEL.KWARGS); CONFIG.MODEL.PRETRAINED names whole-model weights",
    "CONFIG.MODEL.BN_EVAL": "use CONFIG.MODEL.FREEZE_BN",
    "CONFIG.MODEL.PARTIAL_BN": "use CONFIG.MODEL.FREEZE_BN",
    "CONFIG.MODEL.USE_AFFINE": "BatchNorm layers always have affine parameters",
}


def get_cfg() -> CfgNode:
    """A fresh copy of the defaults (see zoo/config/defaults.py)."""
    return _C.clone()


# String keys that also take a YAML boolean (gluoncv's ``PRETRAINED: True``), stored as text:
# True -> "True" (the architecture's default published weights), False -> "" (random init).
# The "auto"/True/False switches of CONFIG.TRAIN store True and False as "True" and "False".
_SWITCH = {True: "True", False: "False"}
_BOOL_AS_STRING_KEYS = {"CONFIG.MODEL.PRETRAINED": {True: "True", False: ""},
                        "CONFIG.TRAIN.COMPILE": _SWITCH,
                        "CONFIG.TRAIN.CUDNN_BENCHMARK": _SWITCH,
                        "CONFIG.TRAIN.STEM_PAD_CHANNELS": _SWITCH}


def _coerce(value: Any, default: Any, key: str) -> Any:
    """Return ``value`` converted to the type of ``default`` or raise ConfigError."""
    if isinstance(value, bool) and key in _BOOL_AS_STRING_KEYS:
        return _BOOL_AS_STRING_KEYS[key][value]
    if isinstance(value, str) and not isinstance(default, str):
        # YAML reads 1e-4 as a string (YAML 1.1 wants 1.0e-4); decode it like yacs does.
        value = parse_literal(value)
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key} = {value!r} has the wrong type: expected True or False")
    if (isinstance(default, float) and isinstance(value, (int, float))
            and not isinstance(value, bool)):
        return float(value)
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key} = {value!r} has the wrong type: expected an integer")
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)  # a name or tag of digits (EXP_NAME 2024; PRETRAINED 0)
        raise ConfigError(f"{key} = {value!r} has the wrong type: expected a string (quote it: "
                          f"'{value}' in YAML, \"'{value}'\" on the command line)")
    if isinstance(default, (list, tuple)):
        if isinstance(value, (list, tuple)):
            return list(value)
        raise ConfigError(f"{key} = {value!r} has the wrong type: expected a list like [a, b]")
    if isinstance(default, float):
        raise ConfigError(f"{key} = {value!r} has the wrong type: expected a number")
    return value


def _unknown_key(full_key: str, node: CfgNode, prefix: str) -> ConfigError:
    here = [f"{prefix}{k}" for k in node.keys()]
    everything = list(flatten_cfg(_C))
    if not prefix and full_key in _C.CONFIG:  # a section written at the top level
        return ConfigError(f"unknown config key {full_key}; did you mean CONFIG.{full_key} "
                           f"(indent it under CONFIG:)?")
    close = difflib.get_close_matches(full_key.upper(), here + everything, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else f"; keys here: {', '.join(sorted(here))}"
    return ConfigError(f"unknown config key {full_key}{hint}")


def _all_keys(node: CfgNode) -> List[str]:
    """Every full key of ``node`` (tests import this name; new code uses flatten_cfg)."""
    return list(flatten_cfg(node))


def _merge_dict(cfg: CfgNode, data: Dict[str, Any], prefix: str, source: str) -> None:
    if not isinstance(data, dict):
        where = prefix.rstrip(".") or "top level"
        raise ConfigError(f"{source}: {where} must be a mapping of keys")
    for k, v in data.items():
        full_key = f"{prefix}{k}"
        if full_key in _RENAMED_KEYS:
            new = _RENAMED_KEYS[full_key]
            if new.rsplit(".", 1)[1] in data:
                raise ConfigError(
                    f"{source}: sets both {full_key} and {new}, the old and the new spelling of "
                    f"one key: keep {new} alone")
            logger.warning("%s: %s is the old spelling of %s; please rename it", source, full_key,
                           new)
            full_key = new
            k = new.rsplit(".", 1)[1]
        if full_key in _GLUONCV_UNUSED_KEYS:
            logger.warning(
                "%s: ignoring gluoncv key %s (%s)", source, full_key, _GLUONCV_UNUSED_KEYS[full_key]
            )
            continue
        if k not in cfg:
            raise _unknown_key(full_key, cfg, prefix)
        if isinstance(cfg[k], CfgNode):
            _merge_dict(cfg[k], v, f"{full_key}.", source)
        else:
            cfg[k] = _coerce(v, cfg[k], full_key)


def _set_key(cfg: CfgNode, full_key: str, value: Any) -> None:
    full_key = _RENAMED_KEYS.get(full_key, full_key)
    parts = full_key.split(".")
    node = cfg
    for i, part in enumerate(parts):
        if not isinstance(node, CfgNode) or part not in node:
            raise _unknown_key(full_key, node if isinstance(node, CfgNode) else cfg, "")
        if i < len(parts) - 1:
            node = node[part]
    if isinstance(node[parts[-1]], CfgNode):
        raise ConfigError(f"{full_key} is a section, not a key; give one of its keys")
    node[parts[-1]] = _coerce(value, node[parts[-1]], full_key)


def merge_overrides(cfg: CfgNode, opts: Sequence[str]) -> None:
    """Apply ``["KEY", "VALUE", ...]`` command-line overrides (yacs merge_from_list semantics)."""
    glued = next((o for o in opts[0::2] if isinstance(o, str) and "=" in o
                  and not o.startswith(("[", "(", "{", "'", '"'))), None)
    if glued is not None:
        key, _, value = glued.partition("=")
        raise ConfigError(f"override {glued!r}: write KEY VALUE with a space, not =: "
                          f"{key} {value}")
    if len(opts) % 2:
        raise ConfigError(
            f"overrides must be KEY VALUE pairs; {opts[-1]!r} has no value after it"
        )
    for key, raw in zip(opts[0::2], opts[1::2]):
        if key == "VERSION":
            raise ConfigError("VERSION says which key names a YAML file uses; it cannot be "
                              "overridden on the command line")
        if key.startswith("CONFIG.") or key.startswith("DDP_CONFIG."):
            full_key = key
        else:
            # Shorthand: "TRAIN.EPOCH_NUM 2" means "CONFIG.TRAIN.EPOCH_NUM 2".
            full_key = f"CONFIG.{key}"
        _set_key(cfg, full_key, parse_literal(raw) if isinstance(raw, str) else raw)


def _refuse_foreign(data: Any, source: str) -> None:
    """Stop with one line when the YAML is another framework's config that needs converting."""
    from .convert_pyslowfast import is_pyslowfast_yaml

    if is_pyslowfast_yaml(data):
        raise ConfigError(
            f"{source} is a PySlowFast config; convert it with python tools/convert_config.py "
            f"--from pyslowfast {source} OUT.yaml"
        )


def load_config(
    config_file: Optional[str] = None, opts: Optional[Sequence[str]] = None, validate: bool = True
) -> CfgNode:
    """Defaults <- ``config_file`` (over its ``_BASE_`` files) <- ``opts``, validated, frozen.

    Args:
        config_file: YAML path, or None for the defaults alone. A ``_BASE_: other.yaml`` in it
            is loaded first and the file merges over it (see zoo.config.yaml_files); a file of
            an older ``VERSION`` is upgraded (see zoo.config.version).
        opts: Flat ``[KEY, VALUE, ...]`` overrides; ``CONFIG.`` may be left off the key.
        validate: Check values (see zoo.config.validation).

    Raises:
        ConfigError: one line naming the offending key and what is allowed.
    """
    cfg = get_cfg()
    cfg.VERSION = version.CURRENT_VERSION
    if config_file:
        declared: List[bool] = []  # per file read: whether it declares a VERSION
        own: List[tuple] = []  # per file read, the named one first: (path, its own mapping)

        def upgrade(d: Any, path: str) -> Any:
            declared.append(isinstance(d, dict) and "VERSION" in d)
            own.append((path, copy.deepcopy(d)))  # (merging later changes a base's mapping)
            return version.upgrade_config(d, path)

        try:
            data = read_yaml_with_base(config_file, each=upgrade)
        except DuplicateKeyError as e:
            _refuse_foreign(e.data, e.path)  # a PySlowFast file: the line names the converter
            raise
        _refuse_foreign(data, config_file)
        for k, (path, mapping) in enumerate(own):
            if k < len(own) - 1 or declared[k]:  # it has a _BASE_ (a file read after it) or a
                refuse_in_zoo_file(mapping, path)  # VERSION: a zoo file
        zoo_file = len(declared) > 1 or any(declared)  # a _BASE_ or a VERSION: gluoncv has none
        _merge_dict(cfg, adapt_gluoncv(data, config_file, zoo_file), "", config_file)
    if opts:
        merge_overrides(cfg, list(opts))
    if validate:
        validate_config(cfg)
    cfg.freeze()
    return cfg


def cfg_to_yaml(cfg: CfgNode) -> str:
    """The config as YAML text (what is written to the output folder as config.yaml)."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=None)
