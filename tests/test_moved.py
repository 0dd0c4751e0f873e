"""Modules that moved still import under their old paths for one release: the same module object
as the new path, with a DeprecationWarning that names the new path (zoo/utils/moved.py)."""

import json
import pathlib
import subprocess
import sys

from helpers import ROOT

from zoo.utils.moved import MOVED

# A fresh interpreter, so that no old or new module is imported before the check.
_CHECK = """
import importlib, json, sys, warnings
from zoo.utils.moved import MOVED
problems = []
for old, new in sorted(MOVED.items()):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    if module is not importlib.import_module(new):
        problems.append(f"{old} is not {new}")
    if not any(issubclass(w.category, DeprecationWarning) and new in str(w.message)
               for w in caught):
        problems.append(f"{old}: no DeprecationWarning naming {new}")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from zoo.engine import Trainer, train_worker
    from zoo.data.decoders import open_video
from zoo.train.trainer import Trainer as new_trainer
from zoo.data.decode.registry import open_video as new_open
if Trainer is not new_trainer or open_video is not new_open:
    problems.append("from zoo.engine / zoo.data.decoders import gave other objects")
if not any(issubclass(w.category, DeprecationWarning) and "zoo.train.trainer" in str(w.message)
           for w in caught):
    problems.append("from zoo.engine import Trainer: no DeprecationWarning")
print(json.dumps(problems))
"""


def test_every_old_module_path_imports_the_new_module_with_a_warning():
    result = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_the_table_names_existing_modules_only():
    """Every new path of the table is a module of zoo (a later move that forgets the table fails
    here), and no old path is itself still a module file."""
    root = pathlib.Path(ROOT)
    for old, new in MOVED.items():
        new_file = root / (new.replace(".", "/") + ".py")
        new_package = root / new.replace(".", "/") / "__init__.py"
        assert new_file.is_file() or new_package.is_file(), new
        assert not (root / (old.replace(".", "/") + ".py")).exists(), old


# zoo's own code never goes through an old path: with DeprecationWarnings as errors, every module
# imports and every lazily loaded package name resolves.
_OWN_CODE = """
import importlib, pkgutil, warnings
warnings.simplefilter("error", DeprecationWarning)
import zoo, zoo.data
for info in pkgutil.walk_packages(zoo.__path__, "zoo."):
    if not info.name.startswith("zoo.engine"):
        importlib.import_module(info.name)
for package in (zoo, zoo.data):
    for name in package.__all__:
        getattr(package, name)
print("ok")
"""


def test_zoo_itself_uses_no_old_path():
    result = subprocess.run([sys.executable, "-c", _OWN_CODE], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
