"""MODEL_REGISTRY and register_model (how a family adds a name with its ModelFacts), and what
the registry answers about its names: list_models, model_facts.

This module is a leaf of zoo/models: it imports only the facts record and the generic registry, so
that the families, the weights code and build.py can all stand on it.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch.nn as nn

from ..utils.registry import Registry
from .facts import ModelFacts

__all__ = ["MODEL_REGISTRY", "builder_kwargs", "list_models", "model_facts", "register_model"]

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
    builder.__module__ = getattr(build, "__module__", None) or __name__
    builder.__doc__ = doc or build.__doc__
    builder.facts = facts
    builder.build, builder.defaults = build, dict(defaults)  # for builder_kwargs
    MODEL_REGISTRY.register(builder, name=name)
    return builder


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


def builder_kwargs(name: str, kwargs: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """What building ``name`` with ``kwargs`` passes to its model: ``(the class or function that
    builds it, every keyword it takes with a default, as the registered variant and then
    ``kwargs`` set them)``; ``num_classes`` left out. A builder whose signature cannot be read
    gives ``kwargs`` over the variant's defaults."""
    builder = MODEL_REGISTRY.get(name)
    build = getattr(builder, "build", builder)
    try:
        params = inspect.signature(build).parameters.values()
    except (TypeError, ValueError):
        params = ()
    out = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    out.update(getattr(builder, "defaults", {}))
    out.update(kwargs)
    out.pop("num_classes", None)
    return build, out
