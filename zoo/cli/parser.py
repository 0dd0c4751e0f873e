"""The command line shared by every zoo command (``zoo-train``, ``tools/train_ddp.py``, ...).

``zoo-train --config-file FILE [--extra-modules a.py ...] [--dry-run] [KEY VALUE ...]``

:func:`tool_parser` is the one argument parser all commands start from (``zoo/cli/``):
``--config-file``, ``--extra-modules`` and trailing ``KEY VALUE`` overrides are spelled the same
in each, and a bad argument is one ``error:`` line with exit code 2. A leaf: it imports no torch
and nothing of zoo's but a list of file extensions, so ``--help`` and a usage error are quick.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import List, Optional, Sequence

from ..data.lists.records import VIDEO_EXTS

# A config key as written on the command line: upper-case words joined by dots
# (TRAIN.EPOCH_NUM, CONFIG.DATA.CLIP_LEN).
_KEY = re.compile(r"[A-Z][A-Z0-9_]*(\.[A-Z][A-Z0-9_]*)*")
# A module name for --extra-modules: dotted Python identifiers (my_pkg.models).
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
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
    overrides, by default), a ``--`` among the overrides is dropped, and the command's own flags
    given after the overrides (``... TRAIN.EPOCH_NUM 2 --dry-run``) are read as flags. A usage
    error is one ``error:`` line, like every other zoo error, and exit code 2."""

    spill_dest = "opts"

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = self._parse(args, namespace)
        while hasattr(ns, "opts"):
            flag = next((i for i, o in enumerate(ns.opts) if self._is_option(o)), None)
            if flag is None:
                break
            # A flag after the overrides (argparse's REMAINDER took it): parse from there on.
            given, tail = ns.opts[:flag], ns.opts[flag:]
            ns, more = self._parse(tail, ns)
            ns.opts, rest = given + ns.opts, rest + more
        return ns, rest

    def _parse(self, args, namespace):
        ns, rest = super().parse_known_args(args, namespace)
        spill = ns.__dict__.pop("_spill", [])
        if hasattr(ns, self.spill_dest):
            setattr(ns, self.spill_dest, spill + list(getattr(ns, self.spill_dest) or []))
        else:
            rest = spill + rest
        if hasattr(ns, "opts"):
            ns.opts = [o for o in ns.opts if o != "--"]
        return ns, rest

    def _is_option(self, token: str) -> bool:
        """``token`` is one of this command's own flags (``--dry-run``, ``--config-file=x``)."""
        return token.startswith("--") and token.split("=", 1)[0] in self._option_string_actions

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


class _OneConfigFile(argparse.Action):
    """``--config-file`` given once: a second one replaced the first without a word (files do
    not stack on the command line; ``_BASE_`` stacks them)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "_config_file_given", False):
            parser.error(f"--config-file is given twice ({getattr(namespace, self.dest)} and "
                         f"{values}): give one; a file builds on another with _BASE_: other.yaml")
        namespace._config_file_given = True
        setattr(namespace, self.dest, values)


def add_config_arguments(parser: argparse.ArgumentParser, default: str = "",
                         overrides: bool = True, dry_run: bool = False,
                         required: bool = False) -> None:
    """``--config-file``, ``--extra-modules`` and (with ``overrides``) trailing ``KEY VALUE``
    overrides, spelled the same in every command that reads a config."""
    parser.add_argument("--config-file", default=default, metavar="FILE", required=required,
                        action=_OneConfigFile,
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


def default_argument_parser(description: str,
                            doc: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of the training-style commands: ``--config-file``, ``--extra-modules``,
    ``--dry-run`` and trailing ``KEY VALUE`` overrides (``doc``: see :func:`tool_parser`)."""
    return tool_parser(description, doc=doc, config=True, dry_run=True)


def command_line_node_rank(opts: List[str], cfg) -> Optional[int]:
    """``DDP_CONFIG.WORLD_RANK n`` on the command line is this node's rank, over AUTO_RANK_MATCH."""
    return cfg.DDP_CONFIG.WORLD_RANK if "DDP_CONFIG.WORLD_RANK" in list(opts)[0::2] else None


def positionals_after_pairs(parser: argparse.ArgumentParser, args: argparse.Namespace,
                            dest: str, names: Sequence[str]) -> None:
    """Give the positionals ``names`` (declared ``nargs="?"``) the values that a ``KEY VALUE``
    list option (``dest``, ``nargs="+"``) took from the end of the command line: argparse lets
    ``--kwargs a 1 IN OUT`` take ``IN OUT`` too. A usage error names what is missing."""
    missing = [name for name in names if getattr(args, name) is None]
    values = list(getattr(args, dest))
    if not missing:
        return
    keep = len(values) - len(missing)
    if keep < 0 or keep % 2:
        flag = "--" + dest.replace("_", "-")
        parser.error(f"the following arguments are required: {', '.join(missing)} (or "
                     f"{flag} is not KEY VALUE pairs: {' '.join(values)})")
    setattr(args, dest, values[:keep])
    for name, value in zip(missing, values[keep:]):
        setattr(args, name, value)


def check_pairs(parser: argparse.ArgumentParser, flag: str, values: List[str]) -> None:
    """A usage error unless ``values`` (given with ``flag``) are ``KEY VALUE`` pairs."""
    if len(values) % 2:
        parser.error(f"{flag} takes KEY VALUE pairs, got an odd list: {' '.join(values)}")
