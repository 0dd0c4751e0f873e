"""Testing and prediction build the model a checkpoint holds, whatever the config says.

A checkpoint records the config it was trained with (``cfg``, YAML text). Its model name, builder
kwargs and class count define the weights, so they win over the config given to
``tools/test_ddp.py`` / ``tools/predict.py`` (one warning line names what differs): a README-style
run whose YAML says 5 classes but was trained with ``DATA.NUM_CLASSES 3`` on the command line
tests as trained; the ``EXTRA_MODULES`` it records are imported when its model name is not
registered. ``MODEL.PRETRAINED`` is never loaded: the checkpoint has every weight, and the
file a fine-tuned run started from may be long gone. A checkpoint without a recorded config gets
its class count from its classifier's shape.

A converted checkpoint (``tools/convert_checkpoint.py``) records the model's name, kwargs and
class count but no clip: :func:`checkpoint_clip` gives the clip its kwargs build the model for
(``frames`` / ``crop_size``), else the model's published input (its facts), and
:func:`warn_input_differences` compares a config's clip with the one its kwargs give.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch.nn as nn

from ..config import lookup_key
from ..models import build_model, parse_model_kwargs
from ..models.classifier import head_keys
from ..models.weights.convert.common import strip_wrappers
from ..utils.checkpoint_io import CheckpointError, load_checkpoint, recorded_config

logger = logging.getLogger("zoo")

# The config keys that decide the weights' shapes, in the order they are reported.
MODEL_KEYS = ("CONFIG.MODEL.NAME", "CONFIG.MODEL.KWARGS", "CONFIG.DATA.NUM_CLASSES")

# The config keys that decide what a clip the model sees looks like. Testing at other values is
# allowed (a longer clip, another crop) but is named in a warning: a run trained with command-line
# overrides and tested with its YAML alone would otherwise be tested on other clips unawares.
INPUT_KEYS = ("CONFIG.DATA.CLIP_LEN", "CONFIG.DATA.FRAME_RATE", "CONFIG.DATA.SAMPLING",
              "CONFIG.DATA.NUM_SEGMENT", "CONFIG.DATA.CROP_SIZE", "CONFIG.DATA.SHORT_SIDE_SIZE",
              "CONFIG.DATA.KEEP_ASPECT_RATIO", "CONFIG.DATA.MEAN", "CONFIG.DATA.STD")
# Also compared, as the side it resolves to (0 = SHORT_SIDE_SIZE).
_TEST_SIDE = "CONFIG.DATA.TEST_SHORT_SIDE_SIZE"

# Builder kwargs that fix the clip a model is built for (MViT's and VideoMAE's position tables),
# as the model-facts keys of that clip and the config keys that set it.
_CLIP_KWARGS = (("frames", "input_frames", "CONFIG.DATA.CLIP_LEN"),
                ("crop_size", "crop_size", "CONFIG.DATA.CROP_SIZE"))


def clip_of_kwargs(kwargs: Optional[Dict[str, Any]]) -> Dict[str, int]:
    """The clip builder ``kwargs`` build a model for, as model-facts keys (``input_frames``,
    ``crop_size``): those of ``frames`` / ``crop_size`` it gives as positive integers."""
    clip = {}
    for kwarg, fact, _ in _CLIP_KWARGS:
        value = (kwargs or {}).get(kwarg)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            clip[fact] = value
    return clip


def _recorded_kwargs(saved: Dict[str, Any]) -> Dict[str, Any]:
    pairs = lookup_key(saved, "CONFIG.MODEL.KWARGS", None) or []
    try:
        return parse_model_kwargs(list(pairs))
    except ValueError:  # an odd list: building the model names it
        return {}


def records_clip(state: Dict[str, Any]) -> bool:
    """Whether the checkpoint's config records the clip it was trained on (a zoo run's does; a
    converted checkpoint's records only the model)."""
    saved = recorded_config(state)
    return any(lookup_key(saved, key, None) is not None
               for key in ("CONFIG.DATA.CLIP_LEN", "CONFIG.DATA.CROP_SIZE"))


def checkpoint_clip(state: Dict[str, Any]) -> Dict[str, Any]:
    """The clip settings of a checkpoint whose config records none (:func:`records_clip` False),
    as config keys: ``CLIP_LEN`` / ``CROP_SIZE`` from its MODEL.KWARGS ``frames`` /
    ``crop_size``, else from the model's facts (its published input), with the facts' frame
    stride (``FRAME_RATE``, or TSN's segments) and a test short side equal to the crop (the
    test crops cover the frame's short side). ``{}`` for a checkpoint that records its clip; a
    key zoo cannot know (a model without facts, kwargs without ``frames``) is left out."""
    from ..models import MODEL_REGISTRY, model_facts

    if records_clip(state):
        return {}
    saved = recorded_config(state)
    name = lookup_key(saved, "CONFIG.MODEL.NAME", None)
    facts = model_facts(name) if isinstance(name, str) and name in MODEL_REGISTRY else {}
    built = clip_of_kwargs(_recorded_kwargs(saved))
    clip: Dict[str, Any] = {}
    for _, fact, key in _CLIP_KWARGS:
        value = built.get(fact) or facts.get(fact)
        if isinstance(value, int) and value > 0:
            clip[key] = value
    if "CONFIG.DATA.CLIP_LEN" in clip and facts.get("sampling") == "segments":
        clip.update({"CONFIG.DATA.SAMPLING": "tsn", "CONFIG.DATA.CLIP_LEN": 1,
                     "CONFIG.DATA.NUM_SEGMENT": clip["CONFIG.DATA.CLIP_LEN"]})
    elif facts.get("sampling_stride"):
        clip["CONFIG.DATA.FRAME_RATE"] = int(facts["sampling_stride"])
    if "CONFIG.DATA.CROP_SIZE" in clip:
        clip["CONFIG.DATA.SHORT_SIDE_SIZE"] = clip["CONFIG.DATA.CROP_SIZE"]
    return clip


def saved_model_keys(state: Dict[str, Any]) -> Dict[str, Any]:
    """The MODEL_KEYS values recorded in the checkpoint's config (those it records)."""
    saved = recorded_config(state)
    found = {key: lookup_key(saved, key, None) for key in MODEL_KEYS}
    return {key: value for key, value in found.items() if value is not None}


def read_zoo_run(path: Any) -> Optional[Dict[str, Any]]:
    """The contents of ``path`` when it is a checkpoint a zoo run (or the converter) wrote:
    weights and the config they were built with. None for anything else (published weights,
    safetensors, tags, URLs, files that do not load), which the weights loader reads and
    reports on."""
    from ..models.weights.convert.common import is_safetensors

    if not isinstance(path, str) or not os.path.isfile(path) or is_safetensors(path):
        return None
    try:
        # A look with the tensors mapped, not read: another project's file is read once, when
        # the weights loader loads it. A zoo run's is then read in full: the weights used come
        # from torch's full reader, which checks each tensor's record size (a mapped load not).
        state = load_checkpoint(path, mmap=True)
    except CheckpointError:
        return None
    if isinstance(state, dict) and isinstance(state.get("model"), dict) and state.get("cfg"):
        return load_checkpoint(path)
    return None


def warn_input_differences(cfg, state: Dict[str, Any], source: str) -> List[str]:
    """Log one warning naming the :data:`INPUT_KEYS` whose values in ``cfg`` differ from those
    the checkpoint was trained with (those it records); returns the keys."""
    saved = recorded_config(state)
    trained = {key: lookup_key(saved, key, None) for key in INPUT_KEYS}
    if not records_clip(state):  # a converted checkpoint: the clip its kwargs build it for
        built = clip_of_kwargs(_recorded_kwargs(saved))
        trained.update({key: built[fact] for _, fact, key in _CLIP_KWARGS if fact in built})
    differ = [key for key in INPUT_KEYS
              if trained[key] is not None and _norm(trained[key]) != _norm(lookup_key(cfg, key))]
    values = {key: (lookup_key(cfg, key), trained[key]) for key in differ}
    # The test short side follows SHORT_SIDE_SIZE unless set: compare the sides used, and only
    # where one is set (a differing SHORT_SIDE_SIZE alone is named above).
    now_side, then_side = _test_short_side(cfg), _test_short_side(saved)
    if then_side is not None and now_side != then_side and (
            lookup_key(cfg, _TEST_SIDE) or lookup_key(saved, _TEST_SIDE, 0)):
        differ.append(_TEST_SIDE)
        values[_TEST_SIDE] = (now_side, then_side)
    if differ:
        what = ", ".join(f"{k.split('.')[-1]} {values[k][0]!r} (trained: {values[k][1]!r})"
                         for k in differ)
        logger.warning("%s was trained on other clips; this run uses CONFIG.DATA %s: give the "
                       "training values (e.g. --config-file with the run's config.yaml) to "
                       "test as trained", source, what)
    return differ


def _test_short_side(node) -> Optional[int]:
    """The short side test clips are resized to (None when the config records neither key)."""
    side = lookup_key(node, _TEST_SIDE, 0) or lookup_key(node, "CONFIG.DATA.SHORT_SIDE_SIZE", None)
    return None if side is None else int(side)


def _with(cfg, values: Dict[str, Any]):
    new = cfg.clone()
    new.defrost()
    for key, value in values.items():
        node = new
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = list(value) if isinstance(value, (list, tuple)) else value
    new.freeze()
    return new


def config_for_checkpoint(cfg, state: Dict[str, Any], source: str):
    """``cfg`` with the checkpoint's model name, kwargs and class count and no MODEL.PRETRAINED.

    Logs one warning naming each key whose value the checkpoint overrides. NUM_CLASSES 0 in the
    config ("count them") takes the checkpoint's count without a warning.
    """
    saved = saved_model_keys(state)
    now = {key: lookup_key(cfg, key) for key in MODEL_KEYS}
    differ = {k: v for k, v in saved.items() if _norm(v) != _norm(now[k])}
    quiet = {k for k in differ if k == "CONFIG.DATA.NUM_CLASSES" and now[k] == 0}
    loud = [k for k in differ if k not in quiet]
    if loud:
        what = ", ".join(f"{k} {differ[k]!r} (the config says {now[k]!r})" for k in loud)
        logger.warning("%s was trained with %s; using the checkpoint's values", source, what)
    return _with(cfg, {**differ, "CONFIG.MODEL.PRETRAINED": ""})


def _norm(value: Any) -> Any:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else value


def _weights(state: Dict[str, Any], source: str) -> Dict[str, Any]:
    # A run trained with EMA validated the EMA weights; test those too.
    weights = state.get("ema") or state.get("model")
    if not isinstance(weights, dict):
        raise CheckpointError(f"{source}: holds no model weights (no 'model' entry); is it a zoo "
                              "checkpoint? tools/convert_checkpoint.py converts other projects'")
    return strip_wrappers(weights)


def head_classes(model: nn.Module, weights: Dict[str, Any]) -> Optional[int]:
    """The class count of the classifier in ``weights`` (in ``model``'s key names) when it
    differs from ``model``'s; None when it is the same or ``weights`` has none."""
    own = model.state_dict()
    for key in head_keys(model):
        if key in weights and key in own and weights[key].shape[1:] == own[key].shape[1:]:
            if weights[key].shape[0] != own[key].shape[0]:
                return int(weights[key].shape[0])
    return None


def _check_fit(model: nn.Module, weights: Dict[str, Any], what: str) -> None:
    """Raise one CheckpointError line naming the keys that do not fit (torch's message is a
    screenful)."""
    own = model.state_dict()
    mismatched = [f"{k} {tuple(v.shape)} vs model {tuple(own[k].shape)}"
                  for k, v in weights.items() if k in own and own[k].shape != v.shape]
    missing = [k for k in own if k not in weights]
    unexpected = [k for k in weights if k not in own]
    problems = []
    if mismatched:
        problems.append("shape mismatch: " + ", ".join(mismatched[:4]))
    if missing:
        problems.append(f"missing from the checkpoint ({len(missing)}): " + ", ".join(missing[:4]))
    if unexpected:
        problems.append(f"not in the model ({len(unexpected)}): " + ", ".join(unexpected[:4]))
    if problems:
        raise CheckpointError(f"{what}: " + "; ".join(problems))


def import_recorded_modules(name: str, state: Dict[str, Any], source: str) -> None:
    """Import the ``CONFIG.EXTRA_MODULES`` the checkpoint records when its model ``name`` is not
    registered: the file that defines a user's model comes with the checkpoint's model name, as
    it does with the whole recorded config (``zoo-predict`` without ``--config-file``)."""
    from ..models import MODEL_REGISTRY
    from ..utils.env import load_user_module

    if name in MODEL_REGISTRY:
        return
    for entry in lookup_key(recorded_config(state), "CONFIG.EXTRA_MODULES", None) or []:
        if entry:
            load_user_module(str(entry), f"CONFIG.EXTRA_MODULES recorded in {source}:")


class CheckpointModel(NamedTuple):
    """What :func:`checkpoint_model` returns."""

    cfg: Any  # the config with the checkpoint's model name, kwargs and class count
    model: nn.Module  # on the CPU, in train mode, with the checkpoint's (EMA) weights
    classes: List[str]  # the training data's class names it recorded ([] when it has none)


def checkpoint_model(cfg, path: str, state: Optional[Dict[str, Any]] = None,
                     check_input: bool = True) -> CheckpointModel:
    """Build and load the model of checkpoint ``path``, with the class names it recorded.

    The returned cfg carries the checkpoint's model name, kwargs and class count (see the module
    docstring).

    Args:
        cfg: The config given to the command.
        path: The checkpoint (named in messages).
        state: Its contents when the caller has read them already (read from ``path`` if None).
        check_input: Warn when ``cfg``'s clip settings differ from those the checkpoint was
            trained with (:func:`warn_input_differences`); False for a config that has none.

    Raises:
        FileNotFoundError, CheckpointError: the file is missing, unreadable or does not fit.
    """
    if state is None:
        state = load_checkpoint(path)
    if check_input:
        warn_input_differences(cfg, state, path)
    cfg = config_for_checkpoint(cfg, state, path)
    import_recorded_modules(cfg.CONFIG.MODEL.NAME, state, path)
    names = state.get("classes")
    names = [str(c) for c in names] if isinstance(names, (list, tuple)) else []
    weights = _weights(state, path)
    del state
    model = build_model(cfg)
    classes = head_classes(model, weights)
    if classes is not None:
        logger.warning("%s has a %d-class classifier (the config says CONFIG.DATA.NUM_CLASSES "
                       "%d); using the checkpoint's", path, classes, cfg.CONFIG.DATA.NUM_CLASSES)
        cfg = _with(cfg, {"CONFIG.DATA.NUM_CLASSES": classes})
        model = build_model(cfg)
    _check_fit(model, weights, f"{path} does not fit {cfg.CONFIG.MODEL.NAME}")
    model.load_state_dict(weights)
    return CheckpointModel(cfg, model, names)


def model_from_checkpoint(cfg, path: str) -> Tuple[Any, nn.Module]:
    """``(cfg, model)`` of :func:`checkpoint_model`."""
    cfg, model, _ = checkpoint_model(cfg, path)
    return cfg, model


def zoo_run_model(path: str, state: Dict[str, Any], name: Optional[str] = None,
                  num_classes: Optional[int] = None,
                  kwargs: Optional[Dict[str, Any]] = None
                  ) -> Tuple[str, nn.Module, int, Dict[str, Any]]:
    """``(model name, model, class count, builder kwargs)`` of a zoo run's checkpoint, for tools
    without a config (export): the model, kwargs and class count it records, each unless given;
    a given value that differs is reported and the checkpoint's used (:func:`checkpoint_model`).

    Raises:
        CheckpointError: the checkpoint records no model name and ``name`` is None.
    """
    from ..config import get_cfg

    saved = saved_model_keys(state)
    given = {"CONFIG.MODEL.NAME": name,
             "CONFIG.MODEL.KWARGS": [x for pair in kwargs.items() for x in pair] if kwargs
             else None,
             "CONFIG.DATA.NUM_CLASSES": num_classes}
    values = {key: value if value is not None else saved.get(key) for key, value in given.items()}
    if not values["CONFIG.MODEL.NAME"]:
        raise CheckpointError(f"{path} records no model name: name the registered model "
                              "(--model NAME)")
    values["CONFIG.DATA.NUM_CLASSES"] = values["CONFIG.DATA.NUM_CLASSES"] or 0
    values["CONFIG.MODEL.KWARGS"] = values["CONFIG.MODEL.KWARGS"] or []
    cfg, model, _ = checkpoint_model(_with(get_cfg(), values), path, state, check_input=False)
    return (cfg.CONFIG.MODEL.NAME, model, int(cfg.CONFIG.DATA.NUM_CLASSES),
            parse_model_kwargs(list(cfg.CONFIG.MODEL.KWARGS)))
