"""Commands whose code lives in the source checkout rather than in the installed package.

The benchmarks (``benchmarks/`` at the top of the repository, beside ``zoo/``, as timm and
detectron2 keep theirs) are not installed with zoo: ``zoo-benchmark`` and ``zoo-benchmark-data``
find them in the checkout zoo was installed from (``pip install -e .``) and run them there.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from ..utils.errors import UserError

# The folder holding zoo/ and, in a source checkout, benchmarks/.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def checkout_module(name: str) -> ModuleType:
    """Import ``benchmarks.<name>`` from the checkout; one line naming the fix when zoo was
    installed without one (a wheel)."""
    if not os.path.isfile(os.path.join(CHECKOUT, "benchmarks", "__init__.py")):
        raise UserError(f"the benchmarks are not installed with zoo; they run from a source "
                        f"checkout ({os.path.join(CHECKOUT, 'benchmarks')} does not exist): git "
                        f"clone the repository and pip install -e . there")
    if CHECKOUT not in sys.path:
        sys.path.insert(0, CHECKOUT)
    return importlib.import_module(f"benchmarks.{name}")
