"""How every zoo command ends: :func:`command` wraps a command's ``main``.

    @command
    def main(argv: Optional[List[str]] = None) -> int:
        ...

A command that fails prints one ``error:`` line (:func:`zoo.utils.errors.report_failure`: the
message of a user error, or the type and message of a bug with its traceback) and exits with the
same codes as every other command: 0 success, 2 a config or usage error (argparse's own usage
errors too), 1 anything else; a preempted training run exits 75 (zoo/launch/preemption.py).
Output cut short by its reader (``zoo-list-models | head``) ends the command quietly, as a shell
tool would: exit 141 (128 + SIGPIPE), nothing on stderr. Ctrl-C ends it with one line and exit
130 (128 + SIGINT), as a shell tool would, instead of a traceback.
The mains under tools/ and datasets/ and the [project.scripts] entry points are the wrapped ones.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable, List, Optional

from ..utils.errors import report_failure

Main = Callable[[Optional[List[str]]], int]


def command(main: Main) -> Main:
    """``main`` with zoo's failure contract: an exception it raises becomes one ``error:`` line
    on stderr and the exit code it calls for. ``SystemExit`` (argparse, ``--help``, a
    preemption) passes through as it is."""

    @functools.wraps(main)
    def run_command(argv: Optional[List[str]] = None) -> int:
        try:
            return main(argv)
        except BrokenPipeError:
            _silence_stdout()
            return 141
        except KeyboardInterrupt:
            # Ctrl-C reaches every process of the job: one line, not a traceback from each.
            print("error: interrupted (Ctrl-C). A training run keeps the checkpoints it wrote "
                  "(CONFIG.TRAIN.AUTO_RESUME True continues from the last); kill -TERM stops it "
                  "with a checkpoint of the step it is at", file=sys.stderr)
            return 130
        except Exception as e:
            return report_failure(e)

    return run_command


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of the closed pipe raises
    nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no file descriptor (replaced in tests)
        pass
