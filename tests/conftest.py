"""Shared fixtures: a tiny generated dataset, a toy model file, a loopback weights server and a
private ZOO_HOME, two network namespaces (helpers are in helpers.py), a private temporary folder
for the session, the skip of ``cuda``-marked tests where no CUDA GPU is visible, the worker count
of ``pytest -n auto`` and each worker's torch threads."""

import getpass
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import TOY_MODEL


def pytest_addoption(parser):
    """pytest before 7.3 has no ``tmp_path_retention_policy`` (pyproject.toml sets it): declare it
    there, unused, so that the oldest pytest zoo supports reads the file without a warning."""
    major, minor = (int(part) for part in pytest.__version__.split(".")[:2])
    if (major, minor) < (7, 3):
        parser.addini("tmp_path_retention_policy", "unused before pytest 7.3", default="all")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist; without it pytest never calls this
def pytest_xdist_auto_num_workers(config):
    """``pytest -n auto`` (pytest-xdist): :func:`auto_workers` of this machine."""
    from zoo.utils.env import available_cpus

    try:
        with open("/proc/meminfo") as f:
            meminfo = f.read()
    except OSError:  # not Linux: the cores alone
        meminfo = ""
    return auto_workers(available_cpus(), meminfo)


def auto_workers(cpus: int, meminfo: str) -> int:
    """One test worker per core this process may run on (``cpus``: its affinity mask, as zoo's
    launcher counts them, not every core of the host), and no more than one per 4 GiB of
    ``MemAvailable`` in ``meminfo`` (``/proc/meminfo``'s text; the whole suite in 2 workers took
    7.3 GB at its peak), so a machine with many cores and little memory does not swap."""
    workers = cpus
    for line in meminfo.splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            workers = min(workers, int(value.split()[0]) // (4 * 1024 ** 2))  # kB
    return max(1, workers)


def pytest_configure(config):
    """In a pytest-xdist worker, torch's intra-op threads are the worker's share of the cores (the
    workers run side by side; with torch's default of one thread per core each, 2 workers on 2
    cores took the fast tier 175-219 s instead of 130-138 s). Jobs the tests launch as
    subprocesses choose their own threads, as zoo's launcher does."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if workers:
        import torch

        from zoo.utils.env import available_cpus

        torch.set_num_threads(max(1, available_cpus() // int(workers)))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run first, each file's in their order, so that the many short tests
    fill the end of a run that pytest-xdist spreads over workers (its ``load`` scheduling keeps
    a worker's last tests with it: a long test dealt out last leaves the other workers idle).
    Tests marked ``cuda`` are skipped, with the reason, where ``torch.cuda.is_available()`` is
    False (the mark is added at collection, so their fixtures never run there)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # a stable sort
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False here)")
    for item in marked:
        item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _private_tempdir(tmp_path_factory):
    """The temporary files of this test process and of every job it starts (torchrun's
    ``torchelastic_*`` logs, the ``pymp-*`` folders of a process the test kills, Ray's session)
    go to one folder of this session, removed at its end, instead of piling up in the system's
    temporary folder. The folder sits directly in that system folder, so that the Unix socket
    paths made inside it (Ray's, multiprocessing's) stay short; pytest's own folders are made
    before it, and torch.compile's cache stays where torch keeps it, shared across runs."""
    tmp_path_factory.getbasetemp()
    saved = {var: os.environ.get(var) for var in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR")}
    system = tempfile.gettempdir()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          os.path.join(system, f"torchinductor_{getpass.getuser()}"))
    private = tempfile.mkdtemp(prefix="zoo-tests-", dir=system)
    os.environ["TMPDIR"] = private
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    yield private
    for var, value in saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    tempfile.tempdir = None
    shutil.rmtree(private, ignore_errors=True)


@pytest.fixture(autouse=True)
def _restore_loggers():
    """A test that runs a command's ``main`` in this process sets up the ``zoo`` logger (its
    console handler on the test's captured stream, no propagation) and routes warnings into it:
    put both back afterwards, so a later test's ``caplog`` sees zoo's records and nothing writes
    to a stream pytest has closed."""
    saved = {name: (list(lg.handlers), lg.propagate, lg.level)
             for name, lg in ((n, logging.getLogger(n)) for n in ("zoo", "py.warnings"))}
    yield
    for name, (handlers, propagate, level) in saved.items():
        logger = logging.getLogger(name)
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.handlers[:] = handlers
        logger.propagate, logger.level = propagate, level
    logging.captureWarnings(False)


@pytest.fixture(autouse=True)
def _restore_threads():
    """A test that runs a command's ``main`` in this process sets torch's threads and the
    ``*_NUM_THREADS`` variables for the whole process (``zoo.utils.env.set_num_threads``): put
    them back, so later tests, and the jobs they start, do not inherit them."""
    import torch

    from zoo.utils.env import THREAD_VARS

    threads = torch.get_num_threads()
    saved = {var: os.environ.get(var) for var in THREAD_VARS}
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    for var, value in saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory):
    """One cache folder for generated data, shared by the whole test session."""
    return str(tmp_path_factory.mktemp("synth_cache"))


@pytest.fixture()
def toy_model_file(tmp_path):
    path = tmp_path / "toy_models.py"
    path.write_text(TOY_MODEL)
    return str(path)


class WeightsServerHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Range")))
        body = srv.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        start, rng = 0, self.headers.get("Range")
        if rng and self.headers.get("If-Range") in (None, etag):
            start = int(rng.split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.send_header("ETag", etag)
        self.end_headers()
        if srv.gate is not None:
            srv.gate()
        payload = body[start:]
        if srv.cut.get(self.path, 0) > 0:  # close the connection halfway through the body
            srv.cut[self.path] -= 1
            payload = payload[: len(payload) // 2]
        self.wfile.write(payload)


@pytest.fixture()
def server():
    """A loopback HTTP server of weights files: ``files`` (path -> bytes), ``requests`` (path,
    Range) seen, ``cut`` (path -> how many responses to cut halfway), ``gate`` (called before a
    body is sent), ``url``."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), WeightsServerHandler)
    srv.daemon_threads = True
    srv.files, srv.requests, srv.cut, srv.gate = {}, [], {}, None
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture()
def zoo_home(tmp_path, monkeypatch):
    """A private ZOO_HOME (weights cache) and no weights mirror; test_weights.py and
    test_gluoncv_weights.py use it for every test."""
    home = tmp_path / "zoo_home"
    monkeypatch.setenv("ZOO_HOME", str(home))
    monkeypatch.delenv("ZOO_WEIGHTS_MIRROR", raising=False)
    return home


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


@pytest.fixture()
def two_netns():
    """Two network namespaces joined by a veth pair: [(name, address), ...]; no default route.

    Inside them the hostnames ``node-a`` / ``node-b`` resolve to the two addresses
    (``ip netns exec`` mounts ``/etc/netns/<name>/hosts`` over ``/etc/hosts``).
    """
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is not installed, so no network namespaces")
    tag = os.getpid() % 100000
    names, addrs = [f"zoo{tag}a", f"zoo{tag}b"], ["10.77.0.1", "10.77.0.2"]
    created = []
    try:
        for name in names:
            _ip("netns", "add", name)
            created.append(name)
    except (subprocess.CalledProcessError, OSError) as e:
        for name in created:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        reason = getattr(e, "stderr", "") or str(e)
        pytest.skip(f"network namespaces are refused here ({reason.strip()})")
    try:
        veths = [f"zv{tag}a", f"zv{tag}b"]
        _ip("link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
        for name, veth, addr in zip(names, veths, addrs):
            _ip("link", "set", veth, "netns", name)
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", veth)
            _ip("-n", name, "link", "set", veth, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            os.makedirs(f"/etc/netns/{name}", exist_ok=True)
            with open(f"/etc/netns/{name}/hosts", "w") as f:
                f.write(f"127.0.0.1 localhost\n{addrs[0]} node-a\n{addrs[1]} node-b\n")
        yield list(zip(names, addrs))
    finally:
        for name in created:  # deleting a namespace deletes its end of the veth pair too
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
        try:
            os.rmdir("/etc/netns")  # only if nothing else uses it
        except OSError:
            pass
