"""The output-folder check made once, in the main process, before any worker starts.

A folder zoo cannot write (a read-only mount, a path under a regular file, a full disk) would
otherwise fail in every worker, or only at the end of the first epoch when the first checkpoint
is written. Here a probe file is created and removed in ``BASE_PATH/EXP_NAME``, or, when that does
not exist yet, in its nearest existing parent (the check creates no folder).
"""

from __future__ import annotations

import os
import tempfile

from ..config import ConfigError
from ..launch.setup import output_dir


def check_output_writable(cfg) -> None:
    """Raise ConfigError, in one line naming the folder, when the run's folder is not writable."""
    target = os.path.abspath(output_dir(cfg))
    probe_dir = target
    while not os.path.exists(probe_dir) and os.path.dirname(probe_dir) != probe_dir:
        probe_dir = os.path.dirname(probe_dir)
    fix = "set CONFIG.LOG.BASE_PATH to a writable folder"
    if not os.path.isdir(probe_dir):
        raise ConfigError(f"output folder {target!r} cannot be created: {probe_dir!r} is not a "
                          f"folder; {fix}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".zoo_write_probe_", dir=probe_dir)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"output folder {target!r} is not writable ({probe_dir!r}: "
                          f"{e.strerror or e}); {fix}") from None
