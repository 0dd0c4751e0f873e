"""Registry: decorator, duplicates refused, misses list close names; user files register models."""

import pytest
import torch

import zoo
from zoo.utils.env import import_extra_modules
from zoo.utils.registry import Registry


def test_register_and_get():
    reg = Registry("THING")

    @reg.register()
    def alpha():
        return 1

    reg.register(lambda: 2, name="beta")
    assert reg.get("alpha")() == 1 and reg.get("beta")() == 2
    assert "alpha" in reg and len(reg) == 2 and reg.names() == ["alpha", "beta"]


def test_duplicate_name_is_an_error():
    reg = Registry("THING")
    reg.register(lambda: 1, name="a")
    with pytest.raises(KeyError, match="already has an entry named 'a'"):
        reg.register(lambda: 2, name="a")


def test_a_duplicate_name_names_the_files_that_register_it(tmp_path, monkeypatch):
    # Two user files register a zoo class under one name: the line names both files, not the
    # class's module (zoo.models.resnet).
    from zoo.models import MODEL_REGISTRY

    monkeypatch.setattr(MODEL_REGISTRY, "_obj_map", dict(MODEL_REGISTRY._obj_map))
    text = ("from zoo.models import register_model\n"
            "from zoo.models.resnet import ResNet\n"
            "register_model('registry_dup_net', ResNet)\n")
    first, second = tmp_path / "first_models.py", tmp_path / "second_models.py"
    first.write_text(text)
    second.write_text(text)
    import_extra_modules([str(first)])
    with pytest.raises(KeyError) as e:
        import_extra_modules([str(second)])
    msg = e.value.args[0]
    assert "\n" not in msg and "zoo.models.resnet" not in msg
    assert (f"MODEL registry already has an entry named 'registry_dup_net' (registered by "
            f"{first}); {second} registers it again: pick another name") == msg


def test_miss_lists_close_names_and_reminds_to_import():
    with pytest.raises(KeyError) as e:
        zoo.create_model("resnet05")
    msg = e.value.args[0]
    assert "MODEL registry" in msg and "'resnet50'" in msg and "EXTRA_MODULES" in msg


def test_user_file_registers_a_model(tmp_path):
    f = tmp_path / "my_models.py"
    f.write_text(
        "import torch.nn as nn\n"
        "from zoo.models import MODEL_REGISTRY\n"
        "@MODEL_REGISTRY.register()\n"
        "def registry_test_net(num_classes=10, **kw):\n"
        "    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))\n"
    )
    import_extra_modules([str(f)])
    import_extra_modules([str(f)])  # a second import is a no-op, not a duplicate registration
    assert "registry_test_net" in zoo.list_models()
    out = zoo.create_model("registry_test_net", num_classes=3)(torch.zeros(2, 3, 2, 4, 4))
    assert out.shape == (2, 3)


def test_missing_extra_module_names_the_entry():
    with pytest.raises(FileNotFoundError, match="nope.py"):
        import_extra_modules(["/nonexistent/nope.py"])
    with pytest.raises(ImportError, match="no_such_module_xyz"):
        import_extra_modules(["no_such_module_xyz"])


def test_an_extra_module_whose_own_import_fails_names_the_missing_package(tmp_path, monkeypatch):
    # The entry itself is found and a package it imports is missing: the line names the file,
    # the line number and the package, and asks for no .py path or PYTHONPATH.
    (tmp_path / "uses_missing_pkg.py").write_text("import os\nimport not_a_real_pkg_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    file = str(tmp_path / "uses_missing_pkg.py")
    with pytest.raises(ImportError) as e:
        import_extra_modules(["uses_missing_pkg"])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("CONFIG.EXTRA_MODULES entry 'uses_missing_pkg': ")
    assert f"uses_missing_pkg ({file} line 2) imports not_a_real_pkg_xyz, which is not " \
           "installed" in msg and "give a .py path" not in msg
    with pytest.raises(ImportError) as e:
        import_extra_modules([file])
    assert f"{file} line 2 imports not_a_real_pkg_xyz, which is not installed" in str(e.value)
    with pytest.raises(ImportError, match="could not be imported .*give a .py path"):
        import_extra_modules(["no_such_module_xyz.sub"])  # the entry itself is missing


def test_resnet50_parameter_count():
    model = zoo.create_model("resnet50", num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == 25_557_032


def test_register_model_with_facts():
    import dataclasses

    import torch.nn as nn

    from zoo.models import MODEL_REGISTRY, ModelFacts, model_facts, register_model

    calls = []

    def build(num_classes, width=1, depth=1):
        calls.append((num_classes, width, depth))
        return nn.Linear(width, num_classes)

    facts = ModelFacts(task="image", input_frames=1, sampling_stride=1, crop_size=32,
                       mean=[0.5] * 3, std=(0.25,) * 3, params=123)
    builder = register_model("registry_facts_net", build, facts, "Doc line.", width=4, depth=2)
    assert MODEL_REGISTRY.get("registry_facts_net") is builder and builder.__doc__ == "Doc line."
    builder()  # an image model's class count defaults to 1000
    zoo.create_model("registry_facts_net", num_classes=3, depth=5)  # kwargs beat the defaults
    assert calls == [(1000, 4, 2), (3, 4, 5)]
    got = model_facts("registry_facts_net")
    assert got["mean"] == [0.5, 0.5, 0.5] and got["std"] == [0.25, 0.25, 0.25]
    assert got["params"] == 123 and got["gflops"] is None and got["sampling"] == "stride"
    assert "registry_facts_net" in zoo.list_models(aliases=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.params = 1
    with pytest.raises(KeyError, match="already has an entry named 'registry_facts_net'.*test_reg"):
        register_model("registry_facts_net", build, facts)


def test_model_facts_checks_and_aliases():
    from zoo.models import ModelFacts, model_facts, register_model

    with pytest.raises(ValueError, match="task"):
        ModelFacts(task="audio", input_frames=1, sampling_stride=1, crop_size=1, mean=(0,),
                   std=(1,))
    alias = ModelFacts(input_frames=8, sampling_stride=None, crop_size=224, mean=(0.5,) * 3,
                       std=(0.5,) * 3, alias_of="resnet18", num_classes=5)
    register_model("registry_alias_net", lambda num_classes: torch.nn.Linear(2, num_classes),
                   alias)
    assert zoo.create_model("registry_alias_net").out_features == 5  # the facts' class count
    assert model_facts("registry_alias_net")["sampling"] == "segments"
    assert "registry_alias_net" in zoo.list_models()
    assert "registry_alias_net" not in zoo.list_models(aliases=False)


def test_a_plain_facts_dict_is_still_read():
    from zoo.models import MODEL_REGISTRY, model_facts

    @MODEL_REGISTRY.register()
    def registry_dict_facts_net(num_classes=400):
        return torch.nn.Linear(2, num_classes)

    registry_dict_facts_net.facts = {"task": "video", "input_frames": 4, "custom": "kept"}
    assert model_facts("registry_dict_facts_net") == registry_dict_facts_net.facts


def _zoo_imports(path, root):
    """The zoo modules (and imported names) a file imports, function-local imports included."""
    import ast

    package = list(path.relative_to(root).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1]
                                + ([node.module] if node.module else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m == "zoo" or m.startswith("zoo.")}


def test_registry_is_a_leaf_and_the_weights_code_stands_below_build():
    import pathlib

    models = pathlib.Path(zoo.__file__).parent / "models"
    root = models.parent.parent
    leaf = _zoo_imports(models / "registry.py", root)
    assert leaf and all(m.startswith(("zoo.models.facts", "zoo.utils.registry")) for m in leaf)
    for path in sorted((models / "weights").rglob("*.py")):
        assert not {m for m in _zoo_imports(path, root) if m.startswith("zoo.models.build")}, path
    assert "zoo.models.weights.load" in _zoo_imports(models / "build.py", root)


@pytest.mark.parametrize("old", ["zoo.models.weights_table", "zoo.models.pretrained",
                                 "zoo.models.convert", "zoo.models.convert.common",
                                 "zoo.models.convert.torchvision"])
def test_moved_model_modules_import_under_their_old_names(old):
    import importlib
    import sys

    from zoo.utils.moved import MOVED

    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=MOVED[old]):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])  # one module, not a second copy
