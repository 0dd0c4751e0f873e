"""TorchScript and ONNX export of registered models, each verified against the eager model.

Export traces the model in eval mode on one example clip, so shapes that the forward derives
from the input (SlowFast's slow-frame indices, window padding) are fixed to the example's T, H
and W; the batch axis stays dynamic. SlowFast is exported with its single-tensor input: the slow
pathway is picked inside the graph, so a deployed model takes one ``(B, C, T, H, W)`` clip.

ONNX uses torch's TorchScript-based exporter (``dynamo=False``), which needs no extra package;
verification runs the file in onnxruntime. Both checks report the max absolute difference of the
logits from the eager model's.

torch 2.14 marks TorchScript (``torch.jit.trace`` / ``load``) deprecated in favour of
``torch.export``; it still works and is what C++ / LibTorch deployments load, so zoo keeps it and
silences that FutureWarning inside these functions.
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..utils.errors import UserError
from .checkpoint_model import clip_of_kwargs

# torch.onnx.export's choice of exporter: ``dynamo`` came in torch 2.5 (and became the default in
# 2.9); before it the TorchScript-based exporter is the only one.
_TORCHSCRIPT_EXPORTER = ({"dynamo": False}
                         if "dynamo" in inspect.signature(torch.onnx.export).parameters else {})

logger = logging.getLogger(__name__)

__all__ = ["FORMATS", "ExportError", "export_model", "export_onnx", "export_torchscript",
           "verify_onnx", "verify_torchscript"]

FORMATS = ("torchscript", "onnx")


class ExportError(UserError, RuntimeError):
    """An export does not reproduce the eager model: its output has another shape, or differs by
    more than the accepted tolerance (``--atol`` / ``--rtol`` of zoo-export)."""


def export_torchscript(model: nn.Module, example: torch.Tensor, path: str) -> str:
    """Trace ``model`` (eval mode) on ``example`` and save it to ``path``; returns the path."""
    model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        # Python-side shape checks (e.g. SlowFast's frame count) become constants: expected.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=r".*torch\.jit", category=FutureWarning)
        traced = torch.jit.trace(model, example, check_trace=False)
        traced.save(path)
    return path


def export_onnx(model: nn.Module, example: torch.Tensor, path: str, opset: int = 17,
                dynamic_batch: bool = True) -> str:
    """Export ``model`` (eval mode) to ONNX with input ``clip`` and output ``logits``.

    Args:
        model: The model.
        example: An input tensor; its non-batch sizes are fixed in the graph.
        path: Output ``.onnx`` file.
        opset: ONNX opset version.
        dynamic_batch: Leave the batch axis of input and output free.
    """
    model.eval()
    axes = {"clip": {0: "batch"}, "logits": {0: "batch"}} if dynamic_batch else None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        torch.onnx.export(model, (example,), path, input_names=["clip"],
                          output_names=["logits"], opset_version=opset, dynamic_axes=axes,
                          **_TORCHSCRIPT_EXPORTER)
    return path


def _max_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.shape != want.shape:
        raise ExportError(f"exported model output {tuple(got.shape)} != eager "
                           f"{tuple(want.shape)}")
    return (got.float() - want.float()).abs().max().item()


def verify_torchscript(path: str, model: nn.Module, example: torch.Tensor) -> float:
    """Max abs difference between the saved TorchScript model's and ``model``'s logits."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit", category=FutureWarning)
        loaded = torch.jit.load(path, map_location="cpu")
    with torch.no_grad():
        return _max_diff(loaded(example), model.eval()(example))


def verify_onnx(path: str, model: nn.Module, example: torch.Tensor) -> float:
    """Max abs difference between onnxruntime's and ``model``'s logits.

    Raises:
        ImportError: when onnxruntime is not installed (``pip install onnxruntime``).
    """
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ImportError("verifying ONNX needs onnxruntime: pip install onnxruntime") from e
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (out,) = session.run(["logits"], {"clip": example.numpy()})
    with torch.no_grad():
        return _max_diff(torch.from_numpy(out), model.eval()(example))


def export_model(
    name: Optional[str],
    out_dir: str,
    formats: Sequence[str] = FORMATS,
    num_classes: Optional[int] = None,
    pretrained: Optional[str] = None,
    input_shape: Optional[Tuple[int, ...]] = None,
    verify: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-5,
    model_kwargs: Optional[Dict[str, Any]] = None,
    seed: int = 0,
) -> Dict[str, Dict[str, Any]]:
    """Build a registered model, export it in each format and check the exports run.

    Args:
        name: Registered model name (None: the one a zoo run's checkpoint in ``pretrained``
            records).
        out_dir: Folder for ``{name}.pt`` (TorchScript) and ``{name}.onnx``.
        formats: Any of ``"torchscript"``, ``"onnx"``.
        num_classes: Head size (None: the checkpoint's, or that of the classifier in a local
            weights file or folder, else the model's facts, else 400).
        pretrained: Weights to load first. A zoo run's checkpoint is built as testing builds
            it: its recorded model, kwargs and class count (each unless given; a given value
            that differs is reported and the checkpoint's used) and its EMA weights when it has
            them. Other weights (a file in another project's format, a tag, a URL) load into
            the model ``name`` builds.
        input_shape: Example input shape (default: batch 1 at the clip the model is built
            for: its kwargs ``frames`` / ``crop_size`` where it takes them (MViT, VideoMAE; a
            converted checkpoint records only those), else the clip length and crop a zoo run's
            checkpoint was trained on, else the model's facts).
        verify: Run each export and compare its logits with eager.
        atol: Accepted max-abs difference ...
        rtol: ... plus this fraction of the largest eager logit (float32 rounding grows with
            the logits' scale; randomly initialised deep nets can have logits in the 1e4s).
        model_kwargs: Builder arguments (e.g. small widths; a zoo run's checkpoint: its own).
        seed: Seed of the random example clip (and of the weights when not pretrained).

    Returns:
        Per format: ``path`` and, when verified, ``max_abs_diff`` and ``max_abs_logit``.

    Raises:
        ExportError: when a verified export differs from eager by more than
            ``atol + rtol * max_abs_logit``, or the model does not run on the example clip.
    """
    from ..models.build import model_facts
    from ..models.flops import facts_input_shape

    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown export formats {unknown}; choose from {FORMATS}")
    torch.manual_seed(seed)
    name, model, trained_on, built_for = _model_to_export(name, num_classes, pretrained,
                                                          model_kwargs)
    model.eval()
    clip = {**model_facts(name), **trained_on, **built_for}
    shape = tuple(input_shape or facts_input_shape(clip))
    example = torch.randn(shape)
    try:
        with torch.no_grad():
            scale = model(example).abs().max().item()
    except UserError as e:  # the model's own line names the config keys of a training run
        raise ExportError(_clip_refused(name, shape, tuple(facts_input_shape(clip)),
                                        type(e).__name__)) from None
    os.makedirs(out_dir, exist_ok=True)
    results: Dict[str, Dict[str, Any]] = {}
    for fmt in formats:
        results[fmt] = _export_one(fmt, name, model, example, out_dir)
        if verify:
            results[fmt].update(_verify_one(fmt, name, results[fmt]["path"], model, example,
                                            atol, rtol, scale))
    return results


def _model_to_export(name: Optional[str], num_classes: Optional[int], pretrained: Optional[str],
                     model_kwargs: Optional[Dict[str, Any]]
                     ) -> Tuple[str, nn.Module, Dict[str, int], Dict[str, int]]:
    """``(name, model, the clip it was trained on, the clip it is built for)`` with the weights
    of ``pretrained`` (see :func:`export_model`); each clip as model-facts keys
    (``input_frames``, ``crop_size``): the first only those a zoo run's checkpoint records in
    DATA, the second only those its builder kwargs (the checkpoint's, else ``model_kwargs``)
    give (:func:`clip_of_kwargs`)."""
    from ..models.build import create_model
    from ..utils.checkpoint_io import recorded_config
    from .checkpoint_model import read_zoo_run, zoo_run_model

    state = read_zoo_run(pretrained) if pretrained else None
    if state is not None:
        name, model, classes, kwargs = zoo_run_model(pretrained, state, name, num_classes,
                                                     model_kwargs)
        logger.info("%s: a zoo checkpoint of %s, %d classes%s", pretrained, name, classes,
                    ", its EMA weights" if state.get("ema") else "")
        config = recorded_config(state).get("CONFIG")
        data = config.get("DATA") if isinstance(config, dict) else None
        trained_on = {}
        if isinstance(data, dict) and int(data.get("NUM_SEGMENT", 1) or 1) <= 1:
            for key, fact in (("CLIP_LEN", "input_frames"), ("CROP_SIZE", "crop_size")):
                if isinstance(data.get(key), int) and data[key] > 0:
                    trained_on[fact] = data[key]
        return name, model, trained_on, clip_of_kwargs(kwargs)
    if not name:
        raise ExportError("--model is required: " + (
            f"--pretrained {pretrained} is not a zoo run's checkpoint, so it names no model"
            if pretrained else "name the registered model to export"))
    if num_classes is None and pretrained:
        num_classes = weights_classes(name, pretrained, model_kwargs)
        if num_classes is not None:
            logger.info("%s holds a %d-class classifier: exporting %d classes (--num-classes "
                        "exports another count, with a new random classifier)", pretrained,
                        num_classes, num_classes)
    return name, create_model(name, num_classes=num_classes, pretrained=pretrained,
                              **(model_kwargs or {})), {}, clip_of_kwargs(model_kwargs)


def weights_classes(name: str, pretrained: str, model_kwargs: Optional[Dict[str, Any]] = None
                    ) -> Optional[int]:
    """The class count of the classifier in the local weights ``pretrained`` (a file or a
    Hugging Face folder, in any format zoo reads) when it differs from the count ``name`` is
    built with by default; None for the same count, for a tag or URL (published weights fit
    the model's facts), or for weights that do not read (loading them reports why)."""
    from ..models.build import create_model
    from ..models.weights import resolve_pretrained
    from ..models.weights.load import detect_format, read_state_dict, to_model_keys
    from .checkpoint_model import head_classes

    try:
        if resolve_pretrained(pretrained, name).kind != "path":
            return None
        state = read_state_dict(pretrained, mmap=True)  # only its names and shapes are used
        with torch.device("meta"):
            model = create_model(name, **(model_kwargs or {}))
        # The load that follows logs what the conversion says; said once is enough.
        quiet = logging.getLogger("zoo.models.weights")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            state = to_model_keys(state, model, detect_format(state, model), pretrained)
        finally:
            quiet.setLevel(level)
    except (UserError, OSError, ValueError, KeyError):
        return None
    return head_classes(model, state)


def _clip_refused(name: str, shape: Tuple[int, ...], built: Tuple[int, ...], error: str) -> str:
    """The one line for a model that refuses the example clip ``shape``, in zoo-export's own
    flags: ``built`` is the clip its kwargs / facts describe."""
    fix = (f"give --input-shape {' '.join(map(str, built))} (the clip its --kwargs frames / "
           "crop_size build it for), or " if built != shape else "give ")
    return (f"{name} does not run on the example clip {' '.join(map(str, shape))} ({error}): "
            f"{fix}--kwargs frames T crop_size S to build it for a clip of T frames x S px "
            "with --input-shape 1 3 T S S")


def _export_one(fmt: str, name: str, model: nn.Module, example: torch.Tensor,
                out_dir: str) -> Dict[str, Any]:
    """Write ``model`` in format ``fmt`` into ``out_dir``; returns ``{"path": ...}``."""
    if fmt == "torchscript":
        return {"path": export_torchscript(model, example, os.path.join(out_dir, f"{name}.pt"))}
    return {"path": export_onnx(model, example, os.path.join(out_dir, f"{name}.onnx"))}


def _verify_one(fmt: str, name: str, path: str, model: nn.Module, example: torch.Tensor,
                atol: float, rtol: float, scale: float) -> Dict[str, Any]:
    """Run the ``fmt`` export in ``path`` and compare it with eager (max |logit| ``scale``).

    Returns:
        ``max_abs_diff`` and ``max_abs_logit``.

    Raises:
        ExportError: when the difference exceeds ``atol + rtol * scale``.
    """
    check = verify_torchscript if fmt == "torchscript" else verify_onnx
    diff = check(path, model, example)
    logger.info("%s %s: max |exported - eager| = %.3g (max |logit| %.3g) on input %s",
                name, fmt, diff, scale, tuple(example.shape))
    if not diff <= atol + rtol * scale:
        raise ExportError(f"{name} {fmt} export differs from eager by {diff:.3g} "
                           f"(> {atol} + {rtol} * max |logit| {scale:.3g})")
    return {"max_abs_diff": diff, "max_abs_logit": scale}
