"""A name -> callable registry, one per extension point (models, datasets).

Usage::

    MODEL_REGISTRY = Registry("MODEL")

    @MODEL_REGISTRY.register()
    def my_net(num_classes: int = 400, **kwargs) -> nn.Module:
        ...

    fn = MODEL_REGISTRY.get("my_net")

A name that is unknown or registered twice raises :class:`RegistryError`, a user error (one
``error:`` line) that is also a ``KeyError``.
"""

from __future__ import annotations

import difflib
import sys
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from .errors import UserError


class RegistryError(UserError, KeyError):
    """A registry has no entry of that name, or already has one; the message says what to do."""


# Modules whose functions register on their caller's behalf (register_model, register_dataset):
# the registering module is the first caller outside them.
_HELPER_MODULES = frozenset({__name__, "zoo.models.registry", "zoo.data.dataset_recipes"})


def _registering_module() -> str:
    """The module whose code is registering: its name, or its file for a file loaded by path
    (an ``EXTRA_MODULES`` ``.py`` entry) or run as a script."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _HELPER_MODULES:
        frame = frame.f_back
    if frame is None:
        return "?"
    module = frame.f_globals.get("__name__") or "?"
    if module == "__main__" or module.startswith("zoo_user_"):  # see zoo.utils.env
        return frame.f_globals.get("__file__") or frame.f_code.co_filename
    return module


class Registry:
    """Maps names to objects. Registering a name twice is an error.

    Args:
        name: What the registry holds (used in error messages), e.g. ``"MODEL"``.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._obj_map: Dict[str, Any] = {}
        self._origin: Dict[str, str] = {}  # name -> the module that registered it

    @property
    def name(self) -> str:
        return self._name

    def _do_register(self, name: str, obj: Any) -> None:
        origin = _registering_module()
        if name in self._obj_map:
            first = self._origin.get(name) or getattr(self._obj_map[name], "__module__", "?")
            raise RegistryError(
                f"{self._name} registry already has an entry named {name!r} (registered by "
                f"{first}); {origin} registers it again: pick another name"
            )
        self._obj_map[name] = obj
        self._origin[name] = origin

    def register(self, obj: Optional[Any] = None, *, name: Optional[str] = None) -> Any:
        """Register ``obj`` under ``name`` (default: ``obj.__name__``).

        Works as ``@REG.register()``, ``@REG.register(name="x")`` or ``REG.register(fn)``.
        """
        if obj is None:

            def deco(func_or_class: Callable) -> Callable:
                self._do_register(name or func_or_class.__name__, func_or_class)
                return func_or_class

            return deco
        self._do_register(name or obj.__name__, obj)
        return obj

    def get(self, name: str) -> Any:
        """Return the object registered as ``name``; a miss lists close names."""
        if name in self._obj_map:
            return self._obj_map[name]
        close = difflib.get_close_matches(name, list(self._obj_map), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise RegistryError(
            f"No object named {name!r} in the {self._name} registry.{hint} "
            f"If it is defined in your own file, load that file with CONFIG.EXTRA_MODULES "
            f"(or --extra-modules) so its @register runs. Known: {', '.join(sorted(self._obj_map))}"
        )

    def __contains__(self, name: str) -> bool:
        return name in self._obj_map

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        return iter(sorted(self._obj_map.items()))

    def __len__(self) -> int:
        return len(self._obj_map)

    def names(self) -> list:
        return sorted(self._obj_map)

    def __repr__(self) -> str:
        return f"Registry({self._name!r}, {len(self)} entries)"
