"""Downloading one file: resumable, checksum-verified, never half-written at its name.

:func:`download_file` writes into ``<dest>.part`` beside ``dest`` — opened without following a
link, and only when it is one plain regular file — resumes a ``.part`` left by an earlier run
with an HTTP ``Range`` request, checks the size and checksum of what it received and only then
renames it to ``dest`` (atomic). A wrong checksum removes the ``.part``; a network failure keeps
it, so the next run goes on where this one stopped. Only ``http`` and ``https`` are fetched, a
redirect to any other scheme is refused, and nothing is printed: progress goes to a callback
``progress(done_bytes, total_bytes_or_None)``.

What arrives is bounded while it streams, never only checked at the end: at most ``size`` bytes
when the size is known, else ``max_bytes`` (the catalog passes each file's published size plus
a margin; :data:`DEFAULT_MAX_BYTES` when the caller knows neither), and never more than the
server announced (``Content-Length`` / ``Content-Range``). A server announcing more, sending
more, or sending without end is stopped at that bound: the ``.part`` is removed and one
:class:`DownloadError` says how many bytes were allowed.

Only the standard library (``urllib``) is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import socket
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..core.errors import UsageError
from ..core.safe_files import UnsafePathError, ensure_folder, open_regular

try:  # advisory lock on the .part: two processes never write one file at once
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DEFAULT_MAX_BYTES", "DownloadError", "Progress", "check_url", "download_file", "file_checksum"]

Progress = Callable[[int, "int | None"], None]
"""``progress(done_bytes, total_bytes)``; ``total_bytes`` is ``None`` when the server does not say."""

CHUNK = 256 * 1024
"""Bytes read from the connection (and written to the ``.part``) at a time."""

BACKOFF = 1.0
"""Seconds to wait before the first retry; doubled for each next one (at most 30 s)."""

USER_AGENT = "modforge-download (python-urllib)"

DEFAULT_MAX_BYTES = 2 << 30
"""Most bytes one download may bring when the caller gives neither ``size`` nor ``max_bytes``
(2 GiB; the largest file of the corpus catalog is 0.56 GB)."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class DownloadError(UsageError):
    """A file could not be fetched or did not match its checksum; the message names the URL and why.

    ``network`` is true when the failure was the network's (no route, refused, timed out, cut off):
    the ``.part`` was kept and a later run resumes it."""

    def __init__(self, message: str, *, url: str = "", network: bool = False):
        super().__init__(message)
        self.url = url
        self.network = network


class _Restart(Exception):
    """The ``.part`` cannot be continued (a reply that does not continue it, more bytes than announced): start over."""


class _TooLarge(Exception):
    """More bytes announced or arriving than the download may bring; the message says which."""


class _PartEnds(Exception):
    """HTTP 416 to ``Range: bytes=N-``: the ``.part`` is complete — or it is longer than the file, or wrong."""

    def __init__(self, total: int | None):
        super().__init__(total)
        self.total = total


def check_url(url: str, what: str = "URL") -> str:
    """``url`` when it is an ``http``/``https`` URL with a host; a :class:`DownloadError` otherwise."""
    try:
        parts = urllib.parse.urlsplit(str(url))
    except ValueError as exc:
        raise DownloadError(f"{what} {url!r} is not a valid URL ({exc})", url=str(url)) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise DownloadError(f"{what} {url!r}: only http:// and https:// URLs are downloaded", url=str(url))
    return str(url)


class _SafeRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed only to ``http``/``https`` (urllib's own handler also allows ``ftp``)."""

    @staticmethod
    def _check(req, newurl: str) -> None:
        target = urllib.parse.urljoin(req.full_url, newurl)
        if urllib.parse.urlsplit(target).scheme.lower() not in ("http", "https"):
            raise DownloadError(f"{req.full_url} redirects to {target!r}; only http:// and https:// are followed",
                                url=req.full_url)  # fmt: skip

    def http_error_302(self, req, fp, code, msg, headers):  # urllib's hook, for 301/302/303/307/308
        location = headers.get("location") or headers.get("uri")
        if location:
            self._check(req, location)
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # urllib's hook
        self._check(req, newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener() -> urllib.request.OpenerDirector:
    """An opener that speaks only HTTP(S) (proxies from the environment honoured)."""
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.HTTPHandler(), urllib.request.HTTPSHandler(),
                    urllib.request.HTTPDefaultErrorHandler(), _SafeRedirects(),
                    urllib.request.HTTPErrorProcessor()):  # fmt: skip
        opener.add_handler(handler)
    return opener


# ----------------------------------------------------------------------------- checksums
def file_checksum(path: str | os.PathLike, algorithm: str = "md5") -> str:
    """The hex digest of the regular file ``path`` (never read through a link)."""
    digest = hashlib.new(algorithm)
    with open_regular(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fd_digests(fd: int, algorithms: list[str]) -> dict[str, str]:
    digests = {name: hashlib.new(name) for name in algorithms}
    os.lseek(fd, 0, os.SEEK_SET)
    while block := os.read(fd, 1 << 20):
        for digest in digests.values():
            digest.update(block)
    return {name: digest.hexdigest() for name, digest in digests.items()}


def _expected(md5: str | None, sha256: str | None) -> dict[str, str]:
    expected = {}
    for name, value, length in (("md5", md5, 32), ("sha256", sha256, 64)):
        if value is None:
            continue
        text = str(value).strip().lower()
        if len(text) != length or any(c not in "0123456789abcdef" for c in text):
            raise UsageError(f"{name} checksum {value!r} is not {length} hexadecimal digits")
        expected[name] = text
    return expected


def _complete(path: Path, expected: dict[str, str], size: int | None) -> bool:
    """Whether ``path`` is a regular file (not a link) with the expected size and checksums.
    Without a checksum or size nothing says it is complete: ``False``."""
    if not expected and size is None:
        return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode) or (size is not None and info.st_size != size):
        return False
    try:
        return all(file_checksum(path, name) == value for name, value in expected.items())
    except (OSError, UsageError):
        return False


# ----------------------------------------------------------------------------- the download
def download_file(
    url: str,
    dest: str | os.PathLike,
    *,
    md5: str | None = None,
    sha256: str | None = None,
    size: int | None = None,
    max_bytes: int | None = None,
    progress: Progress | None = None,
    timeout: float = 60,
    retries: int = 3,
) -> Path:
    """Fetch ``url`` into ``dest``; return ``dest``.

    Args:
        url: an ``http://`` or ``https://`` URL.
        dest: the file to make; its folder is created. An existing regular file with the given
            checksum (and size) is kept as it is and nothing is fetched.
        md5, sha256: expected checksums (hex), checked before ``dest`` is put in place.
        size: expected size in bytes, checked like the checksums (and a bound while streaming).
        max_bytes: most bytes the file may have, enforced while it streams (default: ``size``,
            else :data:`DEFAULT_MAX_BYTES`); for a size known only roughly (a catalog's, plus a margin).
        progress: called with (bytes done, total bytes or ``None``) as the file arrives.
        timeout: seconds a connection may stay silent.
        retries: further tries after a network failure, each resuming where the last stopped.

    Raises:
        DownloadError: naming the URL and the reason (network failure: ``.part`` kept for a later
            resume; wrong checksum or size, more bytes than allowed: ``.part`` removed).
        UnsafePathError: ``<dest>.part`` is a link, or not one plain regular file.
    """
    url = check_url(url)
    dest = Path(dest)
    expected = _expected(md5, sha256)
    limit = _limit(size, max_bytes)
    ensure_folder(dest.parent, named=True)
    if os.path.isdir(dest) and not os.path.islink(dest):
        raise UsageError(f"{dest} is a folder; cannot download {url} there (name a file)")
    if _complete(dest, expected, size):
        if progress is not None:
            done = os.lstat(dest).st_size
            progress(done, done)
        return dest
    part = dest.with_name(dest.name + ".part")
    fd = _open_part(part)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise DownloadError(f"{part} is being written by another download of {url}; wait for it to end",
                                    url=url) from None  # fmt: skip
        _fetch(url, fd, part, expected, size, limit, progress, timeout, max(0, int(retries)))
        _verify(url, fd, part, expected, size)
        os.fsync(fd)
        # the name we verified must still be the file we wrote (not swapped for a link meanwhile)
        mine, there = os.fstat(fd), os.lstat(part)
        if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
            raise UnsafePathError(f"{part} was replaced while it was downloaded; nothing was put at {dest}")
        os.replace(part, dest)
    except BaseException:
        _drop_if_empty(fd, part)  # nothing received: no .part left lying about
        raise
    finally:
        os.close(fd)
    return dest


def _limit(size: int | None, max_bytes: int | None) -> int:
    """The most bytes the download may bring: ``size`` and ``max_bytes`` when given (the smaller), else the default."""
    bounds = []
    for name, value in (("size", size), ("max_bytes", max_bytes)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(f"{name} {value!r} must be a whole number of bytes >= 0")
        bounds.append(value)
    return min(bounds) if bounds else DEFAULT_MAX_BYTES


def _drop_if_empty(fd: int, part: Path) -> None:
    with contextlib.suppress(OSError):
        mine, there = os.fstat(fd), os.lstat(part)
        if mine.st_size == 0 and (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
            os.unlink(part)


def _open_part(part: Path) -> int:
    """A read-write, append-only descriptor on ``part`` (created if missing, never truncated here),
    opened without following a link and kept only when it is one plain regular file."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC | _NONBLOCK  # a FIFO cannot hang it
    refusal = (f"{part} is a symbolic link or not one plain regular file; modforge downloads only into files "
               f"it made (remove {part.name}, then run again)")  # fmt: skip
    try:
        fd = os.open(part, flags, 0o644)
    except OSError as exc:
        if os.path.islink(part):
            raise UnsafePathError(refusal) from None
        raise UnsafePathError(f"{part} cannot be opened ({exc.strerror or exc}); nothing was downloaded") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise UnsafePathError(refusal)
    if _NONBLOCK:
        os.set_blocking(fd, True)
    return fd


def _verify(url: str, fd: int, part: Path, expected: dict[str, str], size: int | None) -> None:
    """Check the finished ``.part``; remove it and raise when it is not the file asked for."""
    got_size = os.fstat(fd).st_size
    problem = None
    if size is not None and got_size != size:
        problem = f"expected {size} bytes, got {got_size}"
    elif expected:
        got = _fd_digests(fd, list(expected))
        wrong = [name for name in expected if got[name] != expected[name]]
        if wrong:
            problem = "; ".join(f"expected {name} {expected[name]}, got {got[name]}" for name in wrong)
    if problem:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise DownloadError(f"{url} did not match its checksum ({problem}); the downloaded file was removed "
                            "— run again to fetch it anew, or check the mirror", url=url)  # fmt: skip


def _fetch(url: str, fd: int, part: Path, expected: dict[str, str], size: int | None, limit: int,
           progress: Progress | None, timeout: float, retries: int) -> None:  # fmt: skip
    """Fill the ``.part`` (descriptor ``fd``, opened to append) with the whole file, at most ``limit`` bytes."""
    opener = _opener()
    failures = 0
    restarts = 0
    while True:
        try:
            try:
                _attempt(opener, url, fd, size, limit, progress, timeout)
                return
            except _TooLarge as too_large:  # emptied here, so download_file removes the .part
                os.ftruncate(fd, 0)
                raise DownloadError(f"cannot download {url}: {too_large}; stopped there and removed {part.name} "
                                    "— check the URL or the mirror", url=url) from None  # fmt: skip
            except _PartEnds as ends:  # complete, or to be fetched anew
                if _part_is_whole(fd, expected, size, ends.total):
                    return
                raise _Restart from None
        except _Restart:
            restarts += 1
            if restarts > 2:
                raise DownloadError(f"cannot download {url}: the server keeps refusing to continue the partial "
                                    f"file {part.name}", url=url) from None  # fmt: skip
            os.ftruncate(fd, 0)
        except urllib.error.HTTPError as exc:
            if exc.code not in _RETRY_STATUSES or failures >= retries:
                raise DownloadError(f"cannot download {url}: the server answered HTTP {exc.code} "
                                    f"{_one(exc.reason)}", url=url,
                                    network=exc.code in _RETRY_STATUSES) from None  # fmt: skip
            failures += 1
            time.sleep(min(BACKOFF * 2 ** (failures - 1), 30.0))
        except DownloadError:
            raise
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:  # OSError: reset, timeout...
            if isinstance(exc, _WriteError):
                raise DownloadError(f"cannot write {part}: {_reason(exc.__cause__ or exc)}", url=url) from None
            if failures >= retries or _unresolvable(exc):
                kept = os.fstat(fd).st_size
                keep = f"; the {kept} bytes received are kept in {part} and the next run resumes" if kept else ""
                raise DownloadError(f"cannot download {url}: {_reason(exc)}{keep}", url=url, network=True) from None
            failures += 1
            time.sleep(min(BACKOFF * 2 ** (failures - 1), 30.0))


class _WriteError(OSError):
    """Writing the ``.part`` failed (a full disk): not the network's fault, not retried."""


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)


def _attempt(opener, url: str, fd: int, size: int | None, limit: int, progress: Progress | None,
             timeout: float) -> None:  # fmt: skip
    """One request: append what the server sends to the ``.part``, never past ``limit`` bytes in
    all nor past what the server announced."""
    offset = os.fstat(fd).st_size
    if offset > limit:
        raise _Restart
    if size is not None and offset == size:
        return  # already all there: _verify decides
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = opener.open(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # nothing past the part: it is complete — or it is wrong
            total = _total_of(exc.headers.get("Content-Range", ""))
            exc.close()
            raise _PartEnds(total) from None
        raise
    with response:
        status = response.status
        if status == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != offset:
                raise _Restart
            total = None if match.group(3) == "*" else int(match.group(3))
        elif status == 200:
            if offset:
                os.ftruncate(fd, 0)  # the server sends the whole file: start over with it
                offset = 0
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        else:
            raise DownloadError(f"cannot download {url}: unexpected HTTP {status} reply", url=url)
        if size is not None and total is not None and total != size:
            raise DownloadError(f"cannot download {url}: the server offers {total} bytes, expected {size}", url=url)
        if total is not None and total > limit:
            raise _TooLarge(f"the server announces {total} bytes, more than the {limit} this file may have")
        announced = total if total is not None else size
        done = _receive(response, fd, offset, limit if total is None else total, announced, progress)
        if total is not None and done < total:
            raise http.client.IncompleteRead(b"", total - done)


def _receive(response, fd: int, done: int, bound: int, total: int | None, progress: Progress | None) -> int:
    """Append the body to ``fd`` (holding ``done`` bytes) until it ends; more than ``bound`` bytes
    in all is :class:`_TooLarge` before the excess is written. Returns the bytes the file then holds."""
    if done > bound:  # a range reply starting past the total it announces
        raise _TooLarge(f"the server continues at byte {done} a file it says has {bound}")
    if progress is not None:
        progress(done, total)
    while True:
        block = response.read(min(CHUNK, bound - done + 1))
        if not block:
            return done
        if done + len(block) > bound:
            raise _TooLarge(f"the server sent more than {bound} bytes"
                            + (f" (it announced {total})" if total == bound else ""))  # fmt: skip
        try:
            _write_all(fd, block)
        except OSError as exc:
            raise _WriteError(str(exc)) from exc
        done += len(block)
        if progress is not None:
            progress(done, total)


def _part_is_whole(fd: int, expected: dict[str, str], size: int | None, total: int | None) -> bool:
    """After a 416: whether the ``.part`` already is the whole file (its size, then its checksums)."""
    have = os.fstat(fd).st_size
    if (size is not None and have != size) or (total is not None and have != total):
        return False
    if expected:
        got = _fd_digests(fd, list(expected))
        return all(got[name] == value for name, value in expected.items())
    return size is not None or total is not None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _total_of(content_range: str) -> int | None:
    match = re.match(r"bytes\s+\*/(\d+)", content_range or "", re.IGNORECASE)
    return int(match.group(1)) if match else None


def _unresolvable(exc: BaseException) -> bool:
    """A host name that does not resolve (offline, or a typo): trying again soon does not help."""
    inner = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(inner, socket.gaierror)


def _one(text: object) -> str:
    return " ".join(str(text).split())


def _reason(exc: BaseException) -> str:
    """A short reason for a network failure: ``connection refused``, ``timed out``..."""
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        inner = exc.reason
        if isinstance(inner, BaseException):
            return _reason(inner)
        return _one(inner)
    if isinstance(exc, http.client.IncompleteRead):
        return f"the connection closed {exc.expected} bytes before the end"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({_one(exc.strerror or exc)}) — is this machine offline?"
    if isinstance(exc, OSError) and exc.strerror:
        return _one(exc.strerror).lower()
    return _one(exc) or type(exc).__name__
