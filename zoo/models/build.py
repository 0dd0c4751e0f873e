"""The ways to get a model: create_model (by name), build_model (from a config); and
parse_model_kwargs (``MODEL.KWARGS`` -> builder kwargs).

This module sits above the registry and the weights code: it builds from
:data:`~zoo.models.registry.MODEL_REGISTRY`, then loads pretrained weights with
:func:`zoo.models.weights.load.load_pretrained`.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

import torch.nn as nn

from ..config import ConfigError, parse_literal

# The registry's names are also importable from here (their home before registry.py).
from .registry import MODEL_REGISTRY, list_models, model_facts, register_model
from .weights.load import load_pretrained
from .weights.preprocessor import pretrained_normalization

__all__ = ["MODEL_REGISTRY", "build_model", "config_model_kwargs", "create_model",
           "input_normalization", "list_models", "model_facts", "parse_model_kwargs",
           "register_model"]


def create_model(
    name: str, num_classes: Optional[int] = None, pretrained: Optional[str] = None,
    **kwargs: Any
) -> nn.Module:
    """Build a registered model by name.

    Args:
        name: Registered name, e.g. ``"resnet50"``, ``"slowfast_4x16_resnet50"`` or a gluoncv
            alias such as ``"slowfast_4x16_resnet50_kinetics400"``.
        num_classes: Size of the classification head (default: the class count in the model's
            facts, e.g. 174 for a ``*_sthsthv2`` alias, else 400).
        pretrained: Weights to load (``None`` = random init): a local checkpoint in any
            supported format, a weights tag (``"kinetics400"``), ``"True"`` (the default tag) or
            an http(s) URL; see zoo/models/weights/download.py.
        **kwargs: Passed to the builder (depth/width arguments, dropout, ...).
    """
    builder = MODEL_REGISTRY.get(name)
    if num_classes is None:
        num_classes = model_facts(name).get("num_classes") or 400
    model = builder(num_classes=num_classes, **kwargs)
    if pretrained:
        load_pretrained(model, pretrained, model_name=name, kwargs=kwargs)
    return model


def parse_model_kwargs(pairs: List[Any]) -> Dict[str, Any]:
    """Builder kwargs from a flat ``[KEY, VALUE, ...]`` list (``MODEL.KWARGS``, ``--kwargs``).

    String values are read as Python literals where they are one (``"8"`` -> 8, ``"False"`` ->
    False, ``"(3, 4, 6, 3)"`` -> a tuple), else kept as strings.
    """
    if len(pairs) % 2:
        raise ValueError(f"model kwargs must be KEY VALUE pairs, got an odd list: {list(pairs)}")
    out = {}
    for key, value in zip(pairs[0::2], pairs[1::2]):
        out[str(key)] = parse_literal(value) if isinstance(value, str) else value
    return out


# Builder keywords that set stochastic depth: zoo's own, and the names MViT (PySlowFast), timm
# and torchvision use. Each is a probability.
_DROP_PATH_KWARGS = ("drop_path", "droppath_rate", "drop_path_rate", "stochastic_depth_prob")


def config_model_kwargs(cfg) -> Dict[str, Any]:
    """The builder kwargs a config gives: ``MODEL.KWARGS``, plus ``MODEL.DROP_PATH`` > 0 as
    ``drop_path``.

    Raises:
        ConfigError: DROP_PATH and a stochastic-depth kwarg both set it, or such a kwarg is not
            a probability in [0, 1).
    """
    model_cfg = cfg.CONFIG.MODEL
    kwargs = parse_model_kwargs(list(model_cfg.KWARGS))
    for key in _DROP_PATH_KWARGS:
        value = kwargs.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value < 1:
            raise ConfigError(f"CONFIG.MODEL.KWARGS {key} {value!r} is not allowed: a stochastic "
                              "depth rate is a probability in [0, 1) (e.g. 0.1)")
    if model_cfg.DROP_PATH > 0:
        both = [key for key in _DROP_PATH_KWARGS if key in kwargs]
        if both:
            raise ConfigError(f"CONFIG.MODEL.DROP_PATH {model_cfg.DROP_PATH} and MODEL.KWARGS "
                              f"{both[0]} {kwargs[both[0]]} both set the stochastic depth: keep "
                              "one")
        kwargs["drop_path"] = model_cfg.DROP_PATH
    return kwargs


def build_model(cfg, classes: Sequence[str] = ()) -> nn.Module:
    """Build the model a config names. This is the only place that turns cfg into model kwargs.

    The returned model is plain (no DDP wrapper; the trainer adds that). ``MODEL.DROP_PATH`` > 0
    becomes the ``drop_path`` kwarg, which every family with residual blocks takes. ``classes``
    (the training data's class names, when it names them) lets a zoo checkpoint's classifier
    follow them by name (:func:`zoo.models.weights.load.load_pretrained`).
    """
    model_cfg = cfg.CONFIG.MODEL
    kwargs = config_model_kwargs(cfg)
    try:
        model = create_model(model_cfg.NAME, num_classes=cfg.CONFIG.DATA.NUM_CLASSES, **kwargs)
    except TypeError as e:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(e))
        if unknown is None or unknown.group(1) not in kwargs or not _refused(e, model_cfg.NAME,
                                                                             unknown.group(1)):
            raise  # raised inside the model's code: a bug there, with its traceback
        if unknown.group(1) == "drop_path" and model_cfg.DROP_PATH > 0:
            raise ConfigError(f"CONFIG.MODEL.DROP_PATH {model_cfg.DROP_PATH}: model "
                              f"{model_cfg.NAME} has no stochastic depth (no drop_path "
                              "argument); set DROP_PATH 0") from None
        raise ConfigError(_unknown_kwarg(model_cfg.NAME, unknown.group(1))) from None
    if model_cfg.PRETRAINED:
        load_pretrained(model, model_cfg.PRETRAINED, model_name=model_cfg.NAME, kwargs=kwargs,
                        classes=classes)
    return model


def input_normalization(cfg, announce: bool = False) -> Dict[str, Any]:
    """The model's facts (:func:`model_facts` of ``CONFIG.MODEL.NAME``) with the ``mean`` / ``std``
    that empty ``DATA.MEAN`` / ``STD`` stand for: those of ``MODEL.PRETRAINED``'s
    ``preprocessor_config.json`` where it is a local Hugging Face folder or a file beside one
    (:func:`~zoo.models.weights.preprocessor.pretrained_normalization`, which ``announce`` makes
    log what it took and warn of set values that differ), else the model's own."""
    return pretrained_normalization(cfg, model_facts(cfg.CONFIG.MODEL.NAME), announce)


def _refused(e: TypeError, name: str, key: str) -> bool:
    """True when ``e`` is the builder of ``name`` refusing the keyword ``key`` (a config mistake);
    False for a TypeError raised inside the model's own code, which names ``key`` by chance.

    Refused: binding the arguments of zoo's call of the builder raised it (its traceback ends in
    :func:`create_model` or :func:`~zoo.models.registry.register_model`'s builder, no frame inside
    the model's code), or the builder passes ``**kwargs`` on (torchvision's) and ``key`` is none
    of its own parameters.
    """
    import inspect

    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    builder = MODEL_REGISTRY.get(name)
    calls = {create_model.__code__}
    if hasattr(builder, "build"):  # register_model's builder calls ``build`` with the kwargs
        calls.add(builder.__code__)
    if tb is not None and tb.tb_frame.f_code in calls:
        return True
    try:
        params = inspect.signature(getattr(builder, "build", builder)).parameters
    except (TypeError, ValueError):
        return False
    passes_on = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return passes_on and key not in params


def _unknown_kwarg(name: str, key: str) -> str:
    """One line for a MODEL.KWARGS key the builder of ``name`` does not take: the nearest name
    it does take, and all of them."""
    import difflib

    from .registry import builder_kwargs

    taken = sorted(builder_kwargs(name, {})[1])
    near = difflib.get_close_matches(key, taken, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return (f"CONFIG.MODEL.KWARGS: model {name} takes no argument {key!r}{hint}; it takes "
            f"{', '.join(taken) or 'no keyword arguments'}")
