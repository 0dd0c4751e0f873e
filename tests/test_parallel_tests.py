"""The worker count of ``pytest -n auto`` (tests/conftest.py): the cores, capped by memory; and
each worker's torch threads: its share of the cores."""

import pytest
import torch
from conftest import auto_workers

from zoo.utils.env import available_cpus

MEMINFO = "MemTotal:       65536000 kB\nMemFree:        1000 kB\nMemAvailable:   {} kB\n"


def test_one_worker_per_core_where_memory_allows():
    assert auto_workers(2, MEMINFO.format(22 * 1024 ** 2)) == 2


def test_memory_caps_the_workers_at_one_per_4_gib_available():
    assert auto_workers(64, MEMINFO.format(16 * 1024 ** 2)) == 4
    assert auto_workers(64, MEMINFO.format(3 * 1024 ** 2)) == 1  # never none


def test_without_meminfo_the_cores_alone():
    assert auto_workers(8, "") == 8


def test_a_worker_runs_torch_on_its_share_of_the_cores(request):
    """Also fails when an earlier test in this worker changed the threads and left them changed."""
    workers = getattr(request.config, "workerinput", {}).get("workercount")
    if not workers:
        pytest.skip("runs in a pytest-xdist worker (pytest -n N)")
    assert torch.get_num_threads() == max(1, available_cpus() // int(workers))
