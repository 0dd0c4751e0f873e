"""The part every key scheme shares: read a foreign checkpoint, map its keys, check the result.

A scheme (one per source project) only says how one source key is named in zoo
(:meth:`Scheme.mapper`), how a tensor changes on the way (:meth:`Scheme.transform`), and which zoo
tensors it may fill itself (:meth:`Scheme.fill`). :func:`map_state` then enforces the contract:
every source tensor is used exactly once, every zoo tensor is filled, and every shape matches
(the classifier may have any class count; the caller builds the model to fit it).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ....utils.checkpoint_io import load_failure
from ....utils.errors import UserError

logger = logging.getLogger(__name__)

__all__ = ["ConversionError", "Layout", "Report", "Scheme", "check_x3d_shortcut_bns",
           "filled_line", "fit_position", "is_safetensors", "map_state", "read_safetensors",
           "read_source", "resized_line", "strip_wrappers"]

# The last component of every state-dict key: what kind of tensor it is.
PARAM = r"(weight|bias|running_mean|running_var|num_batches_tracked)"


class ConversionError(UserError, RuntimeError):
    """A checkpoint does not fit the scheme or the model; the message names the keys."""


# Key prefixes of wrapped models' state dicts: DistributedDataParallel / DataParallel
# (``module.``) and ``torch.compile`` (``_orig_mod.``), in any order and nesting.
_WRAPPER = re.compile(r"^(?:module\.|_orig_mod\.)+")


def strip_wrappers(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``state`` with the ``module.`` / ``_orig_mod.`` prefixes of wrapped models removed."""
    return {_WRAPPER.sub("", k): v for k, v in state.items()}


@dataclass
class Layout:
    """What a converter needs to know about the target zoo model.

    Attributes:
        shapes: The target state dict's tensor shapes.
        head_keys: Keys of the classifier (their first dimension is the class count).
        pathways: Key prefix per source pathway index: ``{0: "slow_", 1: "fast_"}`` for SlowFast,
            ``{0: ""}`` for a single-pathway 3D ResNet, empty for other models.
        initial: The model's own freshly initialised tensors, when a real model (not one on the
            meta device) is the target: a source without a classifier (VideoMAE pretraining
            weights) leaves the model's fresh head there.
        resize: The model's ``resize_position_tensor``, where it has one: ``(zoo_key, tensor)``
            to the tensor resized to the model's input size, or None (an MViT's position tables
            of weights trained at another clip size).
    """

    shapes: Dict[str, torch.Size]
    head_keys: Tuple[str, ...]
    pathways: Dict[int, str] = field(default_factory=dict)
    initial: Dict[str, torch.Tensor] = field(default_factory=dict)
    resize: Optional[Callable[[str, torch.Tensor], Optional[torch.Tensor]]] = None

    @classmethod
    def of_model(cls, model: torch.nn.Module, head_keys: Sequence[str],
                 keep_initial: bool = False) -> "Layout":
        """The layout of ``model`` (on any device, the meta device included); ``keep_initial``:
        its own tensors become :attr:`initial` (a real model's, not one on the meta device)."""
        state = model.state_dict()
        layout = cls.from_shapes({k: v.shape for k, v in state.items()}, head_keys,
                                 state if keep_initial else None)
        layout.resize = getattr(model, "resize_position_tensor", None)
        return layout

    @classmethod
    def from_shapes(cls, shapes: Dict[str, torch.Size], head_keys: Sequence[str],
                    initial: Optional[Dict[str, torch.Tensor]] = None) -> "Layout":
        if "slow_stem.conv.weight" in shapes and "fast_stem.conv.weight" in shapes:
            pathways = {0: "slow_", 1: "fast_"}
        elif (("stem.conv.weight" in shapes or "stem.conv_xy.weight" in shapes)
              and "res2.0.conv_a.weight" in shapes):
            pathways = {0: ""}
        else:
            pathways = {}
        return cls(dict(shapes), tuple(head_keys), pathways, dict(initial or {}))

    @property
    def kind(self) -> str:
        """``"slowfast"``, ``"resnet3d"``, ``"x3d"``, ``"mvit"``, ``"videomae"`` or ``"other"``."""
        if "stem.conv_xy.weight" in self.shapes and self.pathways:
            return "x3d"
        if "patch_embed.proj.weight" in self.shapes and "head.projection.weight" in self.shapes:
            return "mvit"
        if "patch_embed.proj.weight" in self.shapes and "blocks.0.attn.qkv.weight" in self.shapes:
            return "videomae"
        return {2: "slowfast", 1: "resnet3d"}.get(len(self.pathways), "other")

    def prefix(self, pathway: int) -> Optional[str]:
        """Zoo key prefix of a source pathway (None: the model has no such pathway)."""
        return self.pathways.get(pathway)


@dataclass
class Report:
    """What a conversion did.

    Attributes:
        scheme: Source scheme name.
        num_source: Source tensors read (all of them were used).
        num_target: Tensors in the converted state dict.
        filled: Zoo keys the scheme filled itself, with a reason each.
        resized: Position tables resized to the model's input size, as ``key (from) -> (to)``.
        notes: Caveats worth telling the user (e.g. an inexact architecture match).
    """

    scheme: str
    num_source: int = 0
    num_target: int = 0
    filled: Dict[str, str] = field(default_factory=dict)
    resized: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def lines(self) -> List[str]:
        """Human-readable summary, one group of filled keys per line."""
        out = [f"{self.scheme}: mapped {self.num_source} source tensors onto "
               f"{self.num_target} zoo tensors"]
        groups: Dict[str, List[str]] = {}
        for key, why in self.filled.items():
            groups.setdefault(why, []).append(key)
        for why, keys in groups.items():
            out.append(filled_line(keys, why))
        if self.resized:
            out.append(resized_line(self.resized))
        out += self.notes
        return out


class Scheme:
    """One source project's key scheme. Subclasses override what differs.

    Attributes:
        name: The ``--from`` name.
        kinds: Layout kinds (``"slowfast"``, ``"resnet3d"``, ``"other"``) it converts to.
        state_keys: Dict keys that may hold the model state in a checkpoint file.
    """

    name = ""
    kinds: Tuple[str, ...] = ("slowfast", "resnet3d")
    state_keys: Tuple[str, ...] = ("model_state", "state_dict", "model")

    def prepare(self, source: Dict[str, torch.Tensor], layout: "Layout"
                ) -> Dict[str, torch.Tensor]:
        """``source`` before mapping (default: unchanged). A scheme whose files hold some
        tensors twice drops the copies here, after checking that they are equal; one whose
        layers are split or fused differently from the model's rejoins them here."""
        return source

    def mapper(self, source_keys: Sequence[str], layout: Layout) -> Callable[[str], Optional[str]]:
        """A function from a source key to its zoo key (None = this scheme does not know it)."""
        raise NotImplementedError

    def transform(self, zoo_key: str, tensor: torch.Tensor, layout: Layout) -> torch.Tensor:
        """The tensor as zoo stores it (default: unchanged)."""
        return tensor

    def fill(self, zoo_key: str, layout: Layout) -> Optional[Tuple[torch.Tensor, str]]:
        """A value and a reason for a zoo key no source tensor maps to (default: none)."""
        return None

    def notes(self, layout: Layout) -> List[str]:
        """Caveats about converting to this layout (default: none)."""
        return []


def check_x3d_shortcut_bns(source_name: str, zoo_keys: Sequence[Optional[str]],
                           layout: Layout) -> None:
    """Refuse, in one line, an X3D file whose shortcut BNs are not where the built model has them.

    PySlowFast's X3D has a BN after every shortcut conv (zoo's ``shortcut_bn="all"``);
    PyTorchVideo's only where the width changes (``shortcut_bn="width_change"``). Filling or
    dropping such a BN would change the network in train mode, so the kwarg must be chosen.

    Args:
        source_name: The scheme's ``--from`` name, which begins the message.
        zoo_keys: The source's keys as named in zoo (None for keys the scheme does not map).
        layout: The built model.
    """
    mapped = {key for key in zoo_keys if key}
    for key in sorted(mapped):
        if not key.endswith(".shortcut.conv.weight"):
            continue
        bn = key.replace(".shortcut.conv.", ".shortcut.bn.")
        block = key.split(".shortcut.", 1)[0]
        if bn not in mapped and bn in layout.shapes:
            raise ConversionError(
                f"--from {source_name}: the file's X3D has no BN after the shortcut conv of "
                f"{block} (zoo's default X3D, PySlowFast's, has one): build the model with "
                "MODEL.KWARGS ['shortcut_bn', 'width_change'] (zoo-convert-checkpoint: --kwargs "
                "shortcut_bn width_change), PyTorchVideo's network")
        if bn in mapped and bn not in layout.shapes:
            raise ConversionError(
                f"--from {source_name}: the file's X3D has a BN after the shortcut conv of "
                f"{block}, which this model, built with shortcut_bn 'width_change', lacks: build "
                "it with shortcut_bn 'all' (the default: take ['shortcut_bn', 'width_change'] out "
                "of MODEL.KWARGS)")


def is_safetensors(path: str) -> bool:
    """Whether the file ``path`` is a safetensors file, from its content (an 8-byte little-endian
    header length, then the JSON header's ``{``) or its ``.safetensors`` name."""
    if path.endswith(".safetensors"):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(9)
        size = os.path.getsize(path)
    except OSError:
        return False
    return (len(head) == 9 and head[8:9] == b"{"
            and 0 < int.from_bytes(head[:8], "little") <= size - 8)


def read_safetensors(path: str) -> Dict[str, torch.Tensor]:
    """The tensors of a safetensors file (on the CPU).

    Raises:
        ConversionError: one line naming the file when it cannot be read.
    """
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError as e:
        raise ConversionError(f"{path}: reading safetensors files needs the safetensors "
                              f"package ({e}); pip install 'safetensors>=0.4'") from None
    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise ConversionError(f"{path}: not a readable safetensors file "
                              f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
                              ) from None


def read_source(path: str, state_keys: Sequence[str], allow_pickle: bool = False
                ) -> Dict[str, torch.Tensor]:
    """The tensors of a foreign checkpoint, with any ``module.`` / ``_orig_mod.`` prefix removed
    (a whole pickled model, read with ``allow_pickle``, gives its ``state_dict()``).

    Args:
        path: Checkpoint file: a ``torch.save`` file or a ``.safetensors`` one (a Hugging Face
            Hub folder is read by ``huggingface.read_hub_folder``).
        state_keys: Dict keys that may hold the state dict (tried in order); a file that is a
            bare state dict works too.
        allow_pickle: Load with ``weights_only=False``. This runs code stored in the file: only
            for files from a source you trust (some MMAction2 files store Python objects).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    if is_safetensors(path):
        return strip_wrappers(read_safetensors(path))
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not allow_pickle)
    except Exception as e:  # torch.load raises many types; load_failure tells what the file is
        what, refused = load_failure(path, e)
        if not refused:
            raise ConversionError(f"{path}: {what}") from None
        if allow_pickle:
            raise ConversionError(f"{path}: torch.load could not unpickle it ({what})") from None
        raise ConversionError(
            f"{path}: torch.load(weights_only=True) refused it ({what}). If you trust the file, "
            "pass --unsafe-load to unpickle it fully.") from None
    if isinstance(obj, torch.nn.Module):  # a whole pickled model (torch.save(model))
        obj = obj.state_dict()
    if isinstance(obj, dict):
        for key in state_keys:
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise ConversionError(f"{path}: found no state dict (looked under {list(state_keys)})")
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if len(tensors) != len(obj):
        others = [k for k in obj if k not in tensors]
        raise ConversionError(f"{path}: the state dict holds non-tensor entries: {others[:8]}")
    return strip_wrappers(tensors)


def filled_line(keys: Sequence[str], why: str) -> str:
    """The one line saying which modules' tensors (``keys``) were filled, and why."""
    unique = sorted({key.rsplit(".", 1)[0] for key in keys})
    shown = ", ".join(unique[:6]) + (f", ... ({len(unique) - 6} more)" if len(unique) > 6 else "")
    return f"filled {len(unique)} module(s) ({why}): {shown}"


def resized_line(resized: Sequence[str]) -> str:
    """The one line saying which position tables were resized to the model's input size."""
    shown = ", ".join(resized[:3]) + (f", ... ({len(resized) - 3} more)"
                                      if len(resized) > 3 else "")
    return (f"resized {len(resized)} position table(s) trained at another clip size to the "
            f"model's (MODEL.KWARGS frames / crop_size), by interpolation: {shown}")


def fit_position(layout_resize: Optional[Callable[[str, torch.Tensor], Optional[torch.Tensor]]],
                 key: str, tensor: torch.Tensor, want: torch.Size, resized: List[str]
                 ) -> torch.Tensor:
    """``tensor`` resized to ``want`` by the model's ``resize_position_tensor`` where it is a
    position table of another input size (noted in ``resized``); else unchanged."""
    if layout_resize is None or tensor.shape == want:
        return tensor
    fitted = layout_resize(key, tensor)
    if fitted is None or fitted.shape != want:
        return tensor
    resized.append(f"{key} {tuple(tensor.shape)} -> {tuple(want)}")
    return fitted


def _shape_ok(key: str, got: torch.Size, want: torch.Size, layout: Layout) -> bool:
    if key in layout.head_keys:  # any class count; the caller builds the model to fit it
        return len(got) == len(want) and got[1:] == want[1:]
    return got == want


def map_state(
    scheme: Scheme, source: Dict[str, torch.Tensor], layout: Layout
) -> Tuple[Dict[str, torch.Tensor], Report]:
    """Convert ``source`` into a zoo state dict for ``layout``, checking the whole contract.

    Raises:
        ConversionError: naming unmapped source keys, zoo keys nothing filled, keys mapped twice
            and shape mismatches.
    """
    if layout.kind not in scheme.kinds:
        raise ConversionError(
            f"--from {scheme.name} converts to {' / '.join(scheme.kinds)} models; this model is "
            f"'{layout.kind}' (its keys: {', '.join(list(layout.shapes)[:4])}, ...)")
    report = Report(scheme.name, num_source=len(source))
    source = scheme.prepare(source, layout)
    to_zoo = scheme.mapper(list(source), layout)
    out: Dict[str, torch.Tensor] = {}
    origin: Dict[str, str] = {}
    unmapped, unknown, twice, bad_shape = [], [], [], []
    for key, tensor in source.items():
        zoo_key = to_zoo(key)
        if zoo_key is None:
            unmapped.append(key)
        elif zoo_key not in layout.shapes:
            unknown.append(f"{key} -> {zoo_key}")
        elif zoo_key in out:
            twice.append(f"{origin[zoo_key]} and {key} -> {zoo_key}")
        else:
            value = scheme.transform(zoo_key, tensor, layout)
            value = fit_position(layout.resize, zoo_key, value, layout.shapes[zoo_key],
                                 report.resized)
            if not _shape_ok(zoo_key, value.shape, layout.shapes[zoo_key], layout):
                bad_shape.append(f"{key} {tuple(value.shape)} -> {zoo_key} "
                                 f"{tuple(layout.shapes[zoo_key])}")
            out[zoo_key], origin[zoo_key] = value, key
    missing = []
    for zoo_key, shape in layout.shapes.items():
        if zoo_key in out:
            continue
        filled = scheme.fill(zoo_key, layout)
        if filled is None and zoo_key.endswith(".num_batches_tracked"):
            filled = torch.zeros((), dtype=torch.long), "num_batches_tracked absent from source"
        if filled is None:
            missing.append(zoo_key)
        else:
            out[zoo_key], report.filled[zoo_key] = filled
    problems = []
    for what, keys in (("source keys the scheme does not know", unmapped),
                       ("source keys mapped to names the model lacks", unknown),
                       ("zoo keys mapped twice", twice), ("shape mismatches", bad_shape),
                       ("zoo keys no source tensor maps to", missing)):
        if keys:
            problems.append(f"{what} ({len(keys)}): {', '.join(keys[:6])}"
                            + (", ..." if len(keys) > 6 else ""))
    if problems:
        raise ConversionError(f"--from {scheme.name}: the checkpoint does not fit the model; "
                              + "; ".join(problems))
    report.num_target = len(out)
    report.notes = scheme.notes(layout)
    # Keep the model's key order, so the file reads like the model's own state dict.
    return {k: out[k] for k in layout.shapes}, report
