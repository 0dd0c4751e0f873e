"""CONFIG.DATA.LOADER_TIMEOUT (zoo.data.loader_timeout): a loader worker that stops delivering
ends the wait for its batch with one error naming the key and the worker, and the process then
exits, whether the batch's message was already on the queue (its tensors are then fetched from the
stopped worker with no time limit of the DataLoader's own) or not yet made, and whatever other
loader's worker is stopped too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import ROOT

_SCRIPT = textwrap.dedent("""
    import multiprocessing
    import os
    import signal
    import sys
    import time

    import torch

    from zoo.data.loader_timeout import LoaderTimeout
    from zoo.data.robust import GuardedLoader

    SLOW = sys.argv[2] == "not-yet-made"


    class Frames(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            if SLOW and index >= 2:
                time.sleep(2.0)  # the second batch is still being made when the worker stops
            return torch.full((3, 8, 8), float(index))


    def loader(split):
        return GuardedLoader(Frames(), batch_size=2, num_workers=1, timeout=float(sys.argv[1]),
                             persistent_workers=True, multiprocessing_context="fork", split=split)


    # Another loader's worker is stopped too, as by "kill -STOP" on all of them: the process must
    # still exit (it waits for every child process at exit).
    val = loader("val")
    next(iter(val))
    [other] = multiprocessing.active_children()
    batches = iter(loader("train"))
    next(batches)
    if not SLOW:
        time.sleep(1.0)  # the next batches are made and their messages wait on the queue
    [worker] = [p for p in multiprocessing.active_children() if p.pid != other.pid]
    os.kill(worker.pid, signal.SIGSTOP)
    os.kill(other.pid, signal.SIGSTOP)
    # A stop takes effect when one of a process's threads next runs (seconds on a busy machine);
    # until then its other threads still serve requests, the fetch of a batch's tensors too.
    for pid in (worker.pid, other.pid):
        tasks = f"/proc/{pid}/task"
        while any(open(f"{tasks}/{t}/stat").read().rsplit(") ", 1)[1][0] != "T"
                  for t in os.listdir(tasks)):
            time.sleep(0.01)
    print("stopped", worker.pid, other.pid, flush=True)
    try:
        next(batches)
    except LoaderTimeout as e:
        print("error:", e, flush=True)
    worker.join(10)
    print("worker exit code", worker.exitcode, flush=True)
""")


@pytest.mark.slow
@pytest.mark.parametrize("batch", ["on-the-queue", "not-yet-made"])
def test_a_stopped_loader_worker_ends_the_wait_with_one_line_naming_loader_timeout(batch):
    timeout_s = 10  # the first batch may take seconds (worker start-up on a loaded machine)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-c", _SCRIPT, str(timeout_s), batch], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout) or ""
        if out.startswith("stopped "):  # leave no stopped worker behind
            for pid in out.splitlines()[0].split()[1:]:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        pytest.fail(f"still waiting {time.monotonic() - start:.0f} s after it started, with "
                    f"LOADER_TIMEOUT {timeout_s} s: {out!r}")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    pid = int(lines[0].split()[1])
    assert lines[1] == (
        f"error: no batch from the train loader's worker 0 (pid {pid}) for "
        f"CONFIG.DATA.LOADER_TIMEOUT = {timeout_s}s: the worker is stuck (a decoder inside C "
        "code, a hung file system) or stopped, so the loader's worker processes were killed. "
        "Raise CONFIG.DATA.LOADER_TIMEOUT if a batch can take that long (0 = wait forever)"), lines
    assert lines[2] == "worker exit code -9", lines
