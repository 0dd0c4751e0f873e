"""MODEL_REGISTRY, register_model (how a family adds a name with its ModelFacts), and the three
ways to get a model: create_model, build_model, list_models."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional

import torch.nn as nn

from ..utils.registry import Registry
from .facts import ModelFacts

logger = logging.getLogger(__name__)

MODEL_REGISTRY = Registry("MODEL")
MODEL_REGISTRY.__doc__ = """Registry of model builders.

A builder is called as ``fn(num_classes: int, **kwargs) -> nn.Module``. Video models take a float
tensor ``(B, C, T, H, W)`` and return logits ``(B, num_classes)``. A builder may carry a ``facts``
attribute, a :class:`~zoo.models.facts.ModelFacts` (input frames, sampling stride, crop, mean/std,
params, GFLOPs; a plain dict is still read) shown by list_models. :func:`register_model` registers
a builder with its facts; ``@MODEL_REGISTRY.register()`` registers a plain builder function.
"""


def register_model(name: str, build: Callable[..., nn.Module],
                   facts: Optional[ModelFacts] = None, doc: Optional[str] = None,
                   **defaults: Any) -> Callable[..., nn.Module]:
    """Register the builder ``name``: ``build`` called with ``defaults`` updated by the caller's
    kwargs, and ``facts`` beside it.

    Example::

        register_model("slowfast_8x8_resnet50", SlowFast, video_facts(32, 2, 224, ...),
                       "SlowFast R50 8x8 ...", depth=50, alpha=4, fusion_kernel=7)

    Args:
        name: Registered name (``family_variant_depth``); registering it twice is an error.
        build: Called as ``build(num_classes=N, **kwargs)`` and returns the ``nn.Module`` (a
            model class or a function).
        facts: What list_models, dry runs, data normalisation and the weights table read.
        doc: The builder's docstring (default: ``build``'s).
        **defaults: Keyword arguments of this variant (depth, widths, ...); a caller's kwargs
            (``MODEL.KWARGS``) override them.

    Returns:
        The registered builder, ``fn(num_classes=N, **kwargs) -> nn.Module``; ``num_classes``
        defaults to ``facts.default_num_classes`` (1000 for image models, else 400).
    """
    default_classes = facts.default_num_classes if facts is not None else 400

    def builder(num_classes: int = default_classes, **kwargs: Any) -> nn.Module:
        return build(num_classes=num_classes, **{**defaults, **kwargs})

    builder.__name__ = builder.__qualname__ = name
    # The registry's duplicate-name message names the module that registered a name first.
    builder.__module__ = getattr(build, "__module__", None) or __name__
    builder.__doc__ = doc or build.__doc__
    builder.facts = facts
    MODEL_REGISTRY.register(builder, name=name)
    return builder


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
            an http(s) URL; see zoo/models/weights.py.
        **kwargs: Passed to the builder (depth/width arguments, dropout, ...).
    """
    builder = MODEL_REGISTRY.get(name)
    if num_classes is None:
        num_classes = model_facts(name).get("num_classes") or 400
    model = builder(num_classes=num_classes, **kwargs)
    if pretrained:
        from .pretrained import load_pretrained

        load_pretrained(model, pretrained, model_name=name)
    return model


def list_models(aliases: bool = True) -> List[str]:
    """Names of all registered models, sorted.

    Args:
        aliases: Include aliases (gluoncv's names, whose facts carry ``alias_of``); ``False``
            lists each architecture once.
    """
    names = MODEL_REGISTRY.names()
    if aliases:
        return names
    return [n for n in names if not model_facts(n).get("alias_of")]


def model_facts(name: str) -> Dict[str, Any]:
    """The facts registered beside a model as a dict: every :class:`ModelFacts` field (``None``
    where unknown) plus ``sampling``; a user builder's plain ``facts`` dict as it is; ``{}`` when
    it has none."""
    facts = getattr(MODEL_REGISTRY.get(name), "facts", None)
    if isinstance(facts, ModelFacts):
        return facts.as_dict()
    return dict(facts or {})


def parse_model_kwargs(pairs: List[Any]) -> Dict[str, Any]:
    """Builder kwargs from a flat ``[KEY, VALUE, ...]`` list (``MODEL.KWARGS``, ``--kwargs``).

    String values are read as Python literals where they are one (``"8"`` -> 8, ``"False"`` ->
    False, ``"(3, 4, 6, 3)"`` -> a tuple), else kept as strings.
    """
    from ..config import parse_literal

    if len(pairs) % 2:
        raise ValueError(f"model kwargs must be KEY VALUE pairs, got an odd list: {list(pairs)}")
    out = {}
    for key, value in zip(pairs[0::2], pairs[1::2]):
        out[str(key)] = parse_literal(value) if isinstance(value, str) else value
    return out


def build_model(cfg) -> nn.Module:
    """Build the model a config names. This is the only place that turns cfg into model kwargs.

    The returned model is plain (no DDP wrapper; the engine adds that).
    """
    model_cfg = cfg.CONFIG.MODEL
    kwargs = parse_model_kwargs(list(model_cfg.KWARGS))
    return create_model(
        model_cfg.NAME,
        num_classes=cfg.CONFIG.DATA.NUM_CLASSES,
        pretrained=model_cfg.PRETRAINED or None,
        **kwargs,
    )
