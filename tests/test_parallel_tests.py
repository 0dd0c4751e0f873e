"""The worker count of ``pytest -n auto`` (tests/conftest.py): the cores, capped by memory."""

from conftest import auto_workers

MEMINFO = "MemTotal:       65536000 kB\nMemFree:        1000 kB\nMemAvailable:   {} kB\n"


def test_one_worker_per_core_where_memory_allows():
    assert auto_workers(2, MEMINFO.format(22 * 1024 ** 2)) == 2


def test_memory_caps_the_workers_at_one_per_4_gib_available():
    assert auto_workers(64, MEMINFO.format(16 * 1024 ** 2)) == 4
    assert auto_workers(64, MEMINFO.format(3 * 1024 ** 2)) == 1  # never none


def test_without_meminfo_the_cores_alone():
    assert auto_workers(8, "") == 8
