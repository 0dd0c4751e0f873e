"""Run a training-style job from the command line: parse, configure, check the data and
``launch(worker)`` (``zoo-train``, ``zoo-test``).

``zoo-train --config-file FILE [--extra-modules a.py ...] [--dry-run] [KEY VALUE ...]``

:func:`run` is the whole command; the parser it starts from is :mod:`zoo.cli.parser` and the
config it runs with comes from :func:`zoo.cli.configure.setup_cfg`. The launcher, the trainer's
helpers and the data checks are imported when :func:`run` gets that far, so importing a command
(or ``--help``) does not import torch.distributed. The parser's names and ``setup_cfg`` are
importable from here too (``zoo.engine.cli`` is this module), for one more release.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Callable, List, Optional, Sequence

from ..utils.errors import report_failure
from ..utils.logger import set_console_label, setup_logger
from ..utils.node_process import process_rank, talks_on_console
from .configure import setup_cfg, with_extra_modules  # noqa: F401  (re-exported, see above)
from .parser import (  # noqa: F401  (re-exported, see above)
    OVERRIDES_HELP,
    ExtraModulesAction,
    ToolArgumentParser,
    add_config_arguments,
    add_extra_modules_argument,
    command_line_node_rank,
    default_argument_parser,
    looks_like_key,
    looks_like_module,
    tool_parser,
)

# How long a failed process that does not print the error line (see talks_on_console) waits
# before it exits: torchrun ends the whole job when any process ends with an error, and the
# node's first process, which found the same error, needs a moment to print it.
CONSOLE_GRACE_S = 5.0


def run(worker: Callable, description: str, argv: Optional[List[str]] = None,
        splits: Sequence[str] = ("train", "val"), preemptible: bool = False,
        set_aside: Optional[Callable[[str], object]] = None, doc: Optional[str] = None) -> int:
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
        set_aside: Called with the run's folder by the job's first process before the data
            checks (after the check that the folder is writable): it moves away the earlier
            results the worker writes anew (a test's), so a job that stops there leaves none
            where its own belong.
        doc: The tool's module docstring, whose text after its first paragraph ends its
            ``--help`` (as written).
    """
    args = default_argument_parser(description, doc).parse_args(argv)
    # Before torch is imported (c10 reads it then), here and in the workers that inherit it:
    # c10d's C++ warnings and stack frames (retries, a peer that closed) only repeat zoo's
    # one-line errors. TORCH_CPP_LOG_LEVEL set by the user wins.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    from ..launch.preemption import PREEMPTED_EXIT_CODE, launcher_signals

    rank = process_rank()
    # Under torchrun/Slurm each process is already a rank: only rank 0 talks on the console.
    setup_logger(None, rank)
    with launcher_signals() if preemptible else contextlib.nullcontext() as guard:
        code = _run(worker, args, rank, splits, guard, set_aside)
    if code not in (0, PREEMPTED_EXIT_CODE) and not talks_on_console():
        # Outside the signal guard: when the launcher stops this process, it just ends.
        time.sleep(CONSOLE_GRACE_S)
    return code


def _run(worker: Callable, args: argparse.Namespace, rank: int, splits: Sequence[str],
         guard, set_aside: Optional[Callable[[str], object]] = None) -> int:
    from ..launch.job import job_topology, resolve_job
    from ..launch.launch import launch
    from ..launch.preemption import PREEMPTED_EXIT_CODE, Preempted
    from ..launch.setup import output_dir
    from ..train.finetune import resolve_num_classes
    from .data_preflight import check_data
    from .output_preflight import check_output_writable

    cfg = None
    try:
        cfg = setup_cfg(args)
        if args.dry_run:
            from .dry_run import run_dry_run

            mode = "test" if getattr(worker, "__name__", "").startswith("test") else "train"
            return run_dry_run(cfg, mode, command_line_node_rank(args.opts, cfg))
        from ..data import prepare_synthetic

        # The one place the job's topology is worked out (a bad one is the most basic error),
        # first, so that every line after it carries this node's label.
        node_rank = command_line_node_rank(args.opts, cfg)
        topology = job_topology(cfg, node_rank=node_rank)
        if not topology.assigned and topology.node_rank > 0:  # this node's launcher, not rank 0
            set_console_label(f"node{topology.node_rank}")
        cfg = prepare_synthetic(cfg)
        if "train" in splits:
            # For testing, NUM_CLASSES 0 means "the checkpoint's": the tester reads it there.
            cfg = resolve_num_classes(cfg)
        spec = resolve_job(cfg, node_rank=node_rank, topology=topology)
        if guard is not None:
            guard.grace_s = spec.preempt_grace_s
        check_output_writable(cfg)
        if set_aside and (spec.rank == 0 if spec.assigned else spec.node_rank == 0):
            set_aside(output_dir(cfg))
        check_data(cfg, splits, spec)
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
