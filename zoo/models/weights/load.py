"""Loading pretrained weights into a model, re-initialising a head whose class count differs.

The source is what ``MODEL.PRETRAINED`` names (a local file or Hugging Face Hub folder, a
weights tag, ``True`` or a URL; :mod:`zoo.models.weights.download` resolves and downloads it).
A file is read with ``torch.load(weights_only=True)``, or with safetensors when it is one (told
from its content); its format is told from its keys (:func:`detect_format`): zoo's own keys
(which torchvision files share for the models that mirror torchvision, and
PySlowFast's for MViT) load as they are,
PySlowFast / PyTorchVideo / MMAction2 / torchvision-ResNet / gluoncv.torch / Hugging Face keys
are converted in memory by :mod:`zoo.models.weights.convert`. Hugging Face weights come with a
``config.json`` (in the folder, beside the file, or downloaded from beside a URL's file), which
is checked against the model (``convert.huggingface.check_hub_config``).
:func:`inflate_from_file` loads a 2D ResNet file into a 3D ResNet (the ``inflate_from`` argument
of the Slow / I3D / TPN builders).
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ...config import parse_literal
from ...utils.checkpoint_io import load_failure, mappable, recorded_config
from ..classifier import head_keys, last_linear_note, names_classifier
from .convert import SCHEMES
from .convert.common import (
    ConversionError,
    Layout,
    filled_line,
    fit_position,
    is_safetensors,
    map_state,
    read_safetensors,
    resized_line,
    strip_wrappers,
)
from .convert.gluoncv import looks_like_gluoncv
from .convert.huggingface import (
    check_hub_config,
    find_hub_config,
    hub_class_names,
    looks_like_huggingface,
    read_hub_config,
    read_hub_folder,
)
from .convert.torchvision import inflate_state_dict
from .download import WeightsError, WeightsSource, cache_path, fetch, mirror_url, resolve_pretrained

logger = logging.getLogger(__name__)

__all__ = ["detect_format", "head_keys", "inflate_from_file", "load_pretrained", "load_state",
           "read_state_dict", "to_model_keys"]


# Dict keys that hold the model state in each project's checkpoint file, tried in order.
_STATE_KEYS = ("model", "model_state", "state_dict")


def read_state_dict(path: str, mmap: bool = False) -> Dict[str, torch.Tensor]:
    """The model weights in a checkpoint file, ``module.`` / ``_orig_mod.`` stripped.

    A zoo checkpoint (``model``), a PySlowFast / PyTorchVideo ``.pyth`` (``model_state``), an
    MMAction2 file (``state_dict``), a bare state dict, a ``.safetensors`` file (told from its
    content), or a Hugging Face Hub folder (``model.safetensors`` / ``pytorch_model.bin``).
    ``mmap``: a torch file's tensors are mapped rather than read where its format allows
    (:func:`~zoo.utils.checkpoint_io.mappable`), for a look at names and shapes before the load
    (not for the values: a mapped load skips the full read's check of each tensor's record size).
    """
    return _read(path, mmap)[0]


def _read(path: str, mmap: bool = False
          ) -> Tuple[Dict[str, torch.Tensor], Optional[Dict[str, Any]]]:
    """:func:`read_state_dict`, and the model a zoo checkpoint records (``{"name": MODEL.NAME,
    "kwargs": MODEL.KWARGS as a dict, "pairs": MODEL.KWARGS as written, "classes": the class
    names it was trained on, [] when none}``; None for a file that records no config)."""
    if os.path.isdir(path):
        return _strip_module(read_hub_folder(path), path), None
    if not os.path.isfile(path):
        raise FileNotFoundError(f"pretrained checkpoint {path!r} does not exist")
    if is_safetensors(path):
        return _strip_module(read_safetensors(path), path), None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True,
                         mmap=mmap and mappable(path))
    except Exception as e:  # an unpickling error names the forbidden global
        what, refused = load_failure(path, e)
        if not refused:
            raise WeightsError(f"{path}: {what}") from None
        raise WeightsError(
            f"{path}: refused to load ({what}); only plain tensor checkpoints are accepted "
            "(torch.load(weights_only=True)); if you trust the file, convert it with "
            "tools/convert_checkpoint.py --unsafe-load (a whole pickled model, torch.save(model), "
            "converts too)"
        ) from None
    state = obj
    if isinstance(obj, dict):
        state = next((obj[k] for k in _STATE_KEYS if isinstance(obj.get(k), dict)), obj)
    if not isinstance(state, dict):
        raise WeightsError(f"{path}: holds no state dict (found {type(state).__name__})")
    recorded = _recorded_model(obj) if state is obj.get("model") else None
    if recorded is not None:
        names = obj.get("classes")
        recorded["classes"] = [str(c) for c in names] if isinstance(names, list) else []
        if isinstance(obj.get("ema"), dict) and obj["ema"]:
            state = obj["ema"]
            logger.info("%s: a run trained with EMA; loading its EMA weights (those it validated "
                        "and tests with)", path)
    elif isinstance(obj, dict):
        other = [k for k, v in obj.items() if "ema" in str(k).lower() and isinstance(v, dict)
                 and v and v is not state]
        if other:
            logger.info("%s also holds EMA weights (%s); loading the non-EMA set", path,
                        ", ".join(map(str, other)))
    return _strip_module(state, path), recorded


def _recorded_model(obj: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """MODEL.NAME and MODEL.KWARGS of a zoo checkpoint's recorded config, when it has both."""
    model = recorded_config(obj).get("CONFIG", {})
    model = model.get("MODEL", {}) if isinstance(model, dict) else {}
    try:
        name, pairs = model["NAME"], list(model.get("KWARGS") or [])
    except (AttributeError, KeyError, TypeError):
        return None
    if not isinstance(name, str) or len(pairs) % 2:
        return None
    # Read as the builder got them: zoo-convert-checkpoint records --kwargs as typed ("24").
    kwargs = {str(k): parse_literal(v) if isinstance(v, str) else v
              for k, v in zip(pairs[0::2], pairs[1::2])}
    return {"name": name, "kwargs": kwargs, "pairs": pairs}


# Builder keywords a fine-tune may change freely: regularisation, initialisation and the input
# size (VideoMAE's position table follows the clip; where a size changes the weights' shapes,
# loading stops on those), not the network a checkpoint's weights belong to.
_TRAINING_KWARGS = re.compile(r"drop|init|checkpoint|stochastic_depth|pretrained|inflate|frames|"
                              r"size")


def check_recorded_model(recorded: Dict[str, Any], model_name: str, kwargs: Dict[str, Any],
                         source: str) -> None:
    """Stop when ``source``, a zoo checkpoint of ``recorded["name"]`` built with
    ``recorded["kwargs"]``, is loaded into the same builder with other architecture keywords
    (``num_heads``, ``alpha``, ...; their weights can fit the model's shapes and still compute
    something else). Regularisation keywords (dropout, drop path, initialisation) may differ;
    so may anything when the names are of two different builders, or the recorded one is not
    registered here (its shapes are still checked)."""
    from ..registry import MODEL_REGISTRY, builder_kwargs

    if recorded["name"] not in MODEL_REGISTRY:
        return
    then_build, then = builder_kwargs(recorded["name"], recorded["kwargs"])
    now_build, now = builder_kwargs(model_name, kwargs)
    if then_build is not now_build:
        return
    differ = [k for k in sorted(set(then) | set(now)) if not _TRAINING_KWARGS.search(k)
              and _plain(then.get(k, "(none)")) != _plain(now.get(k, "(none)"))]
    if differ:
        what = ", ".join(f"{k} {then.get(k, '(none)')!r} (this model: {now.get(k, '(none)')!r})"
                         for k in differ)
        raise WeightsError(
            f"{source} holds {recorded['name']} built with {what}: its weights compute that "
            f"net; build the model with MODEL.KWARGS {recorded['pairs']} (the "
            "checkpoint's), or convert the weights for the other net yourself")


def _other_builder(recorded: str, model_name: Optional[str]) -> bool:
    """Whether a checkpoint of ``recorded`` and the model ``model_name`` are built by two
    different builders (False when either is unknown here)."""
    from ..registry import MODEL_REGISTRY, builder_kwargs

    if model_name is None or recorded not in MODEL_REGISTRY or model_name not in MODEL_REGISTRY:
        return False
    return builder_kwargs(recorded, {})[0] is not builder_kwargs(model_name, {})[0]


def _plain(value: Any) -> Any:
    """Lists and tuples alike (a YAML list against a default tuple)."""
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _strip_module(state: Dict[str, torch.Tensor], path: str) -> Dict[str, torch.Tensor]:
    state = strip_wrappers({k: v for k, v in state.items() if isinstance(v, torch.Tensor)})
    if not state:
        raise WeightsError(f"{path}: holds no tensors (looked under {list(_STATE_KEYS)})")
    return state


def detect_format(state: Dict[str, torch.Tensor], model: nn.Module, source: str = "") -> str:
    """The format of ``state``, from its keys: ``"zoo"`` (the model's own keys), ``"pyslowfast"``,
    ``"pytorchvideo"``, ``"mmaction2"``, ``"huggingface"``, ``"gluoncv"`` or ``"torchvision"``
    (a 2D ResNet, to inflate).

    Raises:
        WeightsError: when the keys fit none of them (naming ``source``, the file, and the
            first keys).
    """
    own = model.state_dict()
    # MViT files: torchvision's and PyTorchVideo's share most block names with zoo's
    if "conv_proj.weight" in state and "pos_encoding.class_token" in state:
        return "torchvision"
    if "patch_embed.patch_model.weight" in state:
        return "pytorchvideo"
    shared = sum(k in own for k in state)
    if shared >= len(own) // 2:
        if ("patch_embed.proj.weight" in state and "head.projection.weight" in own
                and set(state) != set(own)):
            return "pyslowfast"  # PySlowFast's MViT names, q / k / v split or fused otherwise
        return "zoo"
    keys = list(state)
    if looks_like_huggingface(keys):
        return "huggingface"
    if any(k.startswith("blocks.") for k in keys):
        return "pytorchvideo"
    if any(k.startswith(("s1.pathway0_stem.", "s2.pathway0_res")) for k in keys):
        return "pyslowfast"
    if any(k.startswith(("backbone.", "cls_head.")) for k in keys):
        return "mmaction2"
    if looks_like_gluoncv(keys, state):  # before torchvision: gluoncv's Slow has its layer names
        return "gluoncv"
    if "conv1.weight" in state and any(k.startswith("layer1.") for k in keys):
        return "torchvision"
    if shared >= max(2, len(own) // 10):  # many of the model's names: another variant of it
        others = [k for k in keys if k not in own]
        raise WeightsError(
            f"{source or 'these weights'}: {shared} of its {len(keys)} key names are "
            f"{type(model).__name__}'s, the rest ({', '.join(others[:3])}, ...) are not: weights "
            "of another variant of it; set CONFIG.MODEL.NAME (and MODEL.KWARGS) to the model "
            "they are of (zoo-list-models lists them)")
    raise WeightsError(
        f"{source or 'these weights'}: its keys ({', '.join(keys[:4])}, ...) are not "
        f"{type(model).__name__}'s and "
        "no converter knows their names: if they are another model's, set CONFIG.MODEL.NAME to "
        "it (zoo-list-models lists them); if another project wrote them, convert them with "
        "tools/convert_checkpoint.py")


def to_model_keys(state: Dict[str, torch.Tensor], model: nn.Module, fmt: str,
                  source: str) -> Dict[str, torch.Tensor]:
    """``state`` (in format ``fmt``) renamed and reshaped to ``model``'s keys, in memory."""
    if fmt == "zoo":
        return state
    layout = Layout.of_model(model, head_keys(model), keep_initial=True)
    converted, report = map_state(SCHEMES[fmt], state, layout)
    for line in report.lines()[1:]:
        logger.warning("%s: %s", source, line)
    logger.info("%s: converted %d %s tensors", source, report.num_source, fmt)
    return converted


def load_pretrained(model: nn.Module, path: str, model_name: Optional[str] = None,
                    kwargs: Optional[Dict[str, Any]] = None, classes: Sequence[str] = ()) -> None:
    """Load the weights ``path`` names into ``model``; see :func:`load_state` for what may differ.

    Args:
        model: The model, changed in place.
        path: What ``MODEL.PRETRAINED`` says: a local file, or (with ``model_name``) a weights
            tag, ``True`` / ``False``, or a URL (downloaded into the cache once).
        model_name: The registered name of ``model``, for tags and ``True``.
        kwargs: The builder kwargs ``model`` was built with: a zoo checkpoint that records
            other architecture kwargs is refused (:func:`check_recorded_model`).
        classes: The class names the model will learn, when the data names them: a zoo
            checkpoint's classifier of as many classes follows them by name (rows reordered
            where the names are the same in another order; a fresh classifier, with a warning,
            where they are other classes).
    """
    expected, new_head = None, False
    if model_name is not None:
        source = resolve_pretrained(path, model_name)
        if source.kind == "none":
            return
        expected = source.entry.format if source.entry else None
        new_head = bool(source.entry and source.entry.new_head)
        if _is_hub_file(source):
            fetch(_config_beside(source))  # into the cache, beside the weights
        path = fetch(source)
    state, zoo_run = _read(path)
    recorded = zoo_run
    if recorded is not None and model_name is not None:
        check_recorded_model(recorded, model_name, dict(kwargs or {}), path)
    if recorded is not None and _other_builder(recorded["name"], model_name):
        recorded = None  # e.g. a 2D ResNet's run, inflated into a 3D one: its keys decide
    if all(k.startswith("model.") for k in state) and not any(
            k.startswith("model.") for k in model.state_dict()):
        state = {k[len("model."):]: v for k, v in state.items()}  # a wrapper module's file
    # A zoo checkpoint holds zoo's keys, whatever they look like when they do not fit.
    try:
        fmt = "zoo" if recorded is not None else detect_format(state, model, path)
    except WeightsError:
        if zoo_run is None:
            raise
        raise _not_this_model(path, zoo_run, model_name or type(model).__name__) from None
    if fmt == "zoo" and expected == "pyslowfast":
        fmt = "pyslowfast"  # zoo's MViT has PySlowFast's names: the scheme checks them all
    # Some publishers' files have zoo's own key names for some nets (torchvision's ResNets,
    # gluoncv's ir-CSN, R(2+1)D v2 and TSN): those read as "zoo" and load unchanged.
    if expected and fmt != expected and not (fmt == "zoo" and expected in ("torchvision",
                                                                            "gluoncv")):
        raise WeightsError(f"{path}: the weights table says {expected} but its keys are {fmt}'s; "
                           "the published file changed: report it, or name the file directly")
    hub_classes: List[str] = []
    if fmt == "huggingface":
        hub_classes = _check_hub_config(path, model, state)
    if recorded is not None and fmt == "zoo":
        state, other_classes = _head_by_name(state, model, recorded["classes"], list(classes),
                                             path)
        new_head = new_head or other_classes
    try:
        state = to_model_keys(state, model, fmt, path)
        if hub_classes:  # config.json's id2label names the classifier's rows, as a zoo run's
            state, other_classes = _head_by_name(state, model, hub_classes, list(classes), path)
            new_head = new_head or other_classes
        load_state(model, state, source=path, new_head=new_head)
    except (WeightsError, ConversionError) as e:
        if zoo_run is None:
            if not isinstance(e, ConversionError) or fmt == "zoo":
                raise
            # The converter speaks to zoo-convert-checkpoint users ("--from X: ..."); here the
            # format was told from the keys, so say so and name the model.
            why = re.sub(r"^--from \S+?: (the checkpoint does not fit the model; )?", "",
                         str(e))
            why = re.sub(r"^--from (\S+) converts to", r"zoo converts \1 weights to", why)
            raise WeightsError(f"{path}: read as {fmt} weights (told from its keys), it does not "
                               f"fit {model_name or type(model).__name__}: {why}") from None
        if recorded is None:  # another builder's run, read as another format: not this model
            raise _not_this_model(path, zoo_run, model_name or type(model).__name__) from None
        raise WeightsError(f"{e}; it holds {recorded['name']} built with MODEL.KWARGS "
                           f"{recorded['pairs']}: build the model with them") from None


def _head_by_name(state: Dict[str, torch.Tensor], model: nn.Module, saved: List[str],
                  wanted: List[str], source: str) -> Tuple[Dict[str, torch.Tensor], bool]:
    """A zoo checkpoint's classifier rows in the order of ``wanted`` (the data's class names)
    when the checkpoint names the same classes in another order; ``(state, True)`` when it names
    as many other classes (the model keeps its fresh classifier). Where either side names no
    classes (numbers only), or the counts differ (handled by :func:`load_state`), ``state`` is
    returned as it is."""
    from ...data.lists.annotations import named_classes

    saved, wanted = named_classes(saved), named_classes(wanted)
    head = [k for k in head_keys(model) if k in state]
    if not saved or not wanted or len(saved) != len(wanted) or saved == wanted or not head:
        return state, False
    if any(state[k].shape[0] != len(saved) for k in head):
        return state, False
    if sorted(saved) != sorted(wanted):
        logger.warning("%s: its classifier is for other classes (%s, ...) than the data's (%s, "
                       "...), as many of them: a fresh classifier is trained instead",
                       source, ", ".join(saved[:3]), ", ".join(wanted[:3]))
        return state, True
    order = torch.tensor([saved.index(name) for name in wanted])
    logger.info("%s: its classifier rows reordered to the data's class order", source)
    return {k: (v[order] if k in head else v) for k, v in state.items()}, False


def _not_this_model(path: str, run: Dict[str, Any], model: str) -> WeightsError:
    return WeightsError(
        f"{path} holds a {run['name']} (MODEL.KWARGS {run['pairs']}), not a {model}: set "
        f"CONFIG.MODEL.NAME {run['name']} and its MODEL.KWARGS to fine-tune it, or give weights "
        "of this model")


# File names of Hugging Face weights: a URL naming one gets the config.json beside it too.
_HUB_FILES = ("model.safetensors", "pytorch_model.bin")


def _is_hub_file(source: WeightsSource) -> bool:
    if source.kind != "url":
        return False
    if source.entry is not None:
        return source.entry.format == "huggingface"
    return source.value.rsplit("/", 1)[-1] in _HUB_FILES


def _config_beside(source: WeightsSource) -> WeightsSource:
    """The ``config.json`` next to a Hub weights URL, as a source cached beside the weights."""
    url = (source.entry.url if source.entry else source.value).rsplit("/", 1)[0] + "/config.json"
    return WeightsSource("url", url, cache_path(url), mirror_url(url))


def _check_hub_config(path: str, model: nn.Module, state: Dict[str, torch.Tensor]
                      ) -> List[str]:
    """Check Hugging Face weights' config.json (required for a folder) against ``model``; the
    class names its ``id2label`` gives the classifier's rows (``[]`` when none)."""
    config = find_hub_config(path)
    if config is None and not os.path.isdir(path):
        logger.warning("%s: no config.json beside it; the attention heads and the input size "
                       "it was trained for are not checked", path)
        return []
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    config = read_hub_config(folder)
    check_hub_config(config, model, path, list(state))
    head = state.get("classifier.weight")
    return hub_class_names(config, head.shape[0], path) if head is not None else []


def load_state(model: nn.Module, state: Dict[str, torch.Tensor], source: str = "state",
               new_head: bool = False) -> None:
    """Load ``state`` into ``model``; classifier tensors (:func:`head_keys`) whose shapes differ
    only in the class count are skipped (the model keeps its fresh head) and reported, one line
    per module.

    Any other missing, unexpected or mismatched key is an error that names the keys.

    Args:
        model: The model, changed in place.
        state: Tensors by key (the model's own key names).
        source: Where ``state`` came from, for messages.
        new_head: Keep the model's fresh classifier whatever the class count (gluoncv's
            ``_custom`` nets start from a Kinetics backbone only).
    """
    own = model.state_dict()
    head = set(head_keys(model))
    skipped = defaultdict(list)
    load = {}
    mismatched, resized = [], []
    resize = getattr(model, "resize_position_tensor", None)
    for k, v in state.items():
        if k not in own:
            continue
        v = fit_position(resize, k, v, own[k].shape, resized)
        if own[k].shape == v.shape and not (new_head and k in head):
            load[k] = v
        elif k in head and own[k].dim() == v.dim() and own[k].shape[1:] == v.shape[1:]:
            # A classifier weight/bias whose first dim (classes) differs: keep the fresh init.
            skipped[k.rsplit(".", 1)[0]].append(f"{k.rsplit('.', 1)[1]} {tuple(v.shape)}")
        else:
            mismatched.append(f"{k} {tuple(v.shape)} vs model {tuple(own[k].shape)}")
    # BatchNorm's step counter: files saved without it load (PyTorch's own load_state_dict
    # accepts them); the model keeps its own.
    counters = [k for k in own if k not in state and k.endswith(".num_batches_tracked")]
    missing = [k for k in own if k not in state and k not in counters]
    unexpected = [k for k in state if k not in own]
    if mismatched or missing or unexpected:
        parts = []
        if mismatched:
            parts.append("shape mismatch: " + ", ".join(mismatched[:8]))
            if not head:
                parts.append("no classifier found to re-initialise (define get_classifier(), "
                             "see zoo/models/classifier.py)")
            else:
                parts += _other_head(model, state, own, head)
        if missing:
            parts.append(f"missing from checkpoint ({len(missing)}): " + ", ".join(missing[:8]))
        if unexpected:
            parts.append(f"not in model ({len(unexpected)}): " + ", ".join(unexpected[:8]))
        raise WeightsError(f"{source} does not fit {type(model).__name__}: " + "; ".join(parts))
    model.load_state_dict(load, strict=False)
    if resized:
        logger.warning("%s: %s", source, resized_line(resized))
    if counters:
        logger.warning("%s: %s", source, filled_line(counters,
                                                     "num_batches_tracked absent from source"))
    for group, items in skipped.items():
        logger.warning("%s: re-initialised %s (checkpoint had %s)", source, group, ", ".join(items))
    logger.info("loaded %d tensors from %s", len(load), source)


def _other_head(model: nn.Module, state: Dict[str, torch.Tensor], own: Dict[str, torch.Tensor],
                head: set) -> List[str]:
    """For a model whose classifier is found by the last-``nn.Linear`` rule (it names none): a
    hint when another ``nn.Linear`` differs from the file only in its outputs, as a new class
    count would make it, as that layer is likely the real classifier."""
    if names_classifier(model):
        return []
    linear = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    likely = sorted({k.rsplit(".", 1)[0] for k, v in state.items()
                     if k in own and k not in head and k.endswith(".weight")
                     and k.rsplit(".", 1)[0] in linear and own[k].shape[0] != v.shape[0]
                     and own[k].shape[1:] == v.shape[1:]})
    if not likely:
        return []
    found = sorted({k.rsplit(".", 1)[0] for k in head})
    return [last_linear_note(", ".join(found), likely[0])]


def inflate_from_file(model: nn.Module, path: str) -> None:
    """Load ``model`` (a zoo ``ResNet3d``) with the 2D ResNet weights in ``path``, inflated
    (:func:`zoo.models.weights.convert.torchvision.inflate_state_dict`).

    Args:
        model: The 3D model, changed in place.
        path: A torchvision ``resnet50`` state-dict file or a zoo checkpoint of ``resnet50``.
    """
    load_state(model, inflate_state_dict(model, read_state_dict(path)), source=path)
    logger.info("inflated %s from the 2D weights in %s", type(model).__name__, path)
