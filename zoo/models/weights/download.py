"""Resolving ``MODEL.PRETRAINED`` and downloading published weights into a cache.

``MODEL.PRETRAINED`` is one of: ``""`` / ``False`` (random init), ``True`` (the architecture's
default tag), a tag from :mod:`zoo.models.weights.table` (``kinetics400``), an ``http(s)://``
URL, or a local path (a file, or a Hugging Face Hub folder). A tag or URL is downloaded once
into ``$ZOO_HOME/weights`` (default ``~/.cache/zoo/weights``), under the URL's host and path, so
that a file copied there by hand is found too. A Hugging Face weights URL (``model.safetensors``
/ ``pytorch_model.bin``, or a table entry of format ``huggingface``) brings the ``config.json``
beside it on the server into the cache beside the file.

The download (standard library only):

* goes to ``FILE.part`` and is renamed onto ``FILE`` only when complete and its hash checks out
  (SHA-256, or SHA-1 for the table entries that publish that: gluoncv's), so the cache never
  holds a partial or corrupt file under the final name;
* resumes an interrupted ``.part`` with an HTTP Range request (``If-Range`` on the server's ETag /
  Last-Modified, so a changed file restarts instead of mixing two versions), retrying a few times;
* shows a tqdm bar when stderr is a terminal;
* is done by one process per cache folder: processes of one job that start together take an
  exclusive ``fcntl`` lock on ``FILE.lock``; the others wait, then use the file. The kernel drops
  the lock of a process that dies, so a waiter then takes over (and resumes the ``.part``); a
  waiter that sees no progress for ``ZOO_WEIGHTS_STALL_S`` seconds (default 600) stops with an
  error instead of hanging.

``ZOO_WEIGHTS_MIRROR=http://host/prefix`` replaces the scheme and host of every table URL
(``https://download.pytorch.org/models/x.pth`` -> ``http://host/prefix/models/x.pth``). Without
network, the error is one line naming the URL and the cache path to copy the file to.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

from ...utils.errors import UserError
from .table import WeightsEntry, default_tag, entries

logger = logging.getLogger(__name__)

__all__ = ["WeightsError", "WeightsSource", "weights_home", "resolve_pretrained", "fetch",
           "mirror_url", "cache_path"]

_CHUNK = 1 << 20
_RETRIES = 3  # attempts per fetch; each resumes where the last one stopped
_FALSE = ("", "false", "none", "no", "0")
_TRUE = ("true", "yes", "1")


class WeightsError(UserError, RuntimeError):
    """A pretrained source cannot be resolved or fetched; the message is one line."""


@dataclass(frozen=True)
class WeightsSource:
    """Where ``MODEL.PRETRAINED`` points.

    Attributes:
        kind: ``"none"``, ``"path"`` (a local file) or ``"url"`` (downloaded into the cache).
        value: What the config said.
        path: The local file (for ``"url"``: its place in the cache, which may not exist yet).
        url: The URL to fetch (mirror applied), for ``"url"``.
        entry: The weights-table entry, when a tag named it.
        tag: That tag.
    """

    kind: str
    value: str
    path: str = ""
    url: str = ""
    entry: Optional[WeightsEntry] = None
    tag: str = ""

    def describe(self) -> str:
        """One line for logs and dry runs."""
        if self.kind == "none":
            return "random init"
        if self.kind == "path":
            return f"local file {self.path}"
        what = f"tag {self.tag!r} ({self.entry.format}) " if self.entry else ""
        state = "cached" if os.path.isfile(self.path) else "not downloaded yet"
        return f"{what}{self.url} -> {self.path} ({state})"


def weights_home() -> str:
    """The weights cache folder: ``$ZOO_HOME/weights``, default ``~/.cache/zoo/weights``."""
    home = os.environ.get("ZOO_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "zoo")
    return os.path.join(home, "weights")


def mirror_url(url: str) -> str:
    """``url`` with its scheme and host replaced by ``$ZOO_WEIGHTS_MIRROR`` (when set)."""
    mirror = os.environ.get("ZOO_WEIGHTS_MIRROR", "").strip()
    if not mirror:
        return url
    m = urllib.parse.urlsplit(mirror)
    if m.scheme not in ("http", "https") or not m.netloc:
        raise WeightsError(f"ZOO_WEIGHTS_MIRROR={mirror!r} is not an http(s)://host[/prefix] URL")
    path = urllib.parse.urlsplit(url).path
    return f"{m.scheme}://{m.netloc}{m.path.rstrip('/')}{path}"


def cache_path(url: str) -> str:
    """Where the file of ``url`` lives in the cache: ``weights_home()/HOST/PATH``."""
    parts = urllib.parse.urlsplit(url)
    segments = [s for s in urllib.parse.unquote(parts.path).split("/") if s not in ("", ".", "..")]
    if not segments:
        raise WeightsError(f"URL {url!r} names no file")
    host = parts.netloc.replace(":", "_")
    return os.path.join(weights_home(), host, *segments)


def _is_url(value: str) -> bool:
    return value.lower().startswith(("http://", "https://"))


def resolve_pretrained(value: str, model_name: str) -> WeightsSource:
    """What ``MODEL.PRETRAINED value`` means for the model ``model_name``; nothing is downloaded.

    Raises:
        WeightsError: an unknown tag / missing file (naming the tags there are), ``True`` for an
            architecture without a default, or a value that is both a tag and a local file.
    """
    value = str(value or "").strip()
    if value.lower() in _FALSE:
        return WeightsSource("none", value)
    tags = entries(model_name)
    tag = value
    if value.lower() in _TRUE:
        tag = default_tag(model_name) or ""
        if not tag:
            have = f"its tags: {', '.join(tags)}" if tags else "it has no published weights"
            raise WeightsError(
                f"MODEL.PRETRAINED True: no published Kinetics-400 weights for {model_name} in a "
                f"format zoo reads ({have}); name a tag, a file or a URL, or set False")
    if _is_url(value):
        return WeightsSource("url", value, cache_path(value), value)
    if tag in tags:
        if tag == value and os.path.exists(value):
            raise WeightsError(
                f"MODEL.PRETRAINED {value!r} is both a weights tag of {model_name} and a local "
                f"file; write ./{value} for the file")
        url = tags[tag].url
        return WeightsSource("url", value, cache_path(url), mirror_url(url), tags[tag], tag)
    if os.path.isfile(value) or os.path.isdir(value):  # a folder: a Hugging Face Hub folder
        return WeightsSource("path", value, value)
    looks_like_tag = os.sep not in value and "." not in value
    have = f"tags of {model_name}: {', '.join(tags)}" if tags else f"{model_name} has no tags"
    what = "is not a weights tag or a file" if looks_like_tag else "does not exist"
    raise WeightsError(f"MODEL.PRETRAINED {value!r} {what} ({have}; or give a file or URL)")


def fetch(source: WeightsSource) -> str:
    """The local file of ``source``, downloading it first when it is a URL not yet cached."""
    if source.kind != "url":
        return source.path
    if os.path.isfile(source.path):
        return source.path
    expected = source.entry.hash if source.entry else ""
    algo = source.entry.hash_algo if source.entry else "sha256"
    os.makedirs(os.path.dirname(source.path), exist_ok=True)
    with _download_lock(source.path + ".lock", source.path + ".part") as first:
        if not os.path.isfile(source.path):  # another process may have finished it meanwhile
            _download(source.url, source.path, expected, algo)
        elif not first:
            logger.info("using %s, downloaded by another process", source.path)
    return source.path


@contextmanager
def _download_lock(lock_path: str, part_path: str) -> Iterator[bool]:
    """Hold an exclusive lock on ``lock_path``; yields True when it was free at once.

    While waiting, a ``.part`` that stops growing for ``ZOO_WEIGHTS_STALL_S`` seconds is an error.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: no cross-process lock; each process downloads on its own
        yield True
        return
    stall = float(os.environ.get("ZOO_WEIGHTS_STALL_S", "600"))
    with open(lock_path, "a+b") as f:
        first, last, since = True, -1, time.monotonic()
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if first:
                    logger.info("waiting for another process to download %s", part_path[:-5])
                    first = False
                size = os.path.getsize(part_path) if os.path.exists(part_path) else -1
                if size != last:
                    last, since = size, time.monotonic()
                elif time.monotonic() - since > stall:
                    raise WeightsError(
                        f"waited {stall:.0f} s for another process downloading "
                        f"{part_path[:-5]} with no progress; remove {lock_path} if no download "
                        "is running") from None
                time.sleep(0.2)
        try:
            yield first
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _download(url: str, dest: str, expected: str, algo: str = "sha256") -> None:
    """Download ``url`` to ``dest`` through ``dest.part`` (resuming it), check the ``algo``
    (``sha256`` / ``sha1``) digest against ``expected`` (a prefix, or all of it), rename."""
    part, meta_path = dest + ".part", dest + ".part.json"
    for attempt in range(1, _RETRIES + 1):
        try:
            if _download_once(url, part, meta_path):
                break
            why = "the connection closed early"
        except urllib.error.HTTPError as e:
            if e.code == 416:  # our partial file does not fit the server's: start again
                _remove(part)
            elif e.code not in (408, 429, 500, 502, 503, 504):
                raise WeightsError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
            why = f"HTTP {e.code}"
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            if _is_offline(e):
                raise WeightsError(
                    f"cannot download {url} ({_reason(e)}); with no network, fetch it elsewhere "
                    f"and copy it to {dest}") from None
            why = _reason(e)
        logger.warning("download of %s stopped (%s), attempt %d of %d", url, why, attempt,
                       _RETRIES)
    else:
        raise WeightsError(f"download of {url} failed {_RETRIES} times (last: {why}); run "
                           f"again to resume it, or fetch it elsewhere and copy it to {dest}")
    got = _digest(part, algo) if expected else ""
    if expected and not got.startswith(expected.lower()):
        os.remove(part)
        _remove(meta_path)
        label = {"sha256": "SHA-256", "sha1": "SHA-1"}.get(algo, algo)
        raise WeightsError(f"{url}: {label} {got[:16]}... does not match the published "
                           f"{expected}; the file was removed (a broken mirror or proxy?)")
    os.replace(part, dest)
    _remove(meta_path)
    logger.info("downloaded %s to %s", url, dest)


def _download_once(url: str, part: str, meta_path: str) -> bool:
    """One request; appends to ``part``. True when the file is complete."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    meta = _read_meta(meta_path) if have else {}
    request = urllib.request.Request(url, headers={"User-Agent": "zoo"})
    if have and meta.get("url") == url and (meta.get("etag") or meta.get("last_modified")):
        request.add_header("Range", f"bytes={have}-")
        request.add_header("If-Range", meta.get("etag") or meta["last_modified"])
    timeout = float(os.environ.get("ZOO_WEIGHTS_TIMEOUT_S", "60"))
    with urllib.request.urlopen(request, timeout=timeout) as response:
        resumed = response.status == 206 and _range_start(response) == have
        if response.status == 206 and not resumed:  # a range we did not ask for: start again
            _remove(part)
            return False
        if not resumed:
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        _write_meta(meta_path, {"url": url, "etag": response.headers.get("ETag"),
                                "last_modified": response.headers.get("Last-Modified"),
                                "total": total})
        with open(part, "ab" if resumed else "wb") as out, _progress(url, total, have) as bar:
            while True:
                chunk = response.read(_CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                bar.update(len(chunk))
    size = os.path.getsize(part)
    return total is None or size == total


def _range_start(response) -> int:
    rng = response.headers.get("Content-Range", "")  # "bytes START-END/TOTAL"
    try:
        return int(rng.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return -1


@contextmanager
def _progress(url: str, total: Optional[int], initial: int):
    from tqdm import tqdm

    name = os.path.basename(urllib.parse.urlsplit(url).path)
    bar = tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
               desc=name, disable=not sys.stderr.isatty(), dynamic_ncols=True, leave=False)
    try:
        yield bar
    finally:
        bar.close()


def _is_offline(e: BaseException) -> bool:
    """No route to the server at all (no DNS, refused, unreachable), as opposed to a transfer
    that stopped (timeout, reset), which is worth retrying."""
    return (isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError)
            and not isinstance(e.reason, (TimeoutError, ConnectionResetError)))


def _reason(e: BaseException) -> str:
    reason = getattr(e, "reason", None) or e
    return str(reason).splitlines()[0] if str(reason) else type(reason).__name__


def _digest(path: str, algo: str = "sha256") -> str:
    """Hex digest of the file ``path`` with hashlib's ``algo``."""
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_meta(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _write_meta(path: str, meta: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
