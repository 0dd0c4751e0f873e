"""Checkpoint converters: PySlowFast, PyTorchVideo, MMAction2, torchvision, gluoncv.torch and
Hugging Face files -> zoo.

Python::

    from zoo.models.weights.convert import convert_checkpoint
    convert_checkpoint("SLOWFAST_8x8_R50.pyth", "sf.pth", "pyslowfast", "slowfast_8x8_resnet50")
    model = zoo.create_model("slowfast_8x8_resnet50", num_classes=400, pretrained="sf.pth")

Command line: ``python tools/convert_checkpoint.py --from pyslowfast --model NAME IN OUT``. The
source may be a ``torch.save`` file, a ``.safetensors`` file or (``--from huggingface``) a Hub
folder, whose ``config.json`` is checked against the model first.

Every conversion is checked whole: each source tensor must map to a zoo key (an unknown key is an
error, never silently dropped), each zoo tensor must be filled, and every shape must match. The
class count is read from the source's classifier, so the written checkpoint loads with
``create_model(name, num_classes=N, pretrained=OUT)`` for any N (a different N re-initialises the
head). Each scheme module's docstring lists its key mapping and any inexactness.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional, Tuple

import torch

from ....utils.checkpoint_io import (
    CheckpointWriteError,
    atomic_save,
    make_checkpoint,
    write_failure,
)
from ...classifier import head_keys
from ...registry import MODEL_REGISTRY, model_facts
from ..preprocessor import Normalization, find_processor_file, read_processor
from .common import ConversionError, Layout, Report, Scheme, map_state, read_source
from .gluoncv import GluonCVScheme
from .huggingface import (
    HuggingFaceScheme,
    check_hub_config,
    find_hub_config,
    hub_class_names,
    read_hub_config,
    read_hub_folder,
)
from .mmaction2 import MMAction2Scheme
from .pyslowfast import PySlowFastScheme
from .pytorchvideo import PyTorchVideoScheme
from .torchvision import TorchvisionScheme

logger = logging.getLogger(__name__)

__all__ = ["SCHEMES", "ConversionError", "Report", "convert_checkpoint", "convert_state_dict"]

SCHEMES: Dict[str, Scheme] = {
    s.name: s for s in (PySlowFastScheme(), PyTorchVideoScheme(), MMAction2Scheme(),
                        TorchvisionScheme(), GluonCVScheme(), HuggingFaceScheme())
}


def _scheme(name: str) -> Scheme:
    if name not in SCHEMES:
        raise ConversionError(f"unknown source scheme {name!r}; choose from {sorted(SCHEMES)}")
    return SCHEMES[name]


def _meta_model(model_name: str, num_classes: int, kwargs: Dict[str, Any]) -> torch.nn.Module:
    """The registered model built on the meta device: shapes only, no memory, no init cost."""
    with torch.device("meta"):
        return MODEL_REGISTRY.get(model_name)(num_classes=num_classes, **kwargs)


def convert_state_dict(
    source: Dict[str, torch.Tensor], scheme: str, model_name: str, **model_kwargs: Any
) -> Tuple[Dict[str, torch.Tensor], int, Report]:
    """Map a foreign state dict onto the registered model ``model_name``.

    Args:
        source: The foreign tensors (``module.`` already stripped).
        scheme: ``"pyslowfast"``, ``"pytorchvideo"``, ``"mmaction2"``, ``"torchvision"``,
            ``"gluoncv"`` or ``"huggingface"``.
        model_name: A registered zoo model.
        **model_kwargs: Builder arguments the source architecture needs (e.g. ``depth``,
            ``width``, ``fuse_norm_act=False``).

    Returns:
        ``(state, num_classes, report)``: the zoo state dict, the class count of its head and
        what was done.

    Raises:
        ConversionError: when any tensor is left over, missing or of the wrong shape.
    """
    sch = _scheme(scheme)
    # A name with a fixed class count (gluoncv's "_sthsthv2", "_kinetics700") is built with it.
    probe = _meta_model(model_name, model_facts(model_name).get("num_classes") or 400,
                        model_kwargs)
    heads = head_keys(probe)
    layout = Layout.of_model(probe, heads)
    state, report = map_state(sch, source, layout)
    num_classes = state[heads[0]].shape[0]
    # Final check against the model built with the source's class count: every key and shape.
    want = {k: v.shape for k, v in _meta_model(model_name, num_classes, model_kwargs)
            .state_dict().items()}
    bad = [k for k in want if k not in state or state[k].shape != want[k]]
    if bad or len(want) != len(state):
        raise ConversionError(f"converted state does not fit {model_name}: {bad[:8]}")
    return state, num_classes, report


def _cfg_text(model_name: str, num_classes: int, model_kwargs: Dict[str, Any],
              normalization: Optional[Normalization] = None) -> str:
    import yaml

    kwargs = [x for k, v in model_kwargs.items() for x in (k, repr(v) if not isinstance(v, str)
                                                            else v)]
    data: Dict[str, Any] = {"NUM_CLASSES": int(num_classes)}
    if normalization is not None:  # what the weights were trained with, for testing and predict
        data.update(MEAN=normalization.mean, STD=normalization.std)
    return yaml.safe_dump({"CONFIG": {"MODEL": {"NAME": model_name, "KWARGS": kwargs},
                                      "DATA": data}})


def convert_checkpoint(
    src: str,
    out: str,
    scheme: str,
    model_name: str,
    model_kwargs: Optional[Dict[str, Any]] = None,
    allow_pickle: bool = False,
) -> Report:
    """Convert the checkpoint file ``src`` and write a zoo checkpoint to ``out``.

    The written dict has the zoo checkpoint keys (``model``, ``optimizer``, ``scheduler``,
    ``scaler``, ``epoch``, ``iteration``, ``cfg``, ``rng``; all but ``model`` and ``cfg`` empty)
    plus ``converted_from``, and ``classes`` (the class names, as a zoo run records its data's)
    when a Hugging Face config.json's ``id2label`` names every class
    (:func:`~zoo.models.weights.convert.huggingface.hub_class_names`); it loads with
    ``torch.load(weights_only=True)``.

    Args:
        src: Source checkpoint file.
        out: Output path (written atomically).
        scheme: Source scheme (see :data:`SCHEMES`).
        model_name: Registered zoo model to convert to.
        model_kwargs: Builder arguments, also recorded in ``cfg`` as ``MODEL.KWARGS``.
        allow_pickle: Unpickle the source fully (runs code in the file; trusted files only).

    Returns:
        The :class:`Report` of the conversion.
    """
    model_kwargs = dict(model_kwargs or {})
    if os.path.isdir(src):  # a Hugging Face Hub folder
        source = read_hub_folder(src)
    else:
        source = read_source(src, _scheme(scheme).state_keys, allow_pickle=allow_pickle)
    hub_config = None
    if scheme == "huggingface" and (os.path.isdir(src) or find_hub_config(src)):
        # What the Hub folder says the network is, checked before any key.
        folder = src if os.path.isdir(src) else os.path.dirname(os.path.abspath(src))
        probe = _meta_model(model_name, model_facts(model_name).get("num_classes") or 400,
                            model_kwargs)
        hub_config = read_hub_config(folder)
        check_hub_config(hub_config, probe, src, list(source))
    state, num_classes, report = convert_state_dict(source, scheme, model_name, **model_kwargs)
    # config.json's id2label names the classes, as a zoo run's checkpoint records its data's.
    classes = hub_class_names(hub_config, num_classes, src) if hub_config else []
    # preprocessor_config.json's normalisation is recorded as the checkpoint's DATA.MEAN / STD.
    processor = find_processor_file(src) if scheme == "huggingface" else None
    normalization = read_processor(processor) if processor else None
    if normalization is not None:
        logger.info("DATA.MEAN %s and DATA.STD %s recorded from %s", normalization.mean,
                    normalization.std, processor)
    ckpt = make_checkpoint(
        state, _cfg_text(model_name, num_classes, model_kwargs, normalization),
        converted_from={"scheme": scheme, "file": os.path.basename(src),
                        "num_tensors": len(source)},
        **({"classes": classes} if classes else {}))
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        atomic_save(ckpt, out, hint="free space or write OUT to another disk")
    except OSError as e:  # the folder could not be made
        raise ConversionError(str(write_failure(out, e, "write OUT to a writable folder"))) from e
    except CheckpointWriteError as e:
        raise ConversionError(str(e)) from e
    for line in report.lines():
        logger.info("%s", line)
    return report
