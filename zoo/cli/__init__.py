"""zoo's command-line tools, one module per command, each with ``main(argv=None) -> int``.

Each is installed as an entry point (``[project.scripts]`` in pyproject.toml: ``zoo-train``,
``zoo-test``, ``zoo-predict``, ...) and also runs as ``python -m zoo.cli.NAME``; the scripts under
``tools/`` and ``datasets/`` are thin wrappers that call the same ``main``. Every command starts
from one parser (:func:`zoo.cli.parser.tool_parser`, which imports no torch), so
``--config-file``, ``--extra-modules`` and trailing ``KEY VALUE`` overrides read the same
everywhere, and every ``main`` is wrapped by :func:`zoo.cli.command.command`, so a failure is one
``error:`` line and the same exit codes in every command. ``zoo-train``, ``zoo-test`` and
``zoo-predict`` import the heavy parts (the trainer, the launcher, torch.distributed) inside
``main``, so importing them stays quick.

This package is the top layer: it imports every other part of zoo, and nothing in zoo imports it.
``zoo-benchmark`` and ``zoo-benchmark-data`` run the benchmarks of the source checkout
(``benchmarks/``, see :mod:`zoo.cli.checkout`).
"""
