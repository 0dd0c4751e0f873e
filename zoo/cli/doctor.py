"""``zoo-doctor`` (``tools/doctor.py``): check a multi-node set-up without training; run the same
command on every node at once.

    zoo-doctor --config-file x.yaml [--local] [KEY VALUE ...]

Prints what it found: versions, this host's addresses, the node rank it resolves to and how, the
rendezvous port, gloo's network interface; then (unless --local) joins the other nodes exactly as
training would (configs and versions compared, global ranks assigned) and runs one all-reduce.
Exit code 0 when everything passed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional

from ..utils.logger import setup_logger
from .command import command
from .configure import setup_cfg
from .parser import command_line_node_rank, tool_parser

DESCRIPTION = "Check a multi-node set-up without training."


def build_parser() -> argparse.ArgumentParser:
    parser = tool_parser(DESCRIPTION, __doc__, config=True)
    parser.add_argument("--local", action="store_true",
                        help="only the checks that need no other node (no rendezvous)")
    return parser


@command
def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logger(None, 0)
    logging.getLogger("zoo").setLevel(logging.WARNING)  # the report below is the output
    cfg = setup_cfg(args)  # a config that does not load is one error line, as in every command
    from .preflight import print_report, run_checks

    print_report("ok", "config", f"{args.config_file or '(defaults)'} loaded")
    ok = run_checks(cfg, command_line_node_rank(args.opts, cfg), local_only=args.local)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
