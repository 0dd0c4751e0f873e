"""zoo's command-line tools, one module per command, each with ``main(argv=None) -> int``.

Each is installed as an entry point (``[project.scripts]`` in pyproject.toml: ``zoo-train``,
``zoo-test``, ``zoo-predict``, ...) and also runs as ``python -m zoo.cli.NAME``; the scripts under
``tools/`` and ``datasets/`` are thin wrappers that call the same ``main``. Every command starts
from one parser (:func:`zoo.cli.job.tool_parser`), so ``--config-file``, ``--extra-modules``
and trailing ``KEY VALUE`` overrides read the same everywhere.

This package is the top layer: it imports ``zoo.train``, ``zoo.infer``, ``zoo.launch`` and below,
and nothing in zoo imports it. ``zoo-benchmark`` and ``zoo-benchmark-data`` run the benchmarks of
the source checkout (``benchmarks/``, see :mod:`zoo.cli.checkout`).
"""
