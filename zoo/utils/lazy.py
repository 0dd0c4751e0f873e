"""Package attributes imported on first use (PEP 562), so importing a package stays cheap.

``zoo``, ``zoo.data`` and ``benchmarks`` use this: ``import zoo.data.decode.pyav`` must not
import torch (a decoding process then stays under ~200 MB), while ``zoo.create_model`` and
``from zoo.data import build_loader`` keep working.
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Tuple


def lazy_attributes(package: str, names: Dict[str, str],
                    namespace: dict) -> Tuple[Callable[[str], object], Callable[[], List[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public ``names`` map to submodules.

    Args:
        package: The package's ``__name__``.
        names: Public name -> the submodule (relative to ``package``) that defines it.
        namespace: The package's ``globals()``; a loaded name is stored there so later lookups
            do not come back here.
    """

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
