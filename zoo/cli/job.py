"""The command line shared by every zoo command (``zoo-train``, ``tools/train_ddp.py``, ...).

``zoo-train --config-file FILE [--extra-modules a.py ...] [--dry-run] [KEY VALUE ...]``

:func:`tool_parser` is the one argument parser all commands start from (``zoo/cli/``):
``--config-file``, ``--extra-modules`` and trailing ``KEY VALUE`` overrides are spelled the same
in each; :func:`run` parses, configures and launches a worker (training, testing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from typing import Callable, List, Optional, Sequence

from ..config import load_config
from ..data.lists.sources import VIDEO_EXTS
from ..launch.job import resolve_job
from ..launch.launch import launch
from ..launch.preemption import PREEMPTED_EXIT_CODE, Preempted, launcher_signals
from ..launch.setup import output_dir
from ..train.finetune import resolve_num_classes
from ..train.hooks import user_hook_class
from ..utils.env import import_extra_modules
from ..utils.errors import report_failure
from ..utils.logger import setup_logger
from .data_preflight import check_data
from .output_preflight import check_output_writable

# A config key as written on the command line: upper-case words joined by dots
# (TRAIN.EPOCH_NUM, CONFIG.DATA.CLIP_LEN).
_KEY = re.compile(r"[A-Z][A-Z0-9_]*(\.[A-Z][A-Z0-9_]*)*")
# A module name for --extra-modules: dotted Python identifiers (my_pkg.models).
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
# How long a failed process that does not print the error line (see talks_on_console) waits
# before it exits: torchrun ends the whole job when any process ends with an error, and the
# node's first process, which found the same error, needs a moment to print it.
CONSOLE_GRACE_S = 5.0
OVERRIDES_HELP = ("Trailing KEY VALUE pairs override the YAML, e.g. CONFIG.TRAIN.EPOCH_NUM 2 "
                  "(the CONFIG. prefix may be left off).")


def looks_like_key(token: str) -> bool:
    """Whether ``token`` is a config key (``TRAIN.EPOCH_NUM``) rather than a file or module."""
    return bool(_KEY.fullmatch(token)) and not os.path.exists(token)


def looks_like_module(token: str) -> bool:
    """Whether ``token`` names a user module: a ``.py`` path, or a dotted module name that is
    not a config key, not a path or video file name, and not an existing file."""
    if token.endswith(".py"):
        return True
    if "/" in token or os.sep in token or token.lower().endswith(VIDEO_EXTS):
        return False
    return (bool(_MODULE.fullmatch(token)) and not looks_like_key(token)
            and not os.path.exists(token))


class ExtraModulesAction(argparse.Action):
    """``--extra-modules a.py b.py`` and ``--extra-modules a.py --extra-modules b.py`` alike.

    The values end at the first one that is not a module (see :func:`looks_like_module`): it and
    those after it go back to the command's positionals, so ``--extra-modules m.py
    TRAIN.EPOCH_NUM 2`` reads as a module and one override, and ``--extra-modules m.py a.mp4``
    as a module and a video.
    """

    def __init__(self, option_strings, dest, **kwargs):
        kwargs.setdefault("nargs", "+")
        kwargs.setdefault("default", [])
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        end = next((i for i, v in enumerate(values) if not looks_like_module(v)), len(values))
        if end == 0:
            parser.error(f"{option_string} needs a .py file or a module name before "
                         f"{values[0]!r}")
        setattr(namespace, self.dest, list(getattr(namespace, self.dest) or []) + values[:end])
        spill = getattr(namespace, "_spill", [])
        setattr(namespace, "_spill", spill + list(values[end:]))


class ToolArgumentParser(argparse.ArgumentParser):
    """The parser of every zoo command. After parsing, the values ``--extra-modules`` did not
    take are put in front of the positional named ``spill_dest`` (``opts``, the trailing
    overrides, by default), and a ``--`` among the overrides is dropped."""

    spill_dest = "opts"

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        spill = ns.__dict__.pop("_spill", [])
        if hasattr(ns, self.spill_dest):
            setattr(ns, self.spill_dest, spill + list(getattr(ns, self.spill_dest) or []))
        else:
            rest = spill + rest
        if hasattr(ns, "opts"):
            ns.opts = [o for o in ns.opts if o != "--"]
        return ns, rest


def add_config_arguments(parser: argparse.ArgumentParser, default: str = "",
                         overrides: bool = True, dry_run: bool = False,
                         required: bool = False) -> None:
    """``--config-file``, ``--extra-modules`` and (with ``overrides``) trailing ``KEY VALUE``
    overrides, spelled the same in every command that reads a config."""
    parser.add_argument("--config-file", default=default, metavar="FILE", required=required,
                        help="YAML config file" + (f" (default: {default})" if default else ""))
    add_extra_modules_argument(parser, "; added to CONFIG.EXTRA_MODULES")
    if dry_run:
        parser.add_argument(
            "--dry-run", action="store_true",
            help="check the config, build the model on the meta device and list missing data; "
            "trains/tests nothing (see zoo/cli/dry_run.py)",
        )
    if overrides:
        parser.add_argument("opts", nargs=argparse.REMAINDER, metavar="KEY VALUE",
                            help="config overrides")


def add_extra_modules_argument(parser: argparse.ArgumentParser, note: str = "") -> None:
    """``--extra-modules``: user files or module names to import first (their @register calls
    run); several after one flag or the flag repeated."""
    parser.add_argument(
        "--extra-modules", action=ExtraModulesAction, metavar="PY",
        help="Python files or module names to import first so their @register calls run "
        "(--extra-modules a.py b.py, or the flag repeated)" + note,
    )


def tool_parser(description: str, doc: Optional[str] = None, config: bool = False,
                epilog: Optional[str] = None, **config_args) -> ToolArgumentParser:
    """The parser every command starts from.

    Args:
        description: The ``--help`` title.
        doc: A module docstring whose text after its first paragraph is the ``--help`` epilog
            (kept as written: usage lines); the trailing-overrides note is added to it.
        config: Add :func:`add_config_arguments` (``config_args`` go to it).
        epilog: The ``--help`` epilog, instead of the one taken from ``doc``.
    """
    if epilog is None and doc and "\n\n" in doc:
        epilog = doc.split("\n\n", 1)[1].rstrip()
    if config and config_args.get("overrides", True):
        epilog = f"{epilog}\n\n{OVERRIDES_HELP}" if epilog else OVERRIDES_HELP
    formatter = argparse.RawDescriptionHelpFormatter if doc else argparse.HelpFormatter
    parser = ToolArgumentParser(description=description, epilog=epilog,
                                formatter_class=formatter)
    if config:
        add_config_arguments(parser, **config_args)
    return parser


def default_argument_parser(description: str) -> argparse.ArgumentParser:
    """The parser of the training-style commands: ``--config-file``, ``--extra-modules``,
    ``--dry-run`` and trailing ``KEY VALUE`` overrides."""
    return tool_parser(description, config=True, dry_run=True)


def with_extra_modules(cfg, modules: Sequence[str]):
    """``cfg`` with ``--extra-modules`` added after the config's own ``CONFIG.EXTRA_MODULES``."""
    if modules:
        cfg.defrost()
        cfg.CONFIG.EXTRA_MODULES = list(cfg.CONFIG.EXTRA_MODULES) + list(modules)
        cfg.freeze()
    return cfg


def setup_cfg(args: argparse.Namespace):
    """Load the config, import the user's modules and check the model name exists."""
    opts = list(args.opts)
    cfg = with_extra_modules(load_config(args.config_file or None, opts), args.extra_modules)
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
        splits: Sequence[str] = ("train", "val"), preemptible: bool = False) -> int:
    """Parse, configure, check the data and ``launch(worker)``; returns the process exit code.

    Every failure ends here: one ``error:`` line on the console (from the first process of each
    node under torchrun / Slurm, whose other ranks would repeat it), the traceback in the rank's
    log file (see zoo/utils/errors.py for what is a user error and what is a bug).

    Args:
        worker: ``worker(cfg)``, run in every process.
        description: The tool's ``--help`` text.
        argv: The command line (default ``sys.argv[1:]``).
        splits: The data splits the worker reads, checked before any worker starts
            (``("test",)`` for testing).
        preemptible: SIGTERM / SIGUSR1 stop the run with exit code 75 (training; see
            zoo/launch/preemption.py): this process forwards them to its workers, or, when it
            trains itself, stops at the next step with a checkpoint.
    """
    args = default_argument_parser(description).parse_args(argv)
    rank = process_rank()
    # Under torchrun/Slurm each process is already a rank: only rank 0 talks on the console.
    setup_logger(None, rank)
    with launcher_signals() if preemptible else contextlib.nullcontext() as guard:
        code = _run(worker, args, rank, splits, guard)
    if code not in (0, PREEMPTED_EXIT_CODE) and not talks_on_console():
        # Outside the signal guard: when the launcher stops this process, it just ends.
        time.sleep(CONSOLE_GRACE_S)
    return code


def _run(worker: Callable, args: argparse.Namespace, rank: int, splits: Sequence[str],
         guard) -> int:
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
        # The one place the job's topology is worked out (a bad one is the most basic error).
        spec = resolve_job(cfg, node_rank=command_line_node_rank(args.opts, cfg))
        if guard is not None:
            guard.grace_s = spec.preempt_grace_s
        check_data(cfg, splits, spec)
        check_output_writable(cfg)
        launch(worker, spec, cfg)
    except Preempted as e:
        # Not a failure (exit 75, "try again"): a SystemExit, caught here only to say so.
        if talks_on_console():
            print(f"preempted: {e}; exiting with {PREEMPTED_EXIT_CODE}", file=sys.stderr,
                  flush=True)
        return PREEMPTED_EXIT_CODE
    except Exception as e:
        return report_failure(e, output_dir(cfg) if cfg is not None else None, rank,
                              console=talks_on_console())
    return 0
