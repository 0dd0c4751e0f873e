"""Two-node scaling over a shaped link (``zoo-benchmark scaling --nodes 2``).

One node (one process) against two nodes (one process each, in two network namespaces joined by a
veth pair that ``tc`` shapes to a datacenter-like link, :mod:`benchmarks.link`), with the same
per-process batch, for each ``DDP_CONFIG.GRAD_COMPRESSION`` asked for. Every run is the scaling
benchmark's worker (:mod:`benchmarks.scaling`) in fresh interpreters started as the user would
start them, one per node. Efficiency is the two-node clips/s over twice the one-node clips/s; the
training loss after the timed steps is reported beside the loss without compression (the same data
and seeds), since compression is lossy. A third kind of run, two independent one-node jobs at once
(one per namespace, nothing sent), gives the most two "nodes" that share this machine can reach.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Any, Dict, List, Sequence

from .link import Link, free_port, shaped_link, wait_all
from .scaling import _child_env, _command, _read_result, run_one


def _run_in_both(link: Link, commands: Sequence[List[str]], timeout: float) -> List[str]:
    """Start ``commands[n]`` in node ``n``'s namespace, both at once; their outputs, or
    RuntimeError with both output tails when one fails."""
    procs = [subprocess.Popen(link.command(node, cmd), env=_child_env(1),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for node, cmd in enumerate(commands)]
    outputs = wait_all(procs, timeout)
    if not all(p.returncode == 0 for p in procs):
        text = "\n".join(f"--- node {i}:\n{out[-1500:]}" for i, out in enumerate(outputs))
        raise RuntimeError(f"a node failed:\n{text}")
    return outputs


def run_two_nodes(link: Link, config_file: str, opts: Sequence[str], threads: int, steps: int,
                  warmup: int, extra_modules: Sequence[str] = (),
                  timeout: float = 900) -> Dict[str, Any]:
    """One two-node run over ``link``; node 0's result row.

    Raises:
        RuntimeError: a node failed (both nodes' output tails are in the message).
    """
    world = [*link.addresses, str(free_port())]
    with tempfile.TemporaryDirectory(prefix="zoo_scaling_nodes_") as tmp:
        result = os.path.join(tmp, "result.json")
        _run_in_both(link, [_command(config_file, opts, 1, threads, steps, warmup,
                                     result if node == 0 else os.path.join(tmp, "unused.json"),
                                     extra_modules, world) for node in range(2)], timeout)
        return _read_result(result, "2 nodes", "")


def run_side_by_side(link: Link, config_file: str, opts: Sequence[str], threads: int,
                     steps: int, warmup: int, extra_modules: Sequence[str] = (),
                     timeout: float = 900) -> Dict[str, Any]:
    """Two independent one-node jobs at once, one per namespace (no DDP, nothing sent): what the
    machine allows two nodes at most. Their clips/s added up, in node 0's row.

    Where the "nodes" share one machine's cores, memory and caches, each job is slower than a
    job alone, and two-node efficiency can be no better than this row's.
    """
    with tempfile.TemporaryDirectory(prefix="zoo_scaling_side_") as tmp:
        results = [os.path.join(tmp, f"result{node}.json") for node in range(2)]
        _run_in_both(link, [_command(config_file, opts, 1, threads, steps, warmup, results[node],
                                     extra_modules) for node in range(2)], timeout)
        rows = [_read_result(path, "2 side-by-side jobs", "") for path in results]
        return {**rows[0], "clips_per_s": round(sum(r["clips_per_s"] for r in rows), 3)}


def two_node_scaling(config_file: str, opts: Sequence[str] = (),
                     compressions: Sequence[str] = ("none", "bf16"), threads: int = 1,
                     steps: int = 20, warmup: int = 3, repeats: int = 3, rate: str = "1gbit",
                     delay_ms: float = 0.5, extra_modules: Sequence[str] = (),
                     bucket_caps: Sequence[float] = ()) -> List[Dict[str, Any]]:
    """Rows: one node, then two nodes per compression and bucket size (``bucket_caps``, MB;
    empty = the config's ``DDP_CONFIG.BUCKET_CAP_MB``), each the median of ``repeats`` runs (the
    upper middle one for an even count), the settings taking turns so a busy moment of the
    machine hits them alike.

    Raises:
        LinkError: the shaped link cannot be made here (one line: what is missing).
        RuntimeError: a run failed.
    """
    single: List[Dict[str, Any]] = []
    side: List[Dict[str, Any]] = []  # two independent jobs at once: the machine's ceiling
    settings = [(c, cap) for c in compressions for cap in (bucket_caps or [None])]
    pairs: Dict[tuple, List[Dict[str, Any]]] = {s: [] for s in settings}
    with shaped_link(rate, delay_ms) as link:
        for _ in range(repeats):
            single.append(run_one(config_file, opts, 1, threads, steps, warmup,
                                  extra_modules=extra_modules))
            side.append(run_side_by_side(link, config_file, opts, threads, steps, warmup,
                                         extra_modules))
            for c, cap in settings:
                bucket = [] if cap is None else ["DDP_CONFIG.BUCKET_CAP_MB", str(cap)]
                run = run_two_nodes(link, config_file,
                                    [*opts, "DDP_CONFIG.GRAD_COMPRESSION", c, *bucket],
                                    threads, steps, warmup, extra_modules)
                pairs[(c, cap)].append(run)
        shaping = {"link_rate": rate, "link_delay_ms": link.delay_ms,
                   "link_measured_mb_per_s": link.measured_mb_per_s, "link_note": link.delay_note}
    rows = [_median({**r, "nodes": 1, "compression": "-"} for r in single),
            _median({**r, "nodes": 2, "compression": _NO_DDP} for r in side)]
    for c, cap in settings:
        rows.append(_median({**r, "nodes": 2, "compression": c} for r in pairs[(c, cap)]))
    base = rows[0]["clips_per_s"]
    # The loss is the same for every bucket size (the same sums in another grouping, up to
    # float rounding): compressed runs are compared with the first uncompressed one.
    loss_none = next((r["last_loss"] for r in rows[1:] if r["compression"] == "none"), None)
    for row in rows:
        row["efficiency"] = round(row["clips_per_s"] / (base * row["nodes"]), 3)
        row["loss_vs_none"] = ("" if row["compression"] in ("-", _NO_DDP) or loss_none is None
                               else round(row["last_loss"] / loss_none, 4))
        row.update(shaping)
    # What the communication costs beyond what two "nodes" sharing this machine can reach at all.
    for row in rows[2:]:
        row["of_ceiling"] = round(row["efficiency"] / rows[1]["efficiency"], 3)
    return rows


# The compression column of the side-by-side row (two independent jobs, nothing sent).
_NO_DDP = "no DDP (ceiling)"


def _median(runs) -> Dict[str, Any]:
    runs = sorted(runs, key=lambda r: r["clips_per_s"])
    row = dict(runs[len(runs) // 2])
    row["clips_per_s_all_runs"] = " ".join(str(r["clips_per_s"]) for r in runs)
    return row
