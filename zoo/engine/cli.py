"""The command line shared by tools/train_ddp.py and tools/test_ddp.py.

``python tools/train_ddp.py --config-file FILE [--extra-modules a.py ...] [KEY VALUE ...]``
"""

from __future__ import annotations

import argparse
import os
from typing import Callable, List, Optional, Sequence

from ..config import load_config
from ..utils.env import import_extra_modules
from ..utils.logger import setup_logger
from .data_preflight import check_data
from .errors import report_failure
from .finetune import resolve_num_classes
from .hooks import user_hook_class
from .launch import launch
from .output_preflight import check_output_writable
from .setup import output_dir


def default_argument_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description,
        epilog="Trailing KEY VALUE pairs override the YAML, e.g. CONFIG.TRAIN.EPOCH_NUM 2 "
        "(the CONFIG. prefix may be left off).",
    )
    parser.add_argument("--config-file", default="", metavar="FILE", help="YAML config file")
    parser.add_argument(
        "--extra-modules", action="append", default=[], metavar="PY",
        help="a Python file or module name to import first so its @register calls run "
        "(repeat the flag for several); added to CONFIG.EXTRA_MODULES",
    )
    parser.add_argument(
        "--dry-run", action="store_true",
        help="check the config, build the model on the meta device and list missing data; "
        "trains/tests nothing (see zoo/engine/dry_run.py)",
    )
    parser.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE overrides")
    return parser


def setup_cfg(args: argparse.Namespace):
    """Load the config, import the user's modules and check the model name exists."""
    opts = list(args.opts)
    cfg = load_config(args.config_file or None, opts)
    if args.extra_modules:
        cfg.defrost()
        cfg.CONFIG.EXTRA_MODULES = list(cfg.CONFIG.EXTRA_MODULES) + list(args.extra_modules)
        cfg.freeze()
    import_extra_modules(cfg.CONFIG.EXTRA_MODULES)
    from ..data import fill_normalization
    from ..models import MODEL_REGISTRY, model_facts

    MODEL_REGISTRY.get(cfg.CONFIG.MODEL.NAME)  # fails here, in one line, not in every worker
    for entry in cfg.CONFIG.TRAIN.HOOKS:  # likewise for the user's hooks (built in the workers)
        user_hook_class(entry)
    # Empty DATA.MEAN / STD mean "the model's own" (its facts record).
    return fill_normalization(cfg, model_facts(cfg.CONFIG.MODEL.NAME))


def command_line_node_rank(opts: List[str], cfg) -> Optional[int]:
    """``DDP_CONFIG.WORLD_RANK n`` on the command line is this node's rank, over AUTO_RANK_MATCH."""
    return cfg.DDP_CONFIG.WORLD_RANK if "DDP_CONFIG.WORLD_RANK" in list(opts)[0::2] else None


def process_rank() -> int:
    """This process's rank when torchrun / Slurm started it as one rank of a job, else 0."""
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))


def talks_on_console() -> bool:
    """Whether this process prints the ``error:`` line: the first process of each node. The other
    ranks torchrun / Slurm started on a node would repeat it on the same console."""
    return int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", 0))) == 0


def run(worker: Callable, description: str, argv: Optional[List[str]] = None,
        splits: Sequence[str] = ("train", "val")) -> int:
    """Parse, configure, check the data and ``launch(worker)``; returns the process exit code.

    Every failure ends here: one ``error:`` line on the console (from the first process of each
    node under torchrun / Slurm, whose other ranks would repeat it), the traceback in the rank's
    log file (see zoo/engine/errors.py for what is a user error and what is a bug).

    Args:
        worker: ``worker(cfg)``, run in every process.
        description: The tool's ``--help`` text.
        argv: The command line (default ``sys.argv[1:]``).
        splits: The data splits the worker reads, checked before any worker starts
            (``("test",)`` for testing).
    """
    args = default_argument_parser(description).parse_args(argv)
    rank = process_rank()
    # Under torchrun/Slurm each process is already a rank: only rank 0 talks on the console.
    setup_logger(None, rank)
    cfg = None
    try:
        cfg = setup_cfg(args)
        if args.dry_run:
            from .dry_run import run_dry_run

            mode = "test" if getattr(worker, "__name__", "").startswith("test") else "train"
            return run_dry_run(cfg, mode, command_line_node_rank(args.opts, cfg))
        from ..data import prepare_synthetic

        cfg = prepare_synthetic(cfg)
        if "train" in splits:
            # For testing, NUM_CLASSES 0 means "the checkpoint's": the tester reads it there.
            cfg = resolve_num_classes(cfg)
        node_rank = command_line_node_rank(args.opts, cfg)
        check_data(cfg, splits, node_rank)
        check_output_writable(cfg)
        launch(worker, cfg, node_rank=node_rank)
    except Exception as e:
        return report_failure(e, output_dir(cfg) if cfg is not None else None, rank,
                              console=talks_on_console())
    return 0
