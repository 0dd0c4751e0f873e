"""What the nodes of one job must agree on, and the job's identity.

:func:`job_agreement` turns the config into the payload the launcher compares, once, when
``resolve_job`` (job.py) builds the JobSpec; from then on the launcher handles it as opaque data.
Every node's launcher sends :func:`node_summary` to the node rendezvous (rendezvous.py): versions,
backend, and the config without its per-node and node-local keys. Node 0 compares them
(:func:`compare_summaries`) and names what differs; node-local keys may differ and are only
reported (:func:`local_differences`). :func:`job_identity` hashes the math keys and the job token,
so a launcher of another job that reaches the same port is told apart.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch

from .. import __version__
from ..config.tree import diff_cfg, flatten_cfg

# Keys that may differ between nodes (or only record the job's layout, which the launcher keeps in
# zoo.utils.comm) and so are left out of the config comparison.
PER_NODE_KEYS = (
    "DDP_CONFIG.WORLD_RANK",
    "DDP_CONFIG.GPU",
    "DDP_CONFIG.GPU_WORLD_RANK",
    "DDP_CONFIG.GPU_WORLD_SIZE",
    "DDP_CONFIG.NUM_CPU_PROCS",
    "DDP_CONFIG.THREADS_PER_PROC",
)

# Keys that are node-local by nature: they may differ between nodes (node 0 logs one warning line
# naming them) because they change where things are read or written, or what is printed, never the
# numbers a rank computes:
# - LOG.BASE_PATH: a node's local scratch or its own mount of the shared output folder. EXP_NAME and
#   SAVE_DIR must agree: they name the run and its checkpoint folder, which AUTO_RESUME and a
#   restart look in on every rank, and a different name is more likely another run than a mount.
# - LOG.CHECKPOINT_DIR: like BASE_PATH, each node's mount of the checkpoint folder.
# - LOG.LOG_DIR (TensorBoard, rank 0 only), LOG.DISPLAY_FREQ, LOG.PROGRESS_BAR: only what is shown.
# - DATA.*_DATA_PATH, DATA.*_ANNO_PATH, DATA.SYNTHETIC.ROOT: the same data mounted at another path.
#   zoo does not compare the files' contents: the lists must be the same on every node.
# - DATA.NUM_WORKERS: loader processes per rank; the samples and their order do not depend on it.
NODE_LOCAL_KEYS = (
    "CONFIG.LOG.BASE_PATH",
    "CONFIG.LOG.CHECKPOINT_DIR",
    "CONFIG.LOG.LOG_DIR",
    "CONFIG.LOG.DISPLAY_FREQ",
    "CONFIG.LOG.PROGRESS_BAR",
    "CONFIG.DATA.TRAIN_ANNO_PATH",
    "CONFIG.DATA.TRAIN_DATA_PATH",
    "CONFIG.DATA.VAL_ANNO_PATH",
    "CONFIG.DATA.VAL_DATA_PATH",
    "CONFIG.DATA.TEST_ANNO_PATH",
    "CONFIG.DATA.TEST_DATA_PATH",
    "CONFIG.DATA.SYNTHETIC.ROOT",
    "CONFIG.DATA.NUM_WORKERS",
)

# The secret is never compared or sent as such: only its hash is part of the job identity.
JOB_TOKEN_KEY = "DDP_CONFIG.JOB_TOKEN"
JOB_TOKEN_ENV = "ZOO_JOB_TOKEN"



def config_items(cfg) -> Dict[str, object]:
    """The config as flat ``{"CONFIG.TRAIN.LR": 0.1, ...}`` without the per-node keys, the
    node-local keys and the job token: the keys every node must agree on."""
    skip = (*PER_NODE_KEYS, *NODE_LOCAL_KEYS, JOB_TOKEN_KEY)
    return {k: v for k, v in flatten_cfg(cfg).items() if k not in skip}


def node_local_items(cfg) -> Dict[str, object]:
    """The node-local keys (:data:`NODE_LOCAL_KEYS`) and this node's values."""
    flat = flatten_cfg(cfg)
    return {k: flat[k] for k in NODE_LOCAL_KEYS if k in flat}


def job_token(cfg, env: Optional[Mapping[str, str]] = None) -> str:
    """The job's secret: ``ZOO_JOB_TOKEN`` when set and non-empty, else ``DDP_CONFIG.JOB_TOKEN``."""
    env = os.environ if env is None else env
    return env.get(JOB_TOKEN_ENV) or str(cfg.DDP_CONFIG.JOB_TOKEN or "")


def token_hash(cfg, env: Optional[Mapping[str, str]] = None) -> str:
    """The SHA-256 hex digest of :func:`job_token`: all of the token that leaves the process."""
    return hashlib.sha256(job_token(cfg, env).encode()).hexdigest()


def job_identity(cfg, env: Optional[Mapping[str, str]] = None) -> str:
    """Short hash of the config's math keys and of the token's hash (the token is not recoverable
    from it); equal for the launchers of one job, different for another config or token."""
    text = config_fingerprint(config_items(cfg)) + ":" + token_hash(cfg, env)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def local_differences(summaries: List[dict], label: Callable[[int], str]) -> str:
    """One line naming the node-local keys that differ and every node's value ("" if none)."""
    keys = [k for k in NODE_LOCAL_KEYS
            if len({json.dumps(s.get("local", {}).get(k), default=str) for s in summaries}) > 1]
    if not keys:
        return ""
    shown = "; ".join(k + " = " + ", ".join(f"{label(i)}: {s.get('local', {}).get(k)!r}"
                                            for i, s in enumerate(summaries)) for k in keys)
    return (f"node-local key(s) differ between nodes (allowed: paths, loader workers, logging): "
            f"{shown}")


def config_fingerprint(items: Dict[str, object]) -> str:
    """Short hash of :func:`config_items`; equal on nodes that run the same config."""
    text = json.dumps(items, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# The list files whose lengths every node must agree on: lists of other lengths give the ranks
# epochs of other lengths, and the first collective one rank makes alone aborts the job.
LIST_KEYS = ("CONFIG.DATA.TRAIN_ANNO_PATH", "CONFIG.DATA.VAL_ANNO_PATH",
             "CONFIG.DATA.TEST_ANNO_PATH")


def list_lengths(local: Mapping[str, object]) -> Dict[str, int]:
    """Non-empty lines of each :data:`LIST_KEYS` file this node has, from its node-local items
    (:func:`node_local_items`); folders and missing files, which the data checks report, are
    left out."""
    lengths = {}
    for key in LIST_KEYS:
        path = local.get(key)
        if isinstance(path, str) and path and os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    lengths[key] = sum(1 for line in f if line.strip())
            except OSError:
                continue
    return lengths


def job_agreement(cfg, env: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """What this node compares with the others, from the config: ``job`` (:func:`job_identity`),
    ``token_hash`` (its first 16 hex digits), ``config_hash``, ``config`` (:func:`config_items`),
    ``local`` (:func:`node_local_items`) and ``lists`` (:func:`list_lengths`)."""
    items, local = config_items(cfg), node_local_items(cfg)
    return {
        "job": job_identity(cfg, env),
        "token_hash": token_hash(cfg, env)[:16],
        "config_hash": config_fingerprint(items),
        "config": items,
        "local": local,
        "lists": list_lengths(local),
    }


def node_summary(agreement: Mapping[str, Any], procs: int, backend: str) -> dict:
    """What a node (or rank) tells the others about itself before training; ``agreement`` is
    :func:`job_agreement`'s payload (``JobSpec.agreement``)."""
    return {
        "host": socket.gethostname(),
        "procs": procs,
        "backend": backend,
        "zoo": __version__,
        "torch": torch.__version__.split("+")[0],
        "config_hash": agreement.get("config_hash", ""),
        "config": dict(agreement.get("config", {})),
        "local": dict(agreement.get("local", {})),
        "lists": dict(agreement.get("lists", {})),
    }


def compare_summaries(
    summaries: List[dict], label: Callable[[int], str]
) -> Tuple[List[str], List[str]]:
    """Errors and warnings about what differs from entry 0 (zoo version, backend, config keys)."""
    errors, warnings = [], []
    ref = summaries[0]
    for i, s in enumerate(summaries[1:], start=1):
        if s["zoo"] != ref["zoo"]:
            errors.append(f"{label(i)} runs zoo {s['zoo']} but {label(0)} runs zoo {ref['zoo']}; "
                          "install the same version everywhere")
        if s["backend"] != ref["backend"]:
            errors.append(f"{label(i)} uses backend {s['backend']} but {label(0)} uses "
                          f"{ref['backend']}; set DDP_CONFIG.DIST_BACKEND explicitly on all nodes")
        if s["torch"] != ref["torch"]:
            warnings.append(f"{label(i)} runs torch {s['torch']}, {label(0)} torch {ref['torch']}")
        if s["config_hash"] != ref["config_hash"]:
            diff = diff_cfg(ref["config"], s["config"], missing=None)
            shown = "; ".join(f"{k} = {mine!r} (on {label(0)}: {theirs!r})"
                              for k, theirs, mine in diff[:4])
            more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
            errors.append(f"the config on {label(i)} differs in {len(diff)} key(s): {shown}{more}; "
                          "run every node with the same YAML and overrides")
        theirs, ours = s.get("lists", {}), ref.get("lists", {})
        for key in LIST_KEYS:
            if key in theirs and key in ours and theirs[key] != ours[key]:
                errors.append(
                    f"{key} has {theirs[key]} lines on {label(i)} ({s['local'].get(key)!r}) but "
                    f"{ours[key]} on {label(0)} ({ref['local'].get(key)!r}): every node must read "
                    "the same list (copy node 0's)")
    return errors, warnings
