"""Pretrained weights by name: MODEL.PRETRAINED True/False/tag/URL, the download cache, formats.

Every download comes from a loopback HTTP server started here (127.0.0.1, port 0) that serves
checkpoints the tests write in each publisher's format, counts requests, honours Range/If-Range,
and can cut a response halfway. No test needs the internet. The reference logits come from the
real PyTorchVideo package (a test-only dependency), not from zoo.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from helpers import ROOT, fast_sample, file_bytes, run_tool

import zoo
from zoo.config import load_config
from zoo.models import build_model, model_facts
from zoo.models.weights import WeightsError, cache_path, fetch, resolve_pretrained, table

# Every test gets a private ZOO_HOME (conftest.py).
pytestmark = pytest.mark.usefixtures("zoo_home")

TINY = "slowfast_tiny_resnet18"


def _tiny_state(num_classes=5):
    torch.manual_seed(1)
    return zoo.create_model(TINY, num_classes=num_classes).state_dict()


def _gets(srv, path):
    return [r for r in srv.requests if r[0] == path]


# ----------------------------------------------------------------------------- config and tags
def test_config_accepts_booleans_and_strings(tmp_path):
    for text, want in (("True", "True"), ("False", ""), ("kinetics400", "kinetics400"),
                       ("'False'", "False")):
        yaml = tmp_path / "c.yaml"
        yaml.write_text(f"CONFIG:\n  MODEL:\n    PRETRAINED: {text}\n")
        assert load_config(str(yaml)).CONFIG.MODEL.PRETRAINED == want
    assert load_config(None, ["MODEL.PRETRAINED", "True"]).CONFIG.MODEL.PRETRAINED == "True"
    assert load_config(None, ["MODEL.PRETRAINED", "False"]).CONFIG.MODEL.PRETRAINED == ""
    # Other string keys still refuse a boolean.
    yaml.write_text("CONFIG:\n  MODEL:\n    NAME: True\n")
    with pytest.raises(ValueError, match="CONFIG.MODEL.NAME .* wrong type"):
        load_config(str(yaml))


def test_resolve_tags_true_false_and_errors(tmp_path, zoo_home, monkeypatch):
    pv = "https://dl.fbaipublicfiles.com/pytorchvideo/model_zoo/kinetics/SLOWFAST_8x8_R50.pyth"
    for value in ("True", "kinetics400"):
        src = resolve_pretrained(value, "slowfast_8x8_resnet50")
        assert (src.kind, src.url, src.entry.format) == ("url", pv, "pytorchvideo")
        assert src.path == str(zoo_home / "weights" / "dl.fbaipublicfiles.com" / "pytorchvideo"
                               / "model_zoo" / "kinetics" / "SLOWFAST_8x8_R50.pyth")
    assert resolve_pretrained("True", "resnet50").url.endswith("resnet50-0676ba61.pth")
    assert resolve_pretrained("True", "r3d_18").entry.hash == "b3b3357e"
    for value in ("", "False", "false"):
        assert resolve_pretrained(value, "slowfast_8x8_resnet50").kind == "none"
    with pytest.raises(WeightsError, match="'kinetics700' is not a weights tag.*kinetics400"):
        resolve_pretrained("kinetics700", "slowfast_8x8_resnet50")
    with pytest.raises(WeightsError, match="no published Kinetics-400 weights for tsn_resnet50"):
        resolve_pretrained("True", "tsn_resnet50")
    with pytest.raises(WeightsError, match="does not exist"):
        resolve_pretrained(str(tmp_path / "missing.pth"), "slowfast_8x8_resnet50")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kinetics400").write_bytes(b"x")
    with pytest.raises(WeightsError, match="both a weights tag .* and a local file"):
        resolve_pretrained("kinetics400", "slowfast_8x8_resnet50")
    assert resolve_pretrained("./kinetics400", "slowfast_8x8_resnet50").kind == "path"


def test_aliases_share_the_base_architecture_weights(monkeypatch):
    # (gluoncv's slowfast_8x8_resnet50_kinetics400 has a file of its own: test_gluoncv_weights.py)
    monkeypatch.setattr(table, "_ALIASES", {"my_slowfast": "slowfast_8x8_resnet50"})
    src = resolve_pretrained("True", "my_slowfast")
    assert src.entry is table.WEIGHTS["slowfast_8x8_resnet50"]["kinetics400"]


def test_every_table_entry_is_well_formed():
    import urllib.parse

    for name, tags in table.WEIGHTS.items():
        assert name in zoo.list_models(), name
        for tag, e in tags.items():
            assert e.format in table.FORMATS and e.source and e.dataset, (name, tag)
            assert urllib.parse.urlsplit(e.url).scheme == "https", e.url
            if e.hash:  # torchvision / OpenMMLab / gluoncv put the hash prefix in the file name
                assert e.url.rsplit(".", 1)[0].endswith("-" + e.hash[:8]), e.url
                assert e.hash_algo in table.HASH_ALGOS, (name, tag)
    for name, tag in table.DEFAULT_TAGS.items():
        assert tag in table.WEIGHTS[name]


def _publisher_state(name, entry):
    """The tensor shapes (meta device) of the network the publisher's file holds, built with the
    publisher's own code where it is installed (PyTorchVideo's hub, torchvision) and from
    MMAction2's documented key scheme (tests/test_convert.py) otherwise."""
    import torchvision
    from helpers import as_pyslowfast_x3d, mmaction2_key, slowfast_entries

    if entry.format == "gluoncv":  # gluoncv's key layout, written in test_gluoncv_weights.py
        from helpers import gluoncv_layout

        with torch.device("meta"):
            return gluoncv_layout(name, zoo.create_model(name).state_dict())
    if entry.format == "mmaction2" and name.startswith("swin3d_"):
        from helpers import mmaction2_swin_key

        with torch.device("meta"):
            tv_state = getattr(torchvision.models.video, name)().state_dict()
        return {mmaction2_swin_key(k): v for k, v in tv_state.items()}
    if name.startswith("videomae"):
        return _videomae_state(name, entry)
    if entry.format == "mmaction2":
        arch = {"slowfast_4x16_resnet50": dict(alpha=8, k=5),
                "slowfast_8x8_resnet50": dict(alpha=4, k=7)}[name]
        return {mmaction2_key(e): torch.empty(shape, device="meta")
                for e, shape in slowfast_entries(**arch) if mmaction2_key(e) is not None}
    if entry.url.endswith("/MVIT_B_16x4.pyth"):  # PyTorchVideo's MViT cannot be built on meta
        hub = pytest.importorskip("pytorchvideo.models.hub")
        return {k: torch.empty(v.shape, device="meta")
                for k, v in hub.mvit_base_16x4(pretrained=False).state_dict().items()}
    with torch.device("meta"):
        if entry.format == "pyslowfast":  # PySlowFast's (reversible) MViT: zoo's names are its own
            return zoo.create_model(name).state_dict()
        if entry.format == "torchvision":
            # the builder's name: swin3d_b_1k-24f7c7c6.pth is swin3d_b's ImageNet-1k-started file
            file = re.sub(r"_(1k|22k)$", "", entry.url.rsplit("/", 1)[1].split("-")[0])
            module = torchvision.models.video if hasattr(torchvision.models.video, file) else \
                torchvision.models
            return getattr(module, file)().state_dict()
        hub = pytest.importorskip("pytorchvideo.models.hub")
        ptv_slowfast = pytest.importorskip("pytorchvideo.models.slowfast")
        file = entry.url.rsplit("/", 1)[1]
        if name.startswith("x3d_"):  # PyTorchVideo's X3D, or the same net under PySlowFast's names
            state = getattr(hub, name)(pretrained=False).state_dict()
            return as_pyslowfast_x3d(state) if entry.format == "pyslowfast" else state
        build = {"SLOWFAST_8x8_R50.pyth": hub.slowfast_r50, "SLOWFAST_8x8_R101.pyth":
                 hub.slowfast_r101, "SLOWFAST_16x8_R101_50_50.pyth":
                 hub.slowfast_16x8_r101_50_50, "SLOW_8x8_R50.pyth": hub.slow_r50,
                 "I3D_8x8_R50.pyth": hub.i3d_r50,
                 "R2PLUS1D_16x4_R50.pyth": hub.r2plus1d_r50}.get(file)
        if build is not None:
            return build(pretrained=False).state_dict()
        assert file == "SLOWFAST_4x16_R50.pyth"  # not in the hub: PySlowFast's 4x16 settings
        return ptv_slowfast.create_slowfast(slowfast_fusion_conv_kernel_size=(5, 1, 1),
                                            slowfast_fusion_conv_stride=(8, 1, 1)).state_dict()


def _videomae_state(name, entry):
    """Hugging Face's VideoMAEForVideoClassification of the size (meta device), as the Hub's
    file names it (q_bias / v_bias), or under MMAction2's names (helpers.videomae_as_mmaction2)."""
    transformers = pytest.importorskip("transformers")
    from helpers import videomae_as_mmaction2

    from zoo.models.videomae import sincos_table

    width, depth, heads = {"videomae_vit_s": (384, 12, 6), "videomae_vit_b": (768, 12, 12),
                           "videomae_vit_l": (1024, 24, 16)}[name]
    config = transformers.VideoMAEConfig(hidden_size=width, num_hidden_layers=depth,
                                         num_attention_heads=heads, intermediate_size=4 * width,
                                         num_labels=400)
    with torch.device("meta"):
        state = transformers.VideoMAEForVideoClassification(config).state_dict()
    state = {re.sub(r"attention\.attention\.(query|value)\.bias$",
                    lambda m: f"attention.attention.{m.group(1)[0]}_bias", k): v
             for k, v in state.items()}
    if entry.format == "mmaction2":
        return videomae_as_mmaction2(state, sincos_table(8 * 14 * 14, width))
    return state


@pytest.mark.parametrize(
    "name,tag", fast_sample([(n, t) for n, tags in table.WEIGHTS.items() for t in tags]))
def test_each_published_file_fits_its_architecture(name, tag):
    """The table's claim that a publisher's network is this zoo architecture: its tensors are
    recognised as the listed format and convert onto every key of the zoo model, shape for
    shape (shapes only, on the meta device; the class count may differ)."""
    from zoo.models.classifier import head_keys
    from zoo.models.weights.load import detect_format, to_model_keys

    entry = table.WEIGHTS[name][tag]
    state = _publisher_state(name, entry)
    kwargs = {"fuse_norm_act": False} if name.startswith("slowfast") and \
        entry.format == "mmaction2" else {}
    if name.startswith("x3d_") and entry.format == "pytorchvideo":
        kwargs = {"shortcut_bn": "width_change"}  # the table's note: PyTorchVideo's network
    classes = model_facts(name).get("num_classes") or 400  # gluoncv's names fix theirs
    with torch.device("meta"):
        model = zoo.create_model(name, num_classes=classes, **kwargs)
    fmt = detect_format(state, model)
    assert fmt == entry.format or (fmt == "zoo" and entry.format in ("torchvision", "gluoncv",
                                                                     "pyslowfast"))
    converted = to_model_keys(state, model, fmt, f"{name}:{tag}")
    own, heads = model.state_dict(), set(head_keys(model))
    assert set(converted) == set(own)
    for k, v in own.items():
        assert converted[k].shape[k in heads:] == v.shape[k in heads:], k


@pytest.mark.slow
def test_docs_weights_table_is_current():
    r = run_tool("list_models.py", ["--weights", "--markdown"], timeout=120)
    assert r.returncode == 0, r.stderr
    docs = open(os.path.join(ROOT, "docs", "models.md"), encoding="utf-8").read()
    assert r.stdout.strip() in docs, (
        "docs/models.md is stale: paste `python tools/list_models.py --weights --markdown`")


# ----------------------------------------------------------------------------- downloads
def _serve_tiny(server, tmp_path, monkeypatch, hash_="", path="/models/tiny-0.pth"):
    state = _tiny_state()
    body = file_bytes({"model": state}, tmp_path)
    server.files[path] = body
    url = "https://weights.example" + path
    monkeypatch.setitem(table.WEIGHTS, TINY, {"kinetics400": table.WeightsEntry(
        url, "zoo", "kinetics400", hash_, "test")})
    return state, body, url


def test_hash_checked_and_mismatch_removes_the_file(server, tmp_path, monkeypatch):
    state, body, url = _serve_tiny(server, tmp_path, monkeypatch, hash_="deadbeef")
    monkeypatch.setenv("ZOO_WEIGHTS_MIRROR", server.url)
    dest = cache_path(url)
    with pytest.raises(WeightsError, match=r"SHA-256 .* does not match the published deadbeef"):
        zoo.create_model(TINY, num_classes=5, pretrained="kinetics400")
    assert not os.path.exists(dest) and not os.path.exists(dest + ".part")
    good = hashlib.sha256(body).hexdigest()[:8]
    monkeypatch.setitem(table.WEIGHTS[TINY], "kinetics400",
                        table.WeightsEntry(url, "zoo", "kinetics400", good, "test"))
    monkeypatch.setitem(table.DEFAULT_TAGS, TINY, "kinetics400")
    model = zoo.create_model(TINY, num_classes=5, pretrained="True")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert open(dest, "rb").read() == body


def test_mirror_replaces_scheme_and_host(server, tmp_path, monkeypatch):
    state, body, url = _serve_tiny(server, tmp_path, monkeypatch)
    server.files["/mirror/prefix/models/tiny-0.pth"] = body
    monkeypatch.setenv("ZOO_WEIGHTS_MIRROR", server.url + "/mirror/prefix/")
    src = resolve_pretrained("kinetics400", TINY)
    assert src.url == server.url + "/mirror/prefix/models/tiny-0.pth"
    assert src.path == cache_path(url)  # the cache is keyed by the publisher's URL
    model = zoo.create_model(TINY, num_classes=5, pretrained="kinetics400")
    assert torch.equal(model.head.proj.weight, state["head.proj.weight"])
    assert [p for p, _ in server.requests] == ["/mirror/prefix/models/tiny-0.pth"]


def test_no_network_is_one_line_naming_url_and_place(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/models/x.pth"
    with pytest.raises(WeightsError) as err:
        zoo.create_model(TINY, num_classes=5, pretrained=url)
    msg = str(err.value)
    assert "\n" not in msg and url in msg and cache_path(url) in msg
    assert not os.path.exists(cache_path(url))


def test_interrupted_download_resumes_and_never_leaves_a_corrupt_file(server, tmp_path):
    state = _tiny_state()
    body = file_bytes({"model": state}, tmp_path)
    server.files["/w/tiny.pth"] = body
    url = server.url + "/w/tiny.pth"
    dest = cache_path(url)
    src = resolve_pretrained(url, TINY)
    server.cut["/w/tiny.pth"] = 100  # every response stops halfway
    with pytest.raises(WeightsError, match="failed 3 times .last: the connection closed early"):
        fetch(src)
    assert not os.path.exists(dest)  # only a .part, never a partial file under the real name
    part = os.path.getsize(dest + ".part")
    assert 0 < part < len(body)
    server.cut["/w/tiny.pth"] = 0
    server.requests.clear()
    model = zoo.create_model(TINY, num_classes=5, pretrained=url)
    assert server.requests == [("/w/tiny.pth", f"bytes={part}-")]  # resumed, not restarted
    assert open(dest, "rb").read() == body and not os.path.exists(dest + ".part")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())


def test_cut_once_resumes_within_one_call_and_changed_file_restarts(server, tmp_path):
    old = file_bytes({"model": _tiny_state()}, tmp_path)
    server.files["/w/a.pth"] = old
    server.cut["/w/a.pth"] = 1
    path = fetch(resolve_pretrained(server.url + "/w/a.pth", TINY))
    assert open(path, "rb").read() == old
    assert [r for _, r in server.requests] == [None, f"bytes={len(old) // 2}-"]
    # A .part of an older version of the file: If-Range fails, the server sends the new one whole.
    server.files["/w/b.pth"] = old
    server.cut["/w/b.pth"] = 100
    with pytest.raises(WeightsError):
        fetch(resolve_pretrained(server.url + "/w/b.pth", TINY))
    new = file_bytes({"model": _tiny_state(num_classes=7)}, tmp_path, "new.pth")
    server.files["/w/b.pth"], server.cut["/w/b.pth"] = new, 0
    server.requests.clear()
    path = fetch(resolve_pretrained(server.url + "/w/b.pth", TINY))
    assert open(path, "rb").read() == new
    assert len(server.requests) == 1 and server.requests[0][1] is not None  # asked to resume


_HOLDER = textwrap.dedent("""
    import fcntl, sys, time
    lock, part = sys.argv[1:]
    f = open(lock, "a+b")
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    if part != "-":
        open(part, "wb").write(b"x" * 1000)  # a downloader that got 1000 bytes, then hangs
    print("locked", flush=True)
    time.sleep(120)
""")


def _hold_lock(dest, part=True):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, dest + ".lock",
                             dest + ".part" if part else "-"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.skipif(sys.platform == "win32", reason="fcntl locks")
def test_waiters_take_over_when_the_downloader_dies(server, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="zoo.models.weights")
    body = file_bytes({"model": _tiny_state()}, tmp_path)
    server.files["/w/d.pth"] = body
    src = resolve_pretrained(server.url + "/w/d.pth", TINY)
    holder = _hold_lock(src.path)  # leaves 1000 bytes it cannot vouch for (no ETag recorded)
    result = {}
    waiter = threading.Thread(target=lambda: result.setdefault("path", fetch(src)))
    waiter.start()
    deadline = time.monotonic() + 60  # until the waiter says it waits on the lock
    while not any("waiting for another process" in r.getMessage() for r in caplog.records):
        assert waiter.is_alive() and time.monotonic() < deadline, result
        time.sleep(0.05)
    assert waiter.is_alive() and not server.requests  # waiting on the lock, not downloading
    holder.kill()
    holder.wait()
    waiter.join(timeout=60)
    assert result["path"] == src.path and open(src.path, "rb").read() == body
    assert server.requests == [("/w/d.pth", None)]  # restarted, not appended to


@pytest.mark.skipif(sys.platform == "win32", reason="fcntl locks")
def test_waiter_stops_when_the_downloader_makes_no_progress(server, monkeypatch):
    src = resolve_pretrained(server.url + "/w/never.pth", TINY)
    monkeypatch.setenv("ZOO_WEIGHTS_STALL_S", "1")
    holder = _hold_lock(src.path)
    try:
        with pytest.raises(WeightsError, match="no progress; remove .*lock"):
            fetch(src)
    finally:
        holder.kill()
        holder.wait()
    assert not server.requests and not os.path.exists(src.path)


# ----------------------------------------------------------------------------- formats
@pytest.mark.parametrize("scheme", ["zoo", "wrapped", "pyslowfast", "mmaction2"])
def test_formats_are_detected_and_converted(server, tmp_path, scheme):
    from helpers import single_pathway_key

    torch.manual_seed(0)
    want = zoo.create_model("i3d_resnet50", num_classes=9, width=8, depth=18).state_dict()
    if scheme == "zoo":
        obj = {"model": want}
    elif scheme == "wrapped":  # PySlowFast's wrapper module around a network: "model." keys
        obj = {"model_state": {f"model.{k}": v for k, v in want.items()}}
    else:
        state = {single_pathway_key(scheme, k): v for k, v in want.items()}
        obj = ({"model_state": state, "cfg": "x: 1\n"} if scheme == "pyslowfast"
               else {"meta": {"epoch": 1}, "state_dict": state})
    server.files["/f/w.pth"] = file_bytes(obj, tmp_path)
    cfg = load_config(None, ["MODEL.NAME", "i3d_resnet50", "MODEL.KWARGS",
                             "['width', 8, 'depth', 18]", "DATA.NUM_CLASSES", "9",
                             "MODEL.PRETRAINED", server.url + "/f/w.pth"])
    got = build_model(cfg).state_dict()
    assert all(torch.equal(got[k], v) for k, v in want.items())


def test_unknown_format_is_one_line(server, tmp_path):
    server.files["/f/x.pth"] = file_bytes({"encoder.w": torch.zeros(3)}, tmp_path)
    with pytest.raises(RuntimeError, match="no converter knows their names") as e:
        zoo.create_model(TINY, num_classes=5, pretrained=server.url + "/f/x.pth")
    # Another model's weights: the fix may be the model name as well as a conversion.
    assert "CONFIG.MODEL.NAME" in str(e.value) and "\n" not in str(e.value)


# --------------------------------------- one weights URL, two processes, one download
_LOADER = textwrap.dedent("""
    import logging, sys, torch
    from zoo.config import load_config
    from zoo.models import create_model
    from zoo.models.weights.load import load_pretrained
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    url, ready, x_path, out = sys.argv[1:]
    cfg = load_config(None, ["MODEL.NAME", "slowfast_8x8_resnet50", "DATA.NUM_CLASSES", "400",
                             "MODEL.PRETRAINED", url])
    model = create_model(cfg.CONFIG.MODEL.NAME, num_classes=400)
    open(ready, "w").close()  # both processes reach the download together
    load_pretrained(model, cfg.CONFIG.MODEL.PRETRAINED, model_name=cfg.CONFIG.MODEL.NAME)
    with torch.no_grad():
        torch.save(model.eval()(torch.load(x_path)), out)
""")


@pytest.mark.slow
def test_pytorchvideo_slowfast_by_url_one_download_for_two_processes(server, tmp_path,
                                                                     zoo_home):
    from helpers import calibrated

    ptv_slowfast = pytest.importorskip("pytorchvideo.models.slowfast")
    torch.manual_seed(0)
    fast = torch.randn(1, 3, 32, 64, 64)
    slow = fast[:, :, torch.linspace(0, 31, 8).long()]
    ptv = ptv_slowfast.create_slowfast(head_pool_kernel_sizes=((8, 2, 2), (32, 2, 2)))
    ptv = calibrated(ptv, [slow, fast])
    with torch.no_grad():
        want = ptv([slow, fast])
    assert 0.1 < want.abs().max() < 100
    path = "/pytorchvideo/model_zoo/kinetics/SLOWFAST_8x8_R50.pyth"
    server.files[path] = file_bytes({"model_state": ptv.state_dict(), "epoch": 196,
                                      "cfg": "MODEL:\n  ARCH: slowfast\n"}, tmp_path)
    url = server.url + path
    x_path = tmp_path / "x.pt"
    torch.save(fast, x_path)
    ready = [tmp_path / f"ready{i}" for i in range(2)]

    def both_waiting():  # hold the body until both processes are at the download
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)

    server.gate = both_waiting
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", _LOADER, url, str(ready[i]), str(x_path),
                               str(tmp_path / f"out{i}.pt")], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    logs = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    assert len(_gets(server, path)) == 1  # exactly one download
    assert sum("waiting for another process" in log for log in logs) == 1, logs
    for i in range(2):
        assert (torch.load(tmp_path / f"out{i}.pt") - want).abs().max() < 1e-4

    # Again from the cache, with the server gone.
    server.shutdown()
    server.server_close()
    cfg = load_config(None, ["MODEL.NAME", "slowfast_8x8_resnet50", "DATA.NUM_CLASSES", "400",
                             "MODEL.PRETRAINED", url])
    model = build_model(cfg).eval()
    with torch.no_grad():
        assert (model(fast) - want).abs().max() < 1e-4
        assert (model([slow, fast]) - want).abs().max() < 1e-4


# ------------------------------------------------ a zoo checkpoint built with other kwargs
def _zoo_checkpoint(path, name, kwargs, classes=4):
    """A file as zoo's trainer writes it: the weights and the run's config (YAML text)."""
    import yaml

    torch.manual_seed(0)
    model = zoo.create_model(name, num_classes=classes, **kwargs)
    cfg = {"CONFIG": {"MODEL": {"NAME": name, "KWARGS": [x for kv in kwargs.items() for x in kv]},
                      "DATA": {"NUM_CLASSES": classes}}}
    torch.save({"model": model.state_dict(), "cfg": yaml.safe_dump(cfg), "epoch": 1}, path)
    return model


TINY_VIT = dict(embed_dim=24, depth=2, num_heads=4, frames=4, crop_size=32)


def test_a_zoo_checkpoint_refuses_a_model_with_other_architecture_kwargs(tmp_path):
    """num_heads leaves every shape as it is: loading would compute another net, silently."""
    path = tmp_path / "epoch_1.pth"
    _zoo_checkpoint(path, "videomae_vit_s", TINY_VIT)
    with pytest.raises(WeightsError) as e:
        zoo.create_model("videomae_vit_s", num_classes=4, pretrained=str(path),
                         **dict(TINY_VIT, num_heads=6))
    msg = str(e.value)
    assert "\n" not in msg and "num_heads 4 (this model: 6)" in msg
    assert "MODEL.KWARGS ['embed_dim', 24, 'depth', 2, 'num_heads', 4" in msg
    # The registered defaults (no kwargs) are named the same way, not read as another format.
    with pytest.raises(WeightsError, match=r"embed_dim 24 \(this model: 384\)"):
        zoo.create_model("videomae_vit_s", num_classes=4, pretrained=str(path))


def test_a_zoo_checkpoint_loads_with_its_kwargs_and_another_head_or_regularisation(tmp_path):
    path = tmp_path / "epoch_1.pth"
    trained = _zoo_checkpoint(path, "videomae_vit_s", TINY_VIT)
    model = zoo.create_model("videomae_vit_s", num_classes=7, pretrained=str(path),
                             **dict(TINY_VIT, drop_path=0.2, frames=8))
    got, want = model.state_dict(), trained.state_dict()
    assert all(torch.equal(got[k], v) for k, v in want.items() if not k.startswith("head."))


def test_a_zoo_run_trained_with_ema_starts_a_fine_tune_from_its_ema_weights(tmp_path, caplog):
    """The EMA weights are those its run validated (best.pth is chosen by them) and tests with;
    another project's file with an EMA set loads its other set, and says so."""
    path = tmp_path / "best.pth"
    trained = _zoo_checkpoint(path, "videomae_vit_s", TINY_VIT)
    state = torch.load(path, weights_only=True)
    ema = {k: v + 1 if v.is_floating_point() else v for k, v in state["model"].items()}
    torch.save({**state, "ema": ema}, path)
    with caplog.at_level(logging.INFO):
        model = zoo.create_model("videomae_vit_s", num_classes=4, pretrained=str(path),
                                 **TINY_VIT)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ema.items())
    assert any("loading its EMA weights" in r.getMessage() for r in caplog.records)
    # timm / VideoMAE files: 'model' (or 'state_dict') beside 'model_ema'.
    other = tmp_path / "videomae_style.pth"
    torch.save({"model": trained.state_dict(), "model_ema": ema, "epoch": 3}, other)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        model = zoo.create_model("videomae_vit_s", num_classes=4, pretrained=str(other),
                                 **TINY_VIT)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in trained.state_dict().items())
    assert any("also holds EMA weights (model_ema); loading the non-EMA set" in r.getMessage()
               for r in caplog.records)


def test_a_zoo_checkpoint_that_does_not_fit_names_the_kwargs_it_was_built_with(tmp_path):
    """A model the recorded name does not register here (a user's file not imported): the
    shapes decide, and the error says what the checkpoint holds, not another project's format."""
    path = tmp_path / "epoch_1.pth"
    _zoo_checkpoint(path, "videomae_vit_s", TINY_VIT)
    data = torch.load(path, weights_only=True)
    data["cfg"] = data["cfg"].replace("videomae_vit_s", "my_vit_not_imported")
    torch.save(data, path)
    with pytest.raises(WeightsError) as e:
        zoo.create_model("videomae_vit_s", num_classes=4, pretrained=str(path),
                         **dict(TINY_VIT, depth=3))
    msg = str(e.value)
    assert "missing from checkpoint" in msg and "pytorchvideo" not in msg
    assert msg.endswith("it holds my_vit_not_imported built with MODEL.KWARGS ['embed_dim', 24, "
                        "'depth', 2, 'num_heads', 4, 'frames', 4, 'crop_size', 32]: build the "
                        "model with them")


def test_a_zoo_checkpoint_of_another_model_says_which_model_it_holds(tmp_path):
    """Not "cannot tell which project wrote these weights", nor another project's scheme."""
    vit = tmp_path / "vit.pth"
    _zoo_checkpoint(vit, "videomae_vit_s", TINY_VIT)
    slowfast = tmp_path / "slowfast.pth"
    _zoo_checkpoint(slowfast, "slowfast_tiny_resnet18", {"width": 8})
    for path, holds, name in ((slowfast, "slowfast_tiny_resnet18", "x3d_xs"),
                              (vit, "videomae_vit_s", "slowfast_tiny_resnet18")):
        with pytest.raises(WeightsError) as e:
            zoo.create_model(name, num_classes=4, pretrained=str(path))
        assert str(e.value).startswith(f"{path} holds a {holds} (MODEL.KWARGS [")
        assert f"not a {name}: set CONFIG.MODEL.NAME {holds}" in str(e.value)


def test_a_zoo_checkpoints_classifier_follows_the_data_classes_by_name(tmp_path, caplog):
    """As many classes: the same ones in another order get their rows; other ones a fresh
    classifier (a head trained on right/left/up/down is no start for three other classes)."""
    import logging

    from zoo.models.weights.load import load_pretrained

    path = tmp_path / "epoch_1.pth"
    trained = _zoo_checkpoint(path, "slowfast_tiny_resnet18", {"width": 8})
    data = torch.load(path, weights_only=True)
    data["classes"] = ["right", "left", "up", "down"]
    torch.save(data, path)
    want = trained.state_dict()["head.proj.weight"]

    def head(classes):
        torch.manual_seed(1)
        model = zoo.create_model("slowfast_tiny_resnet18", num_classes=4, width=8)
        load_pretrained(model, str(path), "slowfast_tiny_resnet18", {"width": 8}, classes)
        return model.state_dict()["head.proj.weight"]

    assert torch.equal(head(["right", "left", "up", "down"]), want)
    assert torch.equal(head([]), want)  # data without class names: as saved
    assert torch.equal(head(["up", "down", "right", "left"]), want[[2, 3, 0, 1]])
    with caplog.at_level(logging.WARNING):
        fresh = head(["cat", "dog", "bird", "fish"])
    assert not torch.equal(fresh, want)
    assert any("classifier is for other classes (right, left, up, ...)" in r.getMessage()
               for r in caplog.records)


def test_weights_of_another_architecture_say_how_they_were_read_not_a_flag(tmp_path):
    """MODEL.PRETRAINED in a training run: no '--from torchvision' (a zoo-convert-checkpoint
    flag the user never gave), but the file, the format its keys show and the model."""
    import torchvision

    path = tmp_path / "mvit_v2_s.pth"
    with torch.device("meta"):
        shapes = torchvision.models.video.mvit_v2_s().state_dict()
    torch.save({k: torch.zeros(v.shape, dtype=v.dtype) for k, v in shapes.items()}, path)
    with pytest.raises(WeightsError) as e:
        zoo.create_model("swin3d_t", num_classes=3, pretrained=str(path))
    msg = str(e.value)
    assert msg.startswith(f"{path}: read as torchvision weights (told from its keys), it does not "
                          "fit swin3d_t: source keys the scheme does not know"), msg
    assert "--from" not in msg


def test_a_file_without_num_batches_tracked_loads_and_says_so(tmp_path, caplog):
    """PyTorch's strict load_state_dict accepts BatchNorm without its step counter, so zoo-key
    files saved that way load (the counters keep the model's own values); any other missing
    key is still refused."""
    state = _tiny_state()
    path = tmp_path / "no_counters.pth"
    torch.save({k: v for k, v in state.items() if not k.endswith(".num_batches_tracked")}, path)
    with caplog.at_level(logging.WARNING):
        model = zoo.create_model(TINY, num_classes=5, pretrained=str(path))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items()
               if not k.endswith(".num_batches_tracked"))
    assert re.search(r"no_counters\.pth: filled \d+ module\(s\) \(num_batches_tracked absent "
                     r"from source\)", caplog.text)
    torch.save({k: v for k, v in state.items() if not k.startswith("head.")}, path)
    with pytest.raises(WeightsError, match=r"missing from checkpoint \(2\): head\.proj"):
        zoo.create_model(TINY, num_classes=5, pretrained=str(path))


@pytest.mark.parametrize("prefix", ["_orig_mod.", "module._orig_mod.", "_orig_mod.module."])
def test_a_compiled_models_state_dict_loads(tmp_path, prefix):
    """torch.compile's wrapper names every key ``_orig_mod.``; with DDP, ``module.`` too."""
    from zoo.models.weights.convert.common import read_source

    state = _tiny_state()
    path = tmp_path / "compiled.pth"
    torch.save({"model_state": {prefix + k: v for k, v in state.items()}}, path)
    model = zoo.create_model(TINY, num_classes=5, pretrained=str(path))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert list(read_source(str(path), ["model_state"])) == list(state)


def test_unknown_keys_name_the_file(tmp_path):
    path = tmp_path / "other.pth"
    torch.save({"encoder.w": torch.zeros(3)}, path)
    with pytest.raises(WeightsError) as e:
        zoo.create_model(TINY, num_classes=5, pretrained=str(path))
    assert str(e.value).startswith(f"{path}: its keys (encoder.w, ...) are not SlowFast's")


def test_weights_of_a_variant_say_so_and_name_no_format_they_are_not(tmp_path):
    """torchvision swin3d_t weights in a swin3d_s: the keys are the model's (fewer blocks), not
    PySlowFast's; r3d_18 weights in an r2plus1d_18 share most names; a PyTorchVideo file of a
    net zoo does not convert names no --from flag."""
    import torchvision
    from pytorchvideo.models.csn import create_csn

    from zoo.models.weights.load import detect_format, load_pretrained

    with torch.device("meta"):
        swin_t = torchvision.models.video.swin3d_t().state_dict()
        r3d = torchvision.models.video.r3d_18().state_dict()
        r2plus1d = zoo.create_model("r2plus1d_18", num_classes=5)
        swin_s = zoo.create_model("swin3d_s", num_classes=5)
        csn = create_csn(model_depth=50).state_dict()
        ircsn = zoo.create_model("ircsn_resnet152", num_classes=5)
    assert detect_format(swin_t, swin_s, "t.pth") == "zoo"
    with pytest.raises(WeightsError) as e:
        detect_format(r3d, r2plus1d, "r3d.pth")
    assert re.match(r"r3d\.pth: \d+ of its 122 key names are VideoResNet's, the rest "
                    r"\(layer1\.0\.conv1\.0\.weight, .*another variant", str(e.value)), e.value
    path = tmp_path / "csn.pyth"
    # Its stem and first stage: what the format is told from (the rest reads the same way).
    torch.save({"model_state": {k: torch.zeros(v.shape, dtype=v.dtype) for k, v in csn.items()
                                if k.startswith(("blocks.0.", "blocks.1."))}}, path)
    with pytest.raises(WeightsError) as e:
        load_pretrained(ircsn, str(path))
    msg = str(e.value)
    assert msg.startswith(f"{path}: read as pytorchvideo weights (told from its keys)"), msg
    assert "--from" not in msg and "zoo converts pytorchvideo weights to" in msg
