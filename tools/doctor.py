#!/usr/bin/env python
"""Check a multi-node set-up without training; run the same command on every node at once.

    python tools/doctor.py --config-file x.yaml [--local] [KEY VALUE ...]

Prints what it found: versions, this host's addresses, the node rank it resolves to and how, the
rendezvous port, gloo's network interface; then (unless --local) joins the other nodes exactly as
training would (configs and versions compared, global ranks assigned) and runs one all-reduce.
Exit code 0 when everything passed.
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.config import ConfigError  # noqa: E402
from zoo.engine.cli import command_line_node_rank, default_argument_parser, setup_cfg  # noqa: E402
from zoo.engine.preflight import print_report, run_checks  # noqa: E402
from zoo.utils.logger import setup_logger  # noqa: E402


def main(argv=None) -> int:
    parser = default_argument_parser("Check a multi-node set-up without training.")
    parser.add_argument("--local", action="store_true",
                        help="only the checks that need no other node (no rendezvous)")
    args = parser.parse_args(argv)
    setup_logger(None, 0)
    logging.getLogger("zoo").setLevel(logging.WARNING)  # the report below is the output
    try:
        cfg = setup_cfg(args)
    except (ConfigError, FileNotFoundError, ImportError, KeyError) as e:
        print_report("FAIL", "config", str(e.args[0] if isinstance(e, KeyError) else e))
        return 2
    print_report("ok", "config", f"{args.config_file or '(defaults)'} loaded")
    ok = run_checks(cfg, command_line_node_rank(args.opts, cfg), local_only=args.local)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
