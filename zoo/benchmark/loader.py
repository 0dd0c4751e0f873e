"""Moved to :mod:`zoo.benchmark.data`; this name stays for code that imports it from here."""

from .data import loader_throughput

__all__ = ["loader_throughput"]
