"""The classifier layer of a model: ``get_classifier()`` / ``reset_classifier(num_classes)``.

The contract is timm's: ``model.get_classifier()`` returns the final classification module (the
layer whose outputs are the logits) and ``model.reset_classifier(num_classes)`` replaces it with
a freshly initialised layer of ``num_classes`` outputs. Every built-in family has both through
:class:`ClassifierMixin`; the pretrained loader (which keeps a fresh head when the class count
differs) and fine-tuning (the head's learning rate, ``FREEZE_BACKBONE``, feature extraction) find
the head only through :func:`find_classifier`.

A user model (an ``EXTRA_MODULES`` file) need not define them. For such a model the classifier is
the module its ``classifier_name`` attribute names (a dotted path such as ``"head.proj"``), else
its last ``nn.Linear`` in registration order (``model.modules()``); a model with neither is told
so in one line.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn

from ..config import ConfigError

__all__ = ["ClassifierMixin", "check_logits", "checked_classifier", "classifier_keys",
           "find_classifier", "head_keys", "last_linear_note", "names_classifier",
           "new_classifier", "num_outputs", "unwrap"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DDP / DataParallel (``.module``) and ``torch.compile``
    (``._orig_mod``) wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model


def num_outputs(layer: nn.Module) -> int:
    """Outputs of a classifier layer: ``out_features`` of a linear, ``out_channels`` of a conv."""
    if isinstance(layer, nn.Linear):
        return layer.out_features
    if isinstance(layer, _CONVS):
        return layer.out_channels
    raise TypeError(f"a classifier must be nn.Linear or a Conv, got {type(layer).__name__}")


def check_logits(logits: torch.Tensor, num_classes: int, model_name: str) -> None:
    """Stop when a model's ``(B, K)`` logits do not have one column per class.

    A shape read (no host-device sync), so it runs on every batch at no cost.

    Raises:
        ConfigError: ``K`` is not ``num_classes`` (one line naming the model, the shape and the
            class count).
    """
    if not isinstance(logits, torch.Tensor):
        raise ConfigError(
            f"model {model_name} returns a {type(logits).__name__}, not a tensor of logits: its "
            "forward must return the (batch, NUM_CLASSES) logits alone (zoo computes the loss "
            "from them; an auxiliary output has no loss here)")
    if logits.dim() != 2:
        raise ConfigError(
            f"model {model_name} returns logits of shape {tuple(logits.shape)}, not (batch, "
            f"{num_classes}): keep the batch dimension (a .squeeze() drops it for a batch of "
            "one) and pool every other dimension away")
    if logits.shape[1] != num_classes:
        raise ConfigError(
            f"model {model_name} returns logits of shape {tuple(logits.shape)}, "
            f"{logits.shape[1]} per clip, but CONFIG.DATA.NUM_CLASSES is {num_classes}: give its "
            "classifier the num_classes its builder is called with (e.g. nn.Linear(width, "
            f"num_classes)), or set CONFIG.DATA.NUM_CLASSES {logits.shape[1]} if the data has "
            "that many classes")


def new_classifier(old: nn.Module, num_classes: int,
                   init_std: Optional[float] = None) -> nn.Module:
    """A fresh layer like ``old`` (same inputs, bias, device, dtype) with ``num_classes`` outputs.

    Args:
        old: The ``nn.Linear`` or Conv classifier to replace.
        num_classes: Outputs of the new layer.
        init_std: Normal init of the weight with this std and a zero bias (the 3D nets' head
            init); ``None`` keeps PyTorch's default init of the layer type.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    factory = {"device": old.weight.device, "dtype": old.weight.dtype}
    bias = old.bias is not None
    if isinstance(old, nn.Linear):
        new = nn.Linear(old.in_features, num_classes, bias=bias, **factory)
    elif isinstance(old, _CONVS):
        new = type(old)(old.in_channels, num_classes, old.kernel_size, stride=old.stride,
                        padding=old.padding, dilation=old.dilation, bias=bias, **factory)
    else:
        raise TypeError(f"cannot reset a {type(old).__name__} classifier; a classifier must be "
                        "nn.Linear or a Conv (override reset_classifier for anything else)")
    if init_std is not None:
        nn.init.normal_(new.weight, std=init_std)
        if bias:
            nn.init.zeros_(new.bias)
    new.requires_grad_(old.weight.requires_grad)
    return new


class ClassifierMixin:
    """``get_classifier`` / ``reset_classifier`` for a model whose head is one named layer.

    A family sets the class attributes; ``reset_classifier`` also resets the auxiliary
    classifiers (TPN's ``aux_head``), which have one output per class too.

    Attributes:
        classifier_name: Dotted path of the classifier layer (``"fc"``, ``"head.proj"``).
        aux_classifier_names: Dotted paths of auxiliary per-class layers (none by default).
        head_init_std: Std of the normal init of a reset layer; ``None`` = PyTorch's default
            (an instance attribute where the family takes it as an argument).
    """

    classifier_name: str = "fc"
    aux_classifier_names: Tuple[str, ...] = ()
    head_init_std: Optional[float] = None

    def get_classifier(self) -> nn.Module:
        """The final classification layer (its outputs are the logits)."""
        return self.get_submodule(self.classifier_name)

    def reset_classifier(self, num_classes: int) -> None:
        """Replace the classifier (and any auxiliary one) by a fresh layer of ``num_classes``."""
        for path in (self.classifier_name,) + tuple(self.aux_classifier_names):
            parent, _, leaf = path.rpartition(".")
            owner = self.get_submodule(parent) if parent else self
            setattr(owner, leaf, new_classifier(getattr(owner, leaf), num_classes,
                                                self.head_init_std))


def find_classifier(model: nn.Module) -> nn.Module:
    """The classifier of ``model`` (wrappers removed): ``get_classifier()`` when the model has it,
    else the module ``classifier_name`` names, else the last ``nn.Linear``.

    Raises:
        ValueError: when none of these finds a layer (one line saying what to define).
    """
    model = unwrap(model)
    if callable(getattr(model, "get_classifier", None)):
        return model.get_classifier()
    name = getattr(model, "classifier_name", None)
    if name:
        return model.get_submodule(name)
    last = None
    for module in model.modules():
        if isinstance(module, nn.Linear):
            last = module
    if last is None:
        raise ValueError(
            f"{type(model).__name__} has no get_classifier() and no nn.Linear: define "
            "get_classifier() (zoo.models.ClassifierMixin) or a `classifier_name` attribute "
            "naming its head module")
    return last


def names_classifier(model: nn.Module) -> bool:
    """True when ``model`` (wrappers removed) names its classifier (``get_classifier()`` or
    ``classifier_name``); False when zoo takes its last ``nn.Linear``."""
    model = unwrap(model)
    return callable(getattr(model, "get_classifier", None)) or bool(
        getattr(model, "classifier_name", None))


def last_linear_note(found: str, likely: Optional[str], outputs: str = "") -> str:
    """The line for a classifier found by the last-``nn.Linear`` rule that is likely the wrong
    layer: ``found`` (its path, with ``outputs`` after it) and ``likely`` (the layer that looks like
    the head, or None)."""
    fix = (f"if {likely} is, name it: classifier_name = {likely!r}" if likely else
           "name the head: classifier_name = '<its dotted path>'")
    return (f"zoo took {found}{outputs} for the classifier (the last nn.Linear); {fix} on the "
            "model class (see zoo/models/classifier.py)")


def checked_classifier(model: nn.Module, num_classes: int, use: str,
                       model_name: str = "") -> nn.Module:
    """:func:`find_classifier` for a use that needs the right layer (``FREEZE_BACKBONE``,
    ``BACKBONE_LR_MULT``, feature extraction): a layer found by the last-``nn.Linear`` rule
    whose outputs are not ``num_classes`` is not the classifier.

    Raises:
        ConfigError: for such a layer, one line naming ``use``, the layer zoo took and the one
            with ``num_classes`` outputs to name with ``classifier_name``.
        ValueError: no classifier is found (see :func:`find_classifier`).
    """
    head = find_classifier(model)
    model = unwrap(model)
    if names_classifier(model) or num_outputs(head) == num_classes:
        return head
    found = next(n for n, m in model.named_modules() if m is head)
    likely = [n for n, m in model.named_modules()
              if isinstance(m, (nn.Linear, *_CONVS)) and num_outputs(m) == num_classes]
    what = f"model {model_name}" if model_name else type(model).__name__
    k = num_outputs(head)
    raise ConfigError(f"{use}: {what}: " + last_linear_note(
        found, likely[-1] if likely else None,
        f" ({k} output{'s' if k != 1 else ''}, CONFIG.DATA.NUM_CLASSES is {num_classes})"))


def classifier_keys(model: nn.Module) -> Tuple[str, ...]:
    """State-dict keys of the parameters of the classifier (first), then of the auxiliary
    classifiers a model lists in ``aux_classifier_names``."""
    model = unwrap(model)
    head = find_classifier(model)
    names = [n for n, m in model.named_modules() if m is head][:1]
    names += [n for n in getattr(model, "aux_classifier_names", ()) if n not in names]
    keys = []
    for name in names:
        prefix = f"{name}." if name else ""
        keys += [prefix + n for n, _ in model.get_submodule(name).named_parameters(recurse=False)]
    return tuple(keys)


def head_keys(model: nn.Module) -> Tuple[str, ...]:
    """State-dict keys of the classifier (``model.get_classifier()``; for a user model without it,
    the rule of :func:`find_classifier`), then of any auxiliary classifier the model lists (TPN's
    ``aux_head``). Empty when no classifier can be found: then every tensor must fit as it is
    (what the pretrained loader and the converters want, where :func:`classifier_keys` raises)."""
    try:
        return classifier_keys(model)
    except ValueError:
        return ()
