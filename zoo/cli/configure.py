"""The config a command runs with: :func:`setup_cfg` loads the YAML with the command line's
overrides, imports the user's modules and checks the names the run will look up.

Shared by the run of a job (``zoo.cli.job``), ``--dry-run`` (``zoo.cli.dry_run``), and the
commands that read a config. What it needs is imported when it is called: importing this module
costs nothing.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from ..utils.node_process import talks_on_console


def with_extra_modules(cfg, modules: Sequence[str]):
    """``cfg`` with ``--extra-modules`` added after the config's own ``CONFIG.EXTRA_MODULES``."""
    if modules:
        cfg.defrost()
        cfg.CONFIG.EXTRA_MODULES = list(cfg.CONFIG.EXTRA_MODULES) + list(modules)
        cfg.freeze()
    return cfg


def setup_cfg(args: argparse.Namespace):
    """Load the config, import the user's modules and check the model name exists.

    Args:
        args: The parsed command line: ``config_file``, ``opts`` (``KEY VALUE`` overrides) and
            ``extra_modules``.
    """
    from ..config import load_config
    from ..utils.env import import_extra_modules

    opts = list(args.opts)
    cfg = with_extra_modules(load_config(args.config_file or None, opts), args.extra_modules)
    import_extra_modules(cfg.CONFIG.EXTRA_MODULES)
    # Imported once the config is valid: a config error needs no torch.
    from ..data import fill_normalization
    from ..models import MODEL_REGISTRY, input_normalization
    from ..train.hooks import user_hook_class

    MODEL_REGISTRY.get(cfg.CONFIG.MODEL.NAME)  # fails here, in one line, not in every worker
    for entry in cfg.CONFIG.TRAIN.HOOKS:  # likewise for the user's hooks (built in the workers)
        user_hook_class(entry)
    # Empty DATA.MEAN / STD mean the pretrained weights' (a Hugging Face preprocessor file beside
    # them), else the model's own (its facts record). Said once per node: torchrun / Slurm run
    # this in every process.
    return fill_normalization(cfg, input_normalization(cfg, announce=talks_on_console()))
