"""Time to first iteration: from starting a training command to its first finished iteration.

The command runs as a child process; the clock starts just before it is started and stops when
its console shows the trainer's ``first iteration done`` line (logged by rank 0 right after its
first optimizer step), so interpreter start, imports, data preparation (generation of the
synthetic data on first use included), spawning the workers and building the model all count.
The run is then stopped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

MARKER = "first iteration done"
_LOGGED = re.compile(r"first iteration done, ([\d.]+)s after launch")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        if sys.platform != "win32":
            os.killpg(proc.pid, signal.SIGTERM)  # the run's own process group: its workers too
        else:
            proc.terminate()
        proc.wait(10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


def time_to_first_iteration(cmd: Sequence[str], timeout: float = 300,
                            env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run ``cmd`` until it logs its first iteration; return the wall-clock seconds it took.

    Returns:
        ``{"seconds": wall clock from start to the line, "logged_s": the figure in the line
        (seconds since the launching process started), "data_generated": whether the line
        "generated the ... dataset" appeared before it}``.

    Raises:
        RuntimeError: the command ended, or ``timeout`` passed, before the line appeared.
    """
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=full_env, start_new_session=sys.platform != "win32")
    timer = threading.Timer(timeout, _stop, args=(proc,))
    timer.start()
    lines: List[str] = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if MARKER in line:
                seconds = time.perf_counter() - start
                logged = _LOGGED.search(line)
                return {
                    "seconds": round(seconds, 2),
                    "logged_s": float(logged.group(1)) if logged else None,
                    "data_generated": any("generated the" in ln for ln in lines),
                }
    finally:
        timer.cancel()
        _stop(proc)
        proc.stdout.close()
    tail = "\n".join(lines[-30:])
    raise RuntimeError(f"{' '.join(cmd)} never logged {MARKER!r}:\n{tail}")
