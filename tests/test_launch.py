"""Launcher: single-process path, ranks in zoo.utils.comm, topology errors, busy port on a single
node."""

import json
import multiprocessing
import socket

import pytest
import torch.distributed as dist

from zoo.config import load_config
from zoo.launch.job import resolve_job
from zoo.launch.launch import LaunchError, launch
from zoo.utils import comm


def _record(cfg, box):
    box["initialized"] = dist.is_initialized()
    box["comm"] = (comm.get_world_size(), comm.get_rank(), comm.get_device_index())
    box["cfg"] = cfg
    comm.synchronize()  # must be a no-op without a process group


def _device():
    import torch

    return 0 if torch.cuda.is_available() else -1


def test_not_distributed_is_a_plain_call_with_no_group():
    cfg = load_config(None, ["DDP_CONFIG.DISTRIBUTED", "False", "DDP_CONFIG.NUM_CPU_PROCS", "4"])
    box = {}
    launch(_record, resolve_job(cfg), cfg, box)
    # The runtime layout is in comm; the config is passed through untouched.
    assert box == {"initialized": False, "comm": (1, 0, _device()), "cfg": cfg}
    assert box["cfg"] is cfg


def test_one_cpu_process_joins_a_one_rank_group_and_leaves_it():
    cfg = load_config(None, ["DDP_CONFIG.DIST_URL", "tcp://127.0.0.1:0"])
    box = {}
    launch(_record, resolve_job(cfg), cfg, box)
    assert box["initialized"] and box["comm"] == (1, 0, _device()) and box["cfg"] is cfg
    assert not dist.is_initialized()


def _report_layout(cfg, folder):
    from zoo.launch.setup import with_job_layout

    rec = with_job_layout(cfg).DDP_CONFIG
    with open(f"{folder}/rank{comm.get_rank()}.json", "w") as f:
        json.dump({"comm": [comm.get_world_size(), comm.get_rank(), comm.get_device_index()],
                   "cfg": [cfg.DDP_CONFIG.GPU_WORLD_SIZE, cfg.DDP_CONFIG.GPU_WORLD_RANK],
                   "recorded": [rec.GPU_WORLD_SIZE, rec.GPU_WORLD_RANK, rec.GPU],
                   "start_method": multiprocessing.get_start_method()}, f)


@pytest.mark.slow
def test_two_cpu_workers_get_their_ranks_from_comm_not_from_the_config(tmp_path):
    # gluoncv YAMLs say GPU_WORLD_SIZE 8: a value in the config is a record, never the runtime.
    cfg = load_config(None, ["DDP_CONFIG.NUM_CPU_PROCS", "2", "DDP_CONFIG.DIST_BACKEND", "gloo",
                             "DDP_CONFIG.DIST_URL", "tcp://127.0.0.1:0",
                             "DDP_CONFIG.GPU_WORLD_SIZE", "8", "DDP_CONFIG.GPU_WORLD_RANK", "5"])
    topo = resolve_job(cfg)  # 2 CPU processes; one per GPU on a machine with GPUs
    n = topo.local_procs
    launch(_report_layout, topo, cfg, str(tmp_path))
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]
    for rank, g in enumerate(got):
        device = rank if topo.use_cuda else -1
        assert g["comm"] == [n, rank, device]
        assert g["cfg"] == [8, 5]
        assert g["recorded"] == [n, rank, device]
        # The ranks' DataLoader workers start as in a process the user started (fork on Linux up
        # to Python 3.13), not with the "spawn" the ranks themselves were started with.
        assert g["start_method"] == multiprocessing.get_all_start_methods()[0]


def test_topology_for_cpu_processes():
    cfg = load_config(None, ["DDP_CONFIG.NUM_CPU_PROCS", "3", "DDP_CONFIG.DIST_BACKEND", "gloo"])
    topo = resolve_job(cfg)
    assert (topo.local_procs, topo.world_size, topo.rank_offset, topo.backend) == (3, 3, 0, "gloo")


def test_busy_port_on_a_single_node_moves_to_a_free_one():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        cfg = load_config(None, ["DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{busy}"])
        topo = resolve_job(cfg)
    assert topo.dist_url.startswith("tcp://127.0.0.1:") and not topo.dist_url.endswith(f":{busy}")


def test_world_rank_out_of_range_is_a_clear_error():
    cfg = load_config(None, ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_RANK", "2",
                             "DDP_CONFIG.AUTO_RANK_MATCH", "False"])
    with pytest.raises(LaunchError, match="WORLD_RANK = 2"):
        resolve_job(cfg)


def test_nccl_without_gpu_is_refused():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the check only applies to CPU-only nodes")
    cfg = load_config(None, ["DDP_CONFIG.DIST_BACKEND", "nccl"])
    with pytest.raises(LaunchError, match="no CUDA GPU"):
        resolve_job(cfg)


DDP_TRACEBACK = '''

-- Process 0 terminated with the following error:
Traceback (most recent call last):
  File "/x/torch/nn/parallel/distributed.py", line 1776, in _pre_forward
    if torch.is_grad_enabled() and self.reducer._rebuild_buckets():
                                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: Expected to have finished reduction in the prior iteration before starting a new \
one. This error indicates that your module has parameters that were not used in producing loss.
making sure all `forward` function outputs participate in calculating loss.
Parameter indices which did not receive grad for rank 0: 6 7
 In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to either INFO or \
DETAIL to print out information
'''


@pytest.mark.parametrize("text,line", [
    (DDP_TRACEBACK, "RuntimeError: Expected to have finished reduction in the prior iteration "
                    "before starting a new one. This error indicates that your module has "
                    "parameters that were not used in producing loss."),
    ("Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n    g()\n"
     "ValueError: bad width\nsecond line of advice\n", "ValueError: bad width"),
    # A chained exception: the last traceback's error.
    ("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n\nDuring "
     "handling of the above exception, another exception occurred:\n\nTraceback (most recent "
     "call last):\n  File \"b.py\", line 2\nzoo.launch.launch._UserStop: the real one\n",
     "the real one"),
    ("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4242\nmore",
     "Connection closed by peer [10.0.0.2]:4242"),
])
def test_a_workers_error_line_is_the_first_line_of_its_exception(text, line):
    from zoo.launch.launch import _error_line

    assert _error_line(text) == line
