"""The output-folder check made once, in the main process, before any worker starts.

A folder zoo cannot write (a read-only mount, a path under a regular file, a full disk) would
otherwise fail in every worker, or only at the end of the first epoch when the first checkpoint
is written. Here a probe file is created and removed in ``BASE_PATH/EXP_NAME``, or, when that does
not exist yet, in its nearest existing parent (the check creates no folder); the same for the
checkpoint folder when it lies elsewhere (``CONFIG.LOG.CHECKPOINT_DIR`` or the engine's).
"""

from __future__ import annotations

import os
import tempfile

from ..config import ConfigError
from ..launch.setup import checkpoint_dir, output_dir


def check_output_writable(cfg) -> None:
    """Raise ConfigError, in one line naming the folder, when the run's folder or its checkpoint
    folder is not writable."""
    out = os.path.abspath(output_dir(cfg))
    _check_writable(out, "output folder", "set CONFIG.LOG.BASE_PATH to a writable folder")
    ckpt, source = checkpoint_dir(cfg)
    ckpt = os.path.abspath(ckpt)
    if ckpt != out and not ckpt.startswith(out + os.sep):
        engine = source not in ("", "CONFIG.LOG.CHECKPOINT_DIR")
        fix = "set CONFIG.LOG.CHECKPOINT_DIR to a writable folder" + (
            f" (this one is the engine's: {source})" if engine else "")
        _check_writable(ckpt, "checkpoint folder", fix)


def _check_writable(target: str, what: str, fix: str) -> None:
    probe_dir = target
    while not os.path.exists(probe_dir) and os.path.dirname(probe_dir) != probe_dir:
        probe_dir = os.path.dirname(probe_dir)
    if not os.path.isdir(probe_dir):
        raise ConfigError(f"{what} {target!r} cannot be created: {probe_dir!r} is not a "
                          f"folder; {fix}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".zoo_write_probe_", dir=probe_dir)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"{what} {target!r} is not writable ({probe_dir!r}: "
                          f"{e.strerror or e}); {fix}") from None
