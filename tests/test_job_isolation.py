"""Job identity and node-local keys at the node rendezvous (no processes; see test_multinode.py
for two launchers and a stranger on a real port)."""

import json

from zoo.config import cfg_to_yaml, load_config
from zoo.launch.agreement import (
    config_fingerprint,
    config_items,
    job_identity,
    local_differences,
    node_local_items,
)
from zoo.launch.setup import with_job_layout

NO_ENV = {}


def _cfg(*opts):
    return load_config(None, list(opts))


def test_equal_configs_and_token_give_equal_identities():
    a = _cfg("DDP_CONFIG.JOB_TOKEN", "s3cret", "CONFIG.TRAIN.LR", "0.05")
    b = _cfg("CONFIG.TRAIN.LR", "0.05", "DDP_CONFIG.JOB_TOKEN", "s3cret")
    assert job_identity(a, NO_ENV) == job_identity(b, NO_ENV)


def test_a_math_key_changes_the_identity():
    base = job_identity(_cfg(), NO_ENV)
    for key, value in [("CONFIG.TRAIN.LR", "0.2"), ("CONFIG.MODEL.NAME", "toy"),
                       ("CONFIG.DATA.NUM_CLASSES", "7"), ("CONFIG.LOG.EXP_NAME", "other"),
                       ("CONFIG.TRAIN.BATCH_SIZE", "3")]:
        assert job_identity(_cfg(key, value), NO_ENV) != base, key


def test_node_local_keys_leave_the_identity_alone():
    a = _cfg("DDP_CONFIG.JOB_TOKEN", "t")
    b = _cfg("DDP_CONFIG.JOB_TOKEN", "t", "CONFIG.LOG.BASE_PATH", "/scratch/x",
             "CONFIG.DATA.TRAIN_DATA_PATH", "/mnt/b/videos", "CONFIG.DATA.NUM_WORKERS", "7",
             "CONFIG.LOG.DISPLAY_FREQ", "3", "CONFIG.DATA.SYNTHETIC.ROOT", "/tmp/s",
             "DDP_CONFIG.NUM_CPU_PROCS", "3", "DDP_CONFIG.THREADS_PER_PROC", "2")
    assert job_identity(a, NO_ENV) == job_identity(b, NO_ENV)
    assert config_fingerprint(config_items(a)) == config_fingerprint(config_items(b))
    assert node_local_items(b)["CONFIG.LOG.BASE_PATH"] == "/scratch/x"


def test_the_token_changes_the_identity_and_the_environment_wins():
    plain = job_identity(_cfg(), NO_ENV)
    a = job_identity(_cfg("DDP_CONFIG.JOB_TOKEN", "a"), NO_ENV)
    b = job_identity(_cfg("DDP_CONFIG.JOB_TOKEN", "b"), NO_ENV)
    assert len({plain, a, b}) == 3
    # ZOO_JOB_TOKEN replaces the key; an empty variable does not.
    assert job_identity(_cfg("DDP_CONFIG.JOB_TOKEN", "a"), {"ZOO_JOB_TOKEN": "b"}) == b
    assert job_identity(_cfg(), {"ZOO_JOB_TOKEN": "a"}) == a
    assert job_identity(_cfg("DDP_CONFIG.JOB_TOKEN", "a"), {"ZOO_JOB_TOKEN": ""}) == a


def test_the_token_is_not_sent_nor_written():
    cfg = _cfg("DDP_CONFIG.JOB_TOKEN", "s3cret-value")
    assert "s3cret-value" not in json.dumps(config_items(cfg), default=str)
    assert "s3cret-value" not in job_identity(cfg, NO_ENV)
    text = cfg_to_yaml(with_job_layout(cfg))  # what config.yaml and checkpoints hold
    assert "s3cret-value" not in text and "JOB_TOKEN: ''" in text
    assert cfg.DDP_CONFIG.JOB_TOKEN == "s3cret-value"  # the running config keeps it


def test_local_differences_name_the_keys_and_every_value():
    regs = [{"local": node_local_items(_cfg("CONFIG.LOG.BASE_PATH", p))} for p in ("/a", "/b")]
    line = local_differences(regs, lambda i: f"node {i}")
    assert "CONFIG.LOG.BASE_PATH = node 0: '/a', node 1: '/b'" in line
    assert "\n" not in line and "NUM_WORKERS" not in line
    assert local_differences(regs[:1] * 2, lambda i: f"node {i}") == ""
