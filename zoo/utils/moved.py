"""Modules that moved, importable under their old names for one more release, with a warning.

``import zoo.engine.trainer`` (or ``from zoo.data.decoders import open_video``) gives the module
at its new place, ``zoo.train.trainer``, and a ``DeprecationWarning`` naming it. The table is
also the list of old -> new module paths (docs/architecture.md, "Where things moved").
:func:`moved_attributes` does the same for names that moved out of a module that stays.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import Callable, Dict, Optional

# Old module path -> where it lives now.
MOVED: Dict[str, str] = {
    "zoo.engine.launch": "zoo.launch.launch",
    "zoo.engine.topology": "zoo.launch.topology",
    "zoo.engine.rendezvous": "zoo.launch.rendezvous",
    "zoo.engine.config_agreement": "zoo.launch.agreement",
    "zoo.engine.heartbeat": "zoo.launch.heartbeat",
    "zoo.engine.preemption": "zoo.launch.preemption",
    "zoo.engine.setup": "zoo.launch.setup",
    "zoo.engine.trainer": "zoo.train.trainer",
    "zoo.engine.hooks": "zoo.train.hooks",
    "zoo.engine.step": "zoo.train.step",
    "zoo.engine.checkpoint": "zoo.train.checkpoint",
    "zoo.engine.precision": "zoo.train.precision",
    "zoo.engine.ema": "zoo.train.ema",
    "zoo.engine.mixup": "zoo.train.mixup",
    "zoo.engine.precise_bn": "zoo.train.precise_bn",
    "zoo.engine.sync_bn": "zoo.train.sync_bn",
    "zoo.engine.finetune": "zoo.train.finetune",
    "zoo.engine.ddp_comm": "zoo.accel.ddp_comm",
    "zoo.engine.evaluator": "zoo.infer.evaluator",
    "zoo.engine.metrics": "zoo.infer.metrics",
    "zoo.engine.tester": "zoo.infer.tester",
    "zoo.engine.predictor": "zoo.infer.predictor",
    "zoo.engine.features": "zoo.infer.features",
    "zoo.engine.checkpoint_model": "zoo.infer.checkpoint_model",
    "zoo.engine.plots": "zoo.infer.plots",
    "zoo.models.export": "zoo.infer.export",
    "zoo.engine.cpu_stem": "zoo.accel.cpu_stem",
    "zoo.engine.powersgd": "zoo.accel.powersgd",
    "zoo.engine.cli": "zoo.cli.job",
    "zoo.engine.dry_run": "zoo.cli.dry_run",
    "zoo.engine.preflight": "zoo.cli.preflight",
    "zoo.engine.data_preflight": "zoo.cli.data_preflight",
    "zoo.engine.output_preflight": "zoo.cli.output_preflight",
    "zoo.engine.errors": "zoo.utils.errors",
    "zoo.data.annotations": "zoo.data.lists.annotations",
    "zoo.data.list_formats": "zoo.data.lists.formats",
    "zoo.data.sources": "zoo.data.lists.sources",
    "zoo.data.records": "zoo.data.lists.providers",
    "zoo.data.decode_base": "zoo.data.decode.base",
    "zoo.data.decode_pyav": "zoo.data.decode.pyav",
    "zoo.data.decode_other": "zoo.data.decode.opencv",
    "zoo.data.decode_torchcodec": "zoo.data.decode.torchcodec",
    "zoo.data.decode_frames": "zoo.data.decode.frames",
    "zoo.data.decoders": "zoo.data.decode.registry",
    "zoo.models.weights_table": "zoo.models.weights.table",
    "zoo.models.pretrained": "zoo.models.weights.load",
    "zoo.models.convert": "zoo.models.weights.convert",
    "zoo.models.convert.common": "zoo.models.weights.convert.common",
    "zoo.models.convert.gluoncv": "zoo.models.weights.convert.gluoncv",
    "zoo.models.convert.mmaction2": "zoo.models.weights.convert.mmaction2",
    "zoo.models.convert.pyslowfast": "zoo.models.weights.convert.pyslowfast",
    "zoo.models.convert.pytorchvideo": "zoo.models.weights.convert.pytorchvideo",
    "zoo.models.convert.torchvision": "zoo.models.weights.convert.torchvision",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules of :data:`MOVED` under their old names and hands out the new module
    itself (one module object, so patching or registering through either name is the same)."""

    def find_spec(self, fullname: str, path=None, target=None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder module; exec_module swaps in the real one

    def exec_module(self, module) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} is deprecated: it moved to {new}; import that (the "
                      f"old path goes in the next release)", DeprecationWarning, stacklevel=2)
        # The import system returns what sys.modules holds after exec_module: the real module.
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``import zoo`` does it).

    It goes first: a moved package's old submodule names (``zoo.models.convert.common``) would
    otherwise be found by the path finder inside the new package's folder and run a second copy
    of the module under the old name. The finder answers only the names in :data:`MOVED`.
    """
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())


def moved_attributes(module: str, names: Dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) for names that moved out of ``module``: each of
    ``names`` (name -> the module that defines it now) is imported from its new module, with a
    ``DeprecationWarning`` naming it; any other name is an AttributeError."""

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new = names[name]
        warnings.warn(f"{module}.{name} is deprecated: it moved to {new}.{name}; import it from "
                      f"there (the old path goes in the next release)", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__
