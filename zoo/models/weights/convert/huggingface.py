"""Hugging Face files: ``VideoMAEForVideoClassification`` keys, Hub folders and their
``config.json``.

Key scheme (``N`` = block; ``A`` = ``videomae.encoder.layer.N.attention``)::

    videomae.embeddings.patch_embeddings.projection   -> patch_embed.proj
    A.attention.{query,key,value}.weight              -> blocks.N.attn.qkv.weight (stacked q, k, v)
    A.attention.q_bias  (or A.attention.query.bias)   -> blocks.N.attn.q_bias
    A.attention.v_bias  (or A.attention.value.bias)   -> blocks.N.attn.v_bias
    A.output.dense                                    -> blocks.N.attn.proj
    videomae.encoder.layer.N.layernorm_before / _after -> blocks.N.norm1 / norm2
    videomae.encoder.layer.N.intermediate.dense       -> blocks.N.mlp.fc1
    videomae.encoder.layer.N.output.dense             -> blocks.N.mlp.fc2
    videomae.layernorm                                -> norm (models without mean pooling)
    fc_norm, classifier                               -> fc_norm, head

The Hub's files and ``save_pretrained`` write ``q_bias`` / ``v_bias``; transformers 5's
in-memory ``state_dict()`` names them ``query.bias`` / ``value.bias``: both are read. A
``key.bias`` (VideoMAE has none) is an error, as is any other key left over.

A Hub folder (what ``save_pretrained`` writes) holds ``config.json`` and ``model.safetensors``
(or ``pytorch_model.bin``, or shards listed in ``model.safetensors.index.json`` /
``pytorch_model.bin.index.json``). :func:`check_hub_config` compares what ``config.json`` says
with the model being built; a mismatch is one line naming each key that differs, the file's
value and the model's.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn as nn

from ..folder import file_beside, read_json_object
from .common import PARAM, ConversionError, Layout, Scheme, read_source

logger = logging.getLogger(__name__)

# config.json keys that describe the clip the weights were trained on, not the weights: the
# position table is a fixed sine table that follows the model's clip, so another clip is a
# fine-tune at another size (a warning), not another network.
_CLIP_KEYS = ("num_frames", "image_size")

__all__ = ["HuggingFaceScheme", "check_hub_config", "find_hub_config", "hub_class_names",
           "looks_like_huggingface", "read_hub_config", "read_hub_folder"]

_LAYER = r"^videomae\.encoder\.layer\.(\d+)\."
_QKV = re.compile(_LAYER + r"attention\.attention\.(query|key|value)\.weight$")
_FUSED = "videomae.encoder.layer.{}.attention.attention.qkv.weight"
_RULES = [
    (re.compile(rf"^videomae\.embeddings\.patch_embeddings\.projection\.{PARAM}$"),
     "patch_embed.proj.{0}"),
    (re.compile(_LAYER + r"attention\.attention\.qkv\.weight$"), "blocks.{0}.attn.qkv.weight"),
    (re.compile(_LAYER + r"attention\.attention\.(?:q_bias|query\.bias)$"),
     "blocks.{0}.attn.q_bias"),
    (re.compile(_LAYER + r"attention\.attention\.(?:v_bias|value\.bias)$"),
     "blocks.{0}.attn.v_bias"),
    (re.compile(_LAYER + rf"attention\.output\.dense\.{PARAM}$"), "blocks.{0}.attn.proj.{1}"),
    (re.compile(_LAYER + rf"layernorm_before\.{PARAM}$"), "blocks.{0}.norm1.{1}"),
    (re.compile(_LAYER + rf"layernorm_after\.{PARAM}$"), "blocks.{0}.norm2.{1}"),
    (re.compile(_LAYER + rf"intermediate\.dense\.{PARAM}$"), "blocks.{0}.mlp.fc1.{1}"),
    (re.compile(_LAYER + rf"output\.dense\.{PARAM}$"), "blocks.{0}.mlp.fc2.{1}"),
    (re.compile(rf"^videomae\.layernorm\.{PARAM}$"), "norm.{0}"),
    (re.compile(rf"^fc_norm\.{PARAM}$"), "fc_norm.{0}"),
    (re.compile(rf"^classifier\.{PARAM}$"), "head.{0}"),
]

# Weight files of a Hub folder, in the order transformers prefers them.
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


# Tensors only VideoMAEForPreTraining has (the masked-autoencoder decoder); fine-tuning drops them,
# as transformers' from_pretrained and VideoMAE's run_class_finetuning.py do.
_PRETRAINING = ("decoder.", "encoder_to_decoder.", "mask_token")
# The top-level modules of a bare VideoMAEModel, whose keys have no "videomae." prefix.
_BASE_MODEL = ("embeddings.", "encoder.", "layernorm.")


def looks_like_huggingface(keys: Sequence[str]) -> bool:
    """Whether state-dict keys are a Hugging Face VideoMAE model's (a classifier, a pretraining
    model or a bare ``VideoMAEModel``)."""
    return any(k.startswith("videomae.") for k in keys) or (
        any(k.startswith("embeddings.patch_embeddings.") for k in keys)
        and any(k.startswith("encoder.layer.") for k in keys))


class HuggingFaceScheme(Scheme):
    """Hugging Face ``VideoMAEForVideoClassification`` -> zoo's VideoMAE."""

    name = "huggingface"
    kinds = ("videomae",)
    state_keys = ("state_dict", "model")

    def prepare(self, source: Dict[str, torch.Tensor], layout: Layout
                ) -> Dict[str, torch.Tensor]:
        """Stack each block's query, key and value weights into one ``qkv`` weight (zoo's one
        projection); a block missing any of the three keeps them apart (and they are reported).

        Weights without a classifier - ``VideoMAEForPreTraining`` (its decoder is dropped) or a
        bare ``VideoMAEModel`` (its keys get the ``videomae.`` prefix) - are the encoder only:
        the model keeps its fresh ``fc_norm`` and head (one log line says so)."""
        if not any(k.startswith("videomae.") for k in source):
            source = {f"videomae.{k}" if k.startswith(_BASE_MODEL) else k: v
                      for k, v in source.items()}
        decoder = [k for k in source if k.startswith(_PRETRAINING)]
        source = {k: v for k, v in source.items() if not k.startswith(_PRETRAINING)}
        if not any(k.startswith(("classifier.", "fc_norm.")) for k in source):
            if "norm.weight" not in layout.shapes:  # the model pools into a fresh fc_norm
                source = {k: v for k, v in source.items()
                          if not k.startswith("videomae.layernorm.")}
            if not layout.initial:  # zoo-convert-checkpoint: a file needs a classifier
                raise ConversionError(
                    "--from huggingface: VideoMAE pretraining (or base-model) weights have no "
                    "classifier to convert; give them to training as CONFIG.MODEL.PRETRAINED "
                    "directly (the encoder loads, the head starts fresh)")
            # What the model has beyond the encoder starts fresh: fc_norm (mean pooling) or the
            # final norm where the weights lack it, and the classifier.
            fresh = {hf: layout.initial[ours] for hf, ours in (
                ("fc_norm.weight", "fc_norm.weight"), ("fc_norm.bias", "fc_norm.bias"),
                ("videomae.layernorm.weight", "norm.weight"),
                ("videomae.layernorm.bias", "norm.bias"),
                ("classifier.weight", "head.weight"), ("classifier.bias", "head.bias"))
                if ours in layout.initial and hf not in source}
            source.update(fresh)
            if fresh or decoder:
                started = [name for key, name in (
                    ("fc_norm.weight", "fc_norm"), ("videomae.layernorm.weight", "the final norm"),
                    ("classifier.weight", "the classifier")) if key in fresh]
                kept = ("" if "norm.weight" not in layout.shapes or "videomae.layernorm.weight"
                        in fresh else " (its final norm too)")
                logger.info("VideoMAE %s weights: the encoder is loaded%s%s; %s", "pretraining"
                            if decoder else "base-model", kept,
                            f", its {len(decoder)} decoder tensors are not used" if decoder
                            else "", f"{' and '.join(started)} start"
                            f"{'s' if len(started) == 1 else ''} fresh" if started else
                            "they have no classifier")
        _check_pooling(source, layout)
        parts: Dict[str, Dict[str, torch.Tensor]] = {}
        out = {}
        for key, tensor in source.items():
            m = _QKV.match(key)
            if m:
                parts.setdefault(m.group(1), {})[m.group(2)] = tensor
            else:
                out[key] = tensor
        for layer, qkv in parts.items():
            if set(qkv) == {"query", "key", "value"}:
                out[_FUSED.format(layer)] = torch.cat([qkv["query"], qkv["key"], qkv["value"]])
            else:
                prefix = f"videomae.encoder.layer.{layer}.attention.attention."
                out.update({f"{prefix}{name}.weight": t for name, t in qkv.items()})
        return out

    def mapper(self, source_keys: Sequence[str], layout: Layout) -> Callable[[str], Optional[str]]:
        def to_zoo(key: str) -> Optional[str]:
            for pattern, target in _RULES:
                m = pattern.match(key)
                if m:
                    return target.format(*m.groups())
            return None

        return to_zoo


def _check_pooling(source: Dict[str, torch.Tensor], layout: Layout) -> None:
    """A classifier's file trained with the other pooling than the model's (``use_mean_pooling``:
    ``fc_norm`` after mean pooling, or ``videomae.layernorm`` before the class token's row) is one
    line naming the kwarg, not a list of keys."""
    pools = "fc_norm.weight" in source
    final_norm = "videomae.layernorm.weight" in source
    if pools == final_norm or "classifier.weight" not in source:
        return
    if pools and "fc_norm.weight" not in layout.shapes and "norm.weight" in layout.shapes:
        kwarg = True
    elif final_norm and "norm.weight" not in layout.shapes and "fc_norm.weight" in layout.shapes:
        kwarg = False
    else:
        return
    raise ConversionError(
        f"these VideoMAE weights were trained with use_mean_pooling={kwarg} (they hold "
        f"{'fc_norm' if kwarg else 'videomae.layernorm and no fc_norm'}) and the model was "
        f"built with {not kwarg}: set CONFIG.MODEL.KWARGS ['use_mean_pooling', {kwarg}]")


def read_hub_config(folder: str) -> Dict[str, Any]:
    """The ``config.json`` of a Hub folder."""
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise ConversionError(f"{folder}: no config.json (a Hub folder as save_pretrained "
                              "writes it holds config.json and model.safetensors)")
    return read_json_object(path, ConversionError)


def find_hub_config(path: str) -> Optional[str]:
    """``config.json`` in the folder ``path`` or beside the file ``path``; None if absent."""
    return file_beside(path, "config.json")


def read_hub_folder(folder: str) -> Dict[str, torch.Tensor]:
    """The tensors of a Hub folder's weights (``model.safetensors``, ``pytorch_model.bin`` or
    the shards an index names)."""
    for name in _WEIGHT_FILES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return read_source(path, ("state_dict", "model"))
    for name in _INDEX_FILES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            index = read_json_object(path, ConversionError)
            shards = sorted(set(index.get("weight_map", {}).values()))
            if not shards:
                raise ConversionError(f"{path}: its weight_map names no files")
            state: Dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(read_source(os.path.join(folder, shard), ("state_dict",)))
            return state
    raise ConversionError(f"{folder}: no {' / '.join(_WEIGHT_FILES + _INDEX_FILES)} in it")


def _one_value(value: Any) -> Any:
    """A size given as ``[224, 224]`` read as 224 (a non-square one stays a list)."""
    if isinstance(value, (list, tuple)) and len(set(value)) == 1:
        return value[0]
    return value


def _videomae_values(model: nn.Module) -> Dict[str, Any]:
    """What a VideoMAE model would write in config.json, by key."""
    return {
        "hidden_size": model.embed_dim,
        "num_hidden_layers": len(model.blocks),
        "num_attention_heads": model.blocks[0].attn.num_heads if len(model.blocks) else 0,
        "patch_size": model.patch,
        "tubelet_size": model.tubelet,
        "num_frames": model.frames,
        "image_size": model.crop_size,
        "use_mean_pooling": model.use_mean_pooling,
        "qv_bias": model.qv_bias,
        "intermediate_size": model.blocks[0].mlp.fc1.out_features if len(model.blocks) else 0,
    }


# VideoMAEConfig's defaults, for keys a config.json leaves out.
_HF_DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                "patch_size": 16, "tubelet_size": 2, "num_frames": 16, "image_size": 224,
                "use_mean_pooling": True, "qv_bias": True, "intermediate_size": 3072,
                "hidden_act": "gelu", "layer_norm_eps": 1e-12}

# The builder kwarg of each config.json key, for the line that says how to build the model.
_KWARGS = {"hidden_size": "embed_dim", "num_hidden_layers": "depth",
           "num_attention_heads": "num_heads", "patch_size": "patch", "tubelet_size": "tubelet",
           "num_frames": "frames", "image_size": "crop_size"}

# transformers' names of the activation zoo's MLP computes: exact (erf) GELU.
_GELU = ("gelu", "gelu_python")

# LayerNorm epsilons closer than this compute the same net: Hugging Face's 1e-12 against zoo's
# 1e-6 moves a LayerNorm's output far less than float32 rounding of a trained model's features.
EPS_TOLERANCE = 1e-5


def hub_class_names(config: Dict[str, Any], num_classes: int, where: str) -> List[str]:
    """The class names of a config.json's ``id2label`` in id order, for the converted
    checkpoint's ``classes`` entry (what testing and prediction print): only when it names
    every one of the ``num_classes`` ids and is not transformers' placeholder ``LABEL_<id>``
    set; else ``[]`` (ids are printed), with one log line saying why when it has names."""
    id2label = config.get("id2label")
    if not isinstance(id2label, dict) or not id2label:
        return []
    try:
        names = {int(k): str(v) for k, v in id2label.items()}
    except (TypeError, ValueError):
        names = {}
    if sorted(names) != list(range(num_classes)):
        logger.info("%s: config.json id2label does not name the classifier's %d classes (ids "
                    "0..%d) one each; the checkpoint records no class names", where,
                    num_classes, num_classes - 1)
        return []
    ordered = [names[i] for i in range(num_classes)]
    if ordered == [f"LABEL_{i}" for i in range(num_classes)]:  # transformers' default
        return []
    return ordered


def check_hub_config(config: Dict[str, Any], model: nn.Module, where: str,
                     keys: Sequence[str] = ()) -> None:
    """Stop with one line when ``config`` (a config.json) describes another network than
    ``model``: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
    patch_size, tubelet_size, use_mean_pooling, the q/v bias flag (``qv_bias``, or ``qkv_bias``
    in older files), hidden_act (zoo computes exact GELU) and layer_norm_eps (beyond
    :data:`EPS_TOLERANCE`). The line names every key that differs. A num_frames or image_size
    of another clip than the model's gets one warning. A key the file leaves out takes
    transformers' default.

    Args:
        config: The config.json's content.
        model: The zoo VideoMAE being loaded.
        where: The file or folder, for messages.
        keys: The weights' keys, where known: weights without a classifier (pretraining or
            base-model weights, decoder tensors or not) leave use_mean_pooling unchecked, as
            the model's head starts fresh whatever they pooled.

    Raises:
        ConversionError: naming each key, the file's value and the model's.
    """
    model_type = config.get("model_type", "videomae")
    if model_type != "videomae":
        raise ConversionError(f"{where}: model_type {model_type!r}; zoo reads Hugging Face "
                              "VideoMAE folders (model_type 'videomae')")
    if not all(hasattr(model, a) for a in ("embed_dim", "blocks", "tubelet", "qv_bias")):
        raise ConversionError(f"{where}: a VideoMAE config.json, but the model is "
                              f"{type(model).__name__}; build a videomae_vit_* model")
    config = dict(config)
    if "qv_bias" not in config and "qkv_bias" in config:
        config["qv_bias"] = config["qkv_bias"]
    ours = _videomae_values(model)
    encoder_only = bool(keys) and (not any(k.startswith("classifier.") for k in keys)
                                   or any(k.startswith(_PRETRAINING) for k in keys))
    if encoder_only or set(config.get("architectures") or []) & {"VideoMAEForPreTraining",
                                                                  "VideoMAEModel"}:
        # Pretraining or base-model weights: no classifier, so how it pooled does not matter
        # (the model keeps its own pooling and a fresh fc_norm).
        ours.pop("use_mean_pooling")
    differ, kwargs = [], []
    for key, value in ours.items():
        theirs = _one_value(config.get(key, _HF_DEFAULTS[key]))
        if theirs != value and key in _CLIP_KEYS:
            logger.warning("%s: config.json %s is %r but the model has %r: the weights fit (the "
                           "position table is a fixed sine table that follows the clip); they "
                           "were trained on other clips", where, key, theirs, value)
        elif theirs != value:
            name = "qv_bias (qkv_bias)" if key == "qv_bias" else key
            differ.append(f"config.json {name} is {theirs!r} but the model has {value!r}")
            if key == "intermediate_size":
                hidden = _one_value(config.get("hidden_size", _HF_DEFAULTS["hidden_size"]))
                kwargs += ["mlp_ratio", theirs / hidden if hidden else theirs]
            else:
                kwargs += [_KWARGS.get(key, key), theirs]
    eps = config.get("layer_norm_eps", _HF_DEFAULTS["layer_norm_eps"])
    model_eps = model.blocks[0].norm1.eps if len(model.blocks) else eps
    if isinstance(eps, (int, float)) and abs(eps - model_eps) > EPS_TOLERANCE:
        differ.append(f"config.json layer_norm_eps is {eps!r} but the model has {model_eps!r}")
        kwargs += ["norm_eps", eps]
    act = config.get("hidden_act", _HF_DEFAULTS["hidden_act"])
    if act not in _GELU:
        differ.append(f"config.json hidden_act is {act!r} but zoo's VideoMAE computes GELU "
                      "(hidden_act 'gelu'): no kwarg builds it; use weights of a GELU VideoMAE")
    if differ:
        fix = (f"; build the model to fit (MODEL.KWARGS {kwargs!r}) or use weights of this "
               "model" if kwargs else "")
        raise ConversionError(f"{where}: {'; '.join(differ)}{fix}")
