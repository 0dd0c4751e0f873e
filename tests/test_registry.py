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


def test_resnet50_parameter_count():
    model = zoo.create_model("resnet50", num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
