"""Shared fixtures: a tiny generated dataset and a toy model file (helpers are in helpers.py), and
the skip of ``cuda``-marked tests where no CUDA GPU is visible."""

import pytest
from helpers import TOY_MODEL


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` are skipped, with the reason, where ``torch.cuda.is_available()`` is
    False (the mark is added at collection, so their fixtures never run there)."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False here)")
    for item in marked:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory):
    """One cache folder for generated data, shared by the whole test session."""
    return str(tmp_path_factory.mktemp("synth_cache"))


@pytest.fixture()
def toy_model_file(tmp_path):
    path = tmp_path / "toy_models.py"
    path.write_text(TOY_MODEL)
    return str(path)
