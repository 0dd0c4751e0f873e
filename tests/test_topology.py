"""Topology resolution without starting processes: launchers, Slurm, AUTO_RANK_MATCH, DIST_URL.

``resolve_job`` (the command line's one call) works the topology out; its JobSpec carries it."""

import logging

import pytest

from zoo.config import load_config
from zoo.launch.agreement import compare_summaries, config_items
from zoo.launch.job import resolve_job
from zoo.launch.topology import (
    LaunchError,
    file_url_path,
    first_slurm_host,
    match_node_rank,
)
from zoo.utils import net

# Addresses from TEST-NET-3 (RFC 5737): never assigned to a real host, no traffic is sent to them.
FAR = ["203.0.113.10", "203.0.113.11", "203.0.113.12"]


def _cfg(*opts):
    return load_config(None, ["DDP_CONFIG.DIST_BACKEND", "gloo", *opts])


def _nodes(urls, *opts):
    return _cfg("DDP_CONFIG.WORLD_SIZE", str(len(urls)), "DDP_CONFIG.WORLD_URLS", repr(urls),
                "DDP_CONFIG.DIST_URL", f"tcp://{urls[0]}:29500", *opts)


# ----------------------------------------------------------------------- this host's addresses
def test_host_identity_lists_every_interface_and_loopback():
    me = net.host_identity()
    assert "127.0.0.1" in me.addresses
    assert me.hostname
    for addr in me.addresses:
        assert net.is_local(addr)
    assert not net.is_local(FAR[0])


def test_is_this_host_accepts_hostnames_and_ips():
    me = net.host_identity()
    assert net.is_this_host(me.hostname)
    assert net.is_this_host("localhost")
    assert net.is_this_host("127.0.0.1")
    assert not net.is_this_host(FAR[0])
    assert not net.is_this_host("no-such-host.invalid")


def test_same_host_compares_resolved_addresses_not_substrings():
    assert net.same_host("localhost", "127.0.0.1")
    assert not net.same_host("10.0.0.1", "10.0.0.11")  # the seed's substring check said yes
    assert not net.same_host(FAR[0], FAR[1])


# ---------------------------------------------------------------------------- AUTO_RANK_MATCH
def test_auto_rank_match_finds_this_host_by_ip_or_hostname():
    host = net.host_identity().hostname
    assert match_node_rank([FAR[0], "127.0.0.1", FAR[1]]) == 1
    assert match_node_rank([FAR[0], FAR[1], host]) == 2


def test_no_match_lists_this_hosts_addresses_and_the_list():
    with pytest.raises(LaunchError) as e:
        resolve_job(_nodes(FAR[:2]))
    msg = str(e.value)
    assert "matches none of ['203.0.113.10', '203.0.113.11']" in msg
    assert "127.0.0.1" in msg and net.host_identity().hostname in msg
    assert "DDP_CONFIG.WORLD_RANK" in msg and "\n" not in msg


def test_two_entries_for_one_host_need_an_override():
    cfg = _nodes(["127.0.0.1", "localhost"])
    with pytest.raises(LaunchError, match=r"entries \[0\] 127.0.0.1, \[1\] localhost all name"):
        resolve_job(cfg)
    topo = resolve_job(cfg, node_rank=1)
    assert (topo.node_rank, topo.num_nodes, topo.world_size) == (1, 2, None)
    topo = resolve_job(cfg, env={"ZOO_NODE_RANK": "0"})
    assert topo.node_rank == 0 and "ZOO_NODE_RANK" in topo.how


def test_loopback_entry_next_to_real_ones_is_explained():
    real = [a for a in net.local_addresses() if not net.is_loopback(a)]
    if not real:
        pytest.skip("this host has only loopback addresses")
    with pytest.raises(LaunchError, match="loopback address, which is every host"):
        match_node_rank(["127.0.0.1", real[0]])


def test_world_urls_length_must_match_world_size():
    cfg = _cfg("DDP_CONFIG.WORLD_SIZE", "3",
               "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '203.0.113.10']")
    with pytest.raises(LaunchError, match="WORLD_URLS has 2 entries .*WORLD_SIZE is 3"):
        resolve_job(cfg)


def test_world_size_zero_takes_the_node_count_from_world_urls():
    cfg = _nodes(["127.0.0.1", FAR[0], FAR[1]], "DDP_CONFIG.WORLD_SIZE", "0")
    topo = resolve_job(cfg)
    assert (topo.num_nodes, topo.node_rank) == (3, 0)


def test_one_node_ignores_world_urls_and_a_foreign_dist_url():
    # gluoncv YAMLs hard-code a cloud IP; with one node that must still just run (gluoncv #1682).
    cfg = _cfg("DDP_CONFIG.WORLD_URLS", "['203.0.113.10']", "DDP_CONFIG.DIST_URL",
               "tcp://203.0.113.10:23456", "DDP_CONFIG.NUM_CPU_PROCS", "2")
    topo = resolve_job(cfg)
    assert topo.dist_url == "tcp://127.0.0.1:23456"
    assert (topo.num_nodes, topo.world_size, topo.rank_offset) == (1, 2, 0)


def test_old_wolrd_urls_spelling_still_works(tmp_path, caplog):
    yaml = tmp_path / "old.yaml"
    yaml.write_text("DDP_CONFIG:\n  WORLD_SIZE: 2\n  WOLRD_URLS: ['127.0.0.1', '203.0.113.10']\n"
                    "  DIST_URL: 'tcp://127.0.0.1:23456'\n  DIST_BACKEND: 'gloo'\n")
    with caplog.at_level(logging.WARNING):
        cfg = load_config(str(yaml))
    assert "old spelling" in caplog.text
    assert resolve_job(cfg).node_rank == 0


# ------------------------------------------------------------------------------------ DIST_URL
def test_dist_url_host_must_be_node_0():
    cfg = _nodes(["127.0.0.1", FAR[0]], "DDP_CONFIG.DIST_URL", f"tcp://{FAR[0]}:29500")
    expected = r"its host is not node 0 \(WORLD_URLS\[0\] = '127.0.0.1'\)"
    with pytest.raises(LaunchError, match=expected):
        resolve_job(cfg)


def test_dist_url_by_hostname_equals_node_0_by_ip():
    cfg = _nodes(["127.0.0.1", FAR[0]], "DDP_CONFIG.DIST_URL", "tcp://localhost:29500")
    assert resolve_job(cfg).node_rank == 0


def test_node_0_must_own_the_dist_url_address_without_world_urls():
    cfg = _cfg("DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.AUTO_RANK_MATCH", "False",
               "DDP_CONFIG.DIST_URL", f"tcp://{FAR[0]}:29500")
    with pytest.raises(LaunchError, match="this is node 0, which hosts the rendezvous") as e:
        resolve_job(cfg)
    # The other reading: node 1 run without its rank (node 0 is the default).
    assert "if this is another node, give its rank (DDP_CONFIG.WORLD_RANK N" in str(e.value)
    topo = resolve_job(cfg, node_rank=1)  # another node only connects to it
    assert topo.node_rank == 1


def test_env_dist_url_reads_master_addr():
    cfg = _nodes(["127.0.0.1", FAR[0]], "DDP_CONFIG.DIST_URL", "env://")
    with pytest.raises(LaunchError, match="MASTER_ADDR and MASTER_PORT not set"):
        resolve_job(cfg, env={})
    topo = resolve_job(cfg, env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29501"})
    assert topo.dist_url == "tcp://127.0.0.1:29501"


def test_file_urls():
    assert file_url_path("file:///shared/job/rdzv") == "/shared/job/rdzv"
    assert file_url_path("file:///D:/pg") == "D:/pg"
    assert file_url_path("file:///D:\\pg") == "D:\\pg"
    cfg = _cfg("DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.AUTO_RANK_MATCH", "False",
               "DDP_CONFIG.DIST_URL", "file:///shared/rdzv")
    assert resolve_job(cfg).dist_url == "file:///shared/rdzv"


# ------------------------------------------------------------------- ranks from the environment
def test_torchrun_environment_means_no_spawn():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "GROUP_RANK": "1", "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "29500",
           "TORCHELASTIC_RUN_ID": "x"}
    topo = resolve_job(_cfg("DDP_CONFIG.NUM_CPU_PROCS", "8"), env=env)
    assert topo.assigned and topo.source == "torchrun"
    assert (topo.rank, topo.local_rank, topo.world_size, topo.node_rank) == (3, 1, 4, 1)
    assert topo.dist_url == "env://" and topo.local_procs == 2


def test_incomplete_rank_environment_is_an_error():
    with pytest.raises(LaunchError, match="MASTER_ADDR, MASTER_PORT not"):
        resolve_job(_cfg(), env={"RANK": "0", "WORLD_SIZE": "2"})


def test_slurm_one_task_per_process():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
           "SLURM_NNODES": "4", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[07-10]"}
    topo = resolve_job(_cfg(), env=env)
    assert topo.assigned and topo.source == "Slurm"
    assert (topo.rank, topo.local_rank, topo.world_size, topo.node_rank) == (5, 1, 8, 2)
    assert topo.dist_url == "tcp://gpu07:10001"  # port of DDP_CONFIG.DIST_URL
    topo = resolve_job(_cfg(), env=dict(env, MASTER_PORT="29777"))
    assert topo.dist_url == "tcp://gpu07:29777"


def test_slurm_one_task_per_node_spawns_workers():
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
           "SLURM_NNODES": "2", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "cn-a1,cn-b1"}
    topo = resolve_job(_cfg("DDP_CONFIG.NUM_CPU_PROCS", "3"), env=env)
    assert not topo.assigned
    assert (topo.node_rank, topo.num_nodes, topo.local_procs) == (1, 2, 3)
    assert topo.dist_url == "tcp://cn-a1:10001"


def test_slurm_batch_script_without_srun_is_not_a_job_step():
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_NNODES": "1", "SLURM_JOB_ID": "7"}
    topo = resolve_job(_cfg("DDP_CONFIG.NUM_CPU_PROCS", "2"), env=env)
    assert not topo.assigned and topo.source == "DDP_CONFIG" and topo.world_size == 2


def test_first_host_of_a_slurm_nodelist():
    assert first_slurm_host("node[001-004,010],gpu1") == "node001"
    assert first_slurm_host("a12") == "a12"
    assert first_slurm_host("rack1-[3,5-6]-ib") == "rack1-3-ib"
    assert first_slurm_host("x[9]") == "x9"


def test_scheduler_node_rank_environment():
    # AzureML per-node launch (seed 002): one launcher per node, WORLD_SIZE = nodes.
    env = {"MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "NODE_RANK": "1", "WORLD_SIZE": "2"}
    topo = resolve_job(_cfg("DDP_CONFIG.NUM_CPU_PROCS", "2"), env=env)
    assert not topo.assigned
    assert (topo.node_rank, topo.num_nodes, topo.dist_url) == (1, 2, "tcp://10.0.0.4:6105")


# ------------------------------------------------------------------------------ config agreement
def test_config_comparison_names_the_keys_that_differ():
    a = config_items(_cfg())
    b = config_items(_cfg("TRAIN.LR", "0.2", "DDP_CONFIG.NUM_CPU_PROCS", "7"))
    assert "DDP_CONFIG.NUM_CPU_PROCS" not in a  # per-node keys may differ
    base = {"zoo": "1", "torch": "2", "backend": "gloo", "procs": 1}
    summaries = [dict(base, config=a, config_hash="x"), dict(base, config=b, config_hash="y")]
    errors, _ = compare_summaries(summaries, lambda i: f"node {i}")
    assert errors == ["the config on node 1 differs in 1 key(s): CONFIG.TRAIN.LR = 0.2 (on node 0: "
                      "0.1); run every node with the same YAML and overrides"]
    summaries[1].update(zoo="9", config=a, config_hash="x")
    errors, _ = compare_summaries(summaries, lambda i: f"node {i}")
    assert errors == ["node 1 runs zoo 9 but node 0 runs zoo 1; "
                      "install the same version everywhere"]


def test_train_lists_of_other_lengths_on_two_nodes_stop_before_training(tmp_path):
    """A node-local TRAIN_ANNO_PATH may differ, but a list of another length gives the ranks
    epochs of other lengths: the job aborted in gloo ("died with signal SIGABRT")."""
    from zoo.launch.agreement import job_agreement, node_summary

    lists = []
    for node, lines in ((0, 16), (1, 8)):
        path = tmp_path / f"train{node}.txt"
        path.write_text("".join(f"v{i}.mp4 0\n" for i in range(lines)) + "\n")
        lists.append(str(path))
    summaries = [node_summary(job_agreement(_cfg("DATA.TRAIN_ANNO_PATH", p)), 1, "gloo")
                 for p in lists]
    errors, _ = compare_summaries(summaries, lambda i: f"node {i}")
    assert errors == [f"CONFIG.DATA.TRAIN_ANNO_PATH has 8 lines on node 1 ({lists[1]!r}) but 16 "
                      f"on node 0 ({lists[0]!r}): every node must read the same list (copy node "
                      "0's)"]
    same = tmp_path / "copy.txt"
    same.write_text(open(lists[0]).read())
    summaries[1] = node_summary(job_agreement(_cfg("DATA.TRAIN_ANNO_PATH", str(same))), 1, "gloo")
    assert compare_summaries(summaries, lambda i: f"node {i}")[0] == []


def test_a_node_0_name_that_does_not_resolve_is_named_not_suggested():
    """Node 1 of WORLD_URLS ['no-such-host.invalid', <this host>]: the error said "use
    tcp://no-such-host.invalid:29500" without saying the name does not resolve."""
    cfg = _cfg("DDP_CONFIG.WORLD_SIZE", "2",
               "DDP_CONFIG.WORLD_URLS", "['no-such-host.invalid', '127.0.0.1']",
               "DDP_CONFIG.DIST_URL", "tcp://127.0.0.1:29500")
    with pytest.raises(LaunchError) as e:
        resolve_job(cfg, env={})
    assert str(e.value) == (
        "DDP_CONFIG.WORLD_URLS[0] = 'no-such-host.invalid' (node 0, which hosts the rendezvous) "
        "does not resolve on this host: give node 0's IP address, or a name every node resolves")


@pytest.mark.slow  # waits out a 7 s INIT_TIMEOUT
def test_node_0_says_which_nodes_it_waits_for(tmp_path, synth_root):
    """Node 0 of a two-node job whose node 1 never starts: it said nothing for INIT_TIMEOUT
    (300 s by default); after a few seconds it names the nodes it waits for."""
    from helpers import TINY_DATA, free_port, run_tool

    r = run_tool("train_ddp.py", [
        "DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", f"['127.0.0.1', '{FAR[0]}']",
        "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{free_port()}", "DDP_CONFIG.INIT_TIMEOUT", "7",
        "DDP_CONFIG.DIST_BACKEND", "gloo", "DATA.SYNTHETIC.ROOT", synth_root,
        "LOG.BASE_PATH", str(tmp_path), *TINY_DATA], timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "node 0: waiting for node(s) [1] to join at tcp://127.0.0.1:" in out, out
    assert "but node(s) [1] never joined" in out, out
