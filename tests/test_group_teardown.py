"""Leaving a gloo process group right after a collective never hangs. On torch before 2.8 it could:
gloo's teardown held the GIL while a worker thread needed it to free the collective's tensor."""

import os
import signal
import subprocess
import sys

from helpers import ROOT, free_port

SCRIPT = """
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from zoo.utils import comm


def run(rank, port):
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0)
    for i in range(20):
        dist.init_process_group("gloo", store=dist.PrefixStore(str(i), store), rank=rank,
                                world_size=2)
        dist.all_reduce(torch.ones(1000))  # the collective holds its tensor's last reference
        comm.leave_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(int(sys.argv[1]),), nprocs=2)
"""


def test_twenty_gloo_groups_left_right_after_a_collective(tmp_path):
    script = tmp_path / "teardown.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, str(script), str(free_port())], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the spawned ranks too
        p.communicate()
        raise AssertionError("a rank hung leaving its process group") from None
    assert p.returncode == 0, out[-3000:]
