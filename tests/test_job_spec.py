"""JobSpec: the launcher runs from a spec written by hand (no config at all), and resolve_job turns
a config and an environment into the same spec every time."""

import dataclasses
import json
import socket
import warnings

import pytest
import torch

from zoo.config import load_config
from zoo.launch.job import JobSpec, resolve_job
from zoo.launch.launch import LaunchError, launch
from zoo.utils import comm

# An address from TEST-NET-3 (RFC 5737): never assigned to a real host.
FAR = "203.0.113.10"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sum_of_ranks(folder: str, note: str) -> None:
    import torch.distributed as dist

    rank, world = comm.get_rank(), comm.get_world_size()
    total = comm.all_reduce_sum(torch.tensor([float(rank)]))
    with open(f"{folder}/rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "world": world, "sum": total.item(), "note": note,
                   "group": dist.is_initialized(), "restart": comm.get_restart_round()}, f)


def test_a_spec_written_by_hand_runs_two_gloo_processes(tmp_path):
    spec = JobSpec(source="by hand", num_nodes=1, node_rank=0, local_procs=2,
                   dist_url=f"tcp://127.0.0.1:{_free_port()}", backend="gloo", use_cuda=False,
                   threads_per_proc=1, init_timeout_s=60)
    launch(_sum_of_ranks, spec, str(tmp_path), "no config")
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, g in enumerate(got):
        assert g == {"rank": rank, "world": 2, "sum": 1.0, "note": "no config", "group": True,
                     "restart": 0}


def _echo(box, *args):
    box.append((comm.get_world_size(), comm.get_rank(), args))


def test_a_spec_that_is_not_distributed_is_a_plain_call():
    spec = JobSpec(source="by hand", num_nodes=1, node_rank=0, local_procs=1, dist_url="",
                   backend="", use_cuda=False, distributed=False)
    box = []
    assert launch(_echo, spec, box, 1, "two") is None
    assert box == [(1, 0, (1, "two"))]


def test_launch_refuses_what_is_not_a_spec():
    with pytest.raises(TypeError, match="needs a JobSpec"):
        launch(_echo, {"DDP_CONFIG": {}})
    spec = JobSpec(source="by hand", num_nodes=1, node_rank=0, local_procs=1, dist_url="",
                   backend="", use_cuda=False, distributed=False)
    with pytest.raises(TypeError, match="positionally"):
        launch(_echo, spec, args=([],))


def _old_main(cfg, box):
    box.append((cfg.CONFIG.TRAIN.LR, comm.get_world_size()))


def test_the_old_call_with_a_config_still_works_with_a_warning():
    cfg = load_config(None, ["DDP_CONFIG.DISTRIBUTED", "False", "TRAIN.LR", "0.25"])
    box = []
    with pytest.warns(DeprecationWarning, match="resolve_job"):
        launch(_old_main, cfg, args=(box,))
    with pytest.warns(DeprecationWarning):
        launch(_old_main, cfg, (box,), None)  # the old positional form
    assert box == [(0.25, 1), (0.25, 1)]


# ---------------------------------------------------------------------------------- resolve_job
def _cfg(*opts):
    return load_config(None, ["DDP_CONFIG.DIST_BACKEND", "gloo", *opts])


def test_the_same_config_and_environment_give_the_same_spec():
    opts = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", f"['127.0.0.1', '{FAR}']",
            "DDP_CONFIG.DIST_URL", "tcp://127.0.0.1:29500"]
    a, b = resolve_job(_cfg(*opts), env={}), resolve_job(_cfg(*opts), env={})
    assert a == b
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.node_rank = 1
    assert resolve_job(_cfg(*opts, "TRAIN.LR", "0.3"), env={}).agreement != a.agreement


def test_the_spec_holds_what_the_launcher_needs():
    cfg = _cfg("DDP_CONFIG.NUM_CPU_PROCS", "3", "DDP_CONFIG.THREADS_PER_PROC", "2",
               "DDP_CONFIG.INIT_TIMEOUT", "77", "DDP_CONFIG.HANG_TIMEOUT", "33",
               "DDP_CONFIG.MAX_RESTARTS", "4", "TRAIN.PREEMPT_GRACE", "12",
               "LOG.BASE_PATH", "/out", "LOG.EXP_NAME", "run1", "DDP_CONFIG.JOB_TOKEN", "s3cret")
    spec = resolve_job(cfg, env={})
    procs = torch.cuda.device_count() if torch.cuda.is_available() else 3
    assert (spec.distributed, spec.num_nodes, spec.node_rank, spec.local_procs) == (
        True, 1, 0, procs)
    assert (spec.world_size, spec.rank_offset, spec.rank, spec.assigned) == (procs, 0, None, False)
    assert spec.backend == "gloo" and spec.device_kind in ("cpu", "cuda")
    assert (spec.threads_per_proc, spec.init_timeout_s, spec.hang_timeout_s) == (2, 77.0, 33.0)
    assert (spec.max_restarts, spec.preempt_grace_s, spec.restart_round) == (4, 12.0, 0)
    assert spec.output_dir == "/out/run1"
    # The agreement payload is computed here: the launcher compares it as opaque data.
    assert set(spec.agreement) == {"job", "token_hash", "config_hash", "config", "local",
                                   "lists"}
    assert "DDP_CONFIG.NUM_CPU_PROCS" not in spec.agreement["config"]  # per-node key
    assert "s3cret" not in json.dumps(spec.agreement, default=str)
    assert "s3cret" not in repr(spec)


def test_world_urls_and_auto_rank_match_are_resolved_into_the_spec(tmp_path):
    cfg = _cfg("DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", f"['{FAR}', '127.0.0.1']",
               "DDP_CONFIG.AUTO_RANK_MATCH", "True", "DDP_CONFIG.DIST_URL", f"tcp://{FAR}:29500")
    spec = resolve_job(cfg, env={})
    assert spec.node_urls == (FAR, "127.0.0.1") and spec.num_nodes == 2
    assert spec.node_rank == 1 and "AUTO_RANK_MATCH" in spec.how
    assert spec.world_size is None  # known after the node rendezvous
    assert resolve_job(cfg, env={"ZOO_NODE_RANK": "0"}, node_rank=1).node_rank == 1
    # The old spelling WOLRD_URLS reaches the spec too (load_config warns and renames it).
    yaml = tmp_path / "old.yaml"
    yaml.write_text(f"DDP_CONFIG:\n  WORLD_SIZE: 2\n  WOLRD_URLS: ['{FAR}', '127.0.0.1']\n"
                    f"  DIST_URL: 'tcp://{FAR}:23456'\n  DIST_BACKEND: 'gloo'\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = resolve_job(load_config(str(yaml)), env={})
    assert old.node_urls == (FAR, "127.0.0.1") and old.node_rank == 1


def test_torchrun_environment_makes_this_process_a_rank_in_the_spec():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "GROUP_RANK": "1", "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "29500",
           "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_RESTART_COUNT": "2"}
    spec = resolve_job(_cfg(), env=env)
    assert spec.assigned and spec.source == "torchrun"
    assert (spec.rank, spec.local_rank, spec.world_size, spec.node_rank) == (3, 1, 4, 1)
    assert spec.dist_url == "env://" and spec.restart_round == 2
    # Outside torchrun the same count is not a restart of ours.
    assert resolve_job(_cfg(), env={"TORCHELASTIC_RESTART_COUNT": "2"}).restart_round == 0


def test_not_distributed_spec_records_an_outside_rank_and_launch_refuses_it():
    cfg = _cfg("DDP_CONFIG.DISTRIBUTED", "False")
    assert not resolve_job(cfg, env={}).assigned
    spec = resolve_job(cfg, env={"RANK": "1", "WORLD_SIZE": "2"})
    assert not spec.distributed and spec.assigned
    with pytest.raises(LaunchError, match="DISTRIBUTED is False but this process was started as "
                                          "rank 1 of 2"):
        launch(_echo, spec, [])


def test_a_bad_topology_fails_in_resolve_job():
    cfg = _cfg("DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_RANK", "2",
               "DDP_CONFIG.AUTO_RANK_MATCH", "False")
    with pytest.raises(LaunchError, match="WORLD_RANK = 2"):
        resolve_job(cfg, env={})


def test_fp16_on_a_node_without_a_gpu_fails_in_resolve_job(monkeypatch):
    """Before any model or loader is built, as a bad topology does."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(LaunchError, match="PRECISION fp16 needs a CUDA GPU and this node has none"):
        resolve_job(_cfg("TRAIN.PRECISION", "fp16"), env={})
    assert resolve_job(_cfg("TRAIN.PRECISION", "bf16"), env={}).device_kind == "cpu"
