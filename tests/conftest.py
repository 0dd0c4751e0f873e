"""Shared fixtures: a tiny generated dataset and a toy model file (helpers are in helpers.py)."""

import pytest
from helpers import TOY_MODEL


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory):
    """One cache folder for generated data, shared by the whole test session."""
    return str(tmp_path_factory.mktemp("synth_cache"))


@pytest.fixture()
def toy_model_file(tmp_path):
    path = tmp_path / "toy_models.py"
    path.write_text(TOY_MODEL)
    return str(path)
