"""Hostile archives and hostile servers (issue 39, deliverables 2 and 3): extraction writes only
plain files and folders inside its folder, bounded in bytes and members, and believes its marker
only after checking the files; downloads stop at their bound. Every server here is a loopback
one (127.0.0.1) started by the test."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import struct
import tarfile
import zipfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from bounded_child import assert_clean_exit, files_under, run_bounded_python
from loopback_http import LoopbackServer
from modforge.core.safe_files import UnsafePathError
from modforge.data import download as dl
from modforge.data.download import DownloadError, download_file
from modforge.data.extract import ArchiveError, UnsafeArchiveError, extract_archive, marker_path
from modforge.data.images import catalog
from modforge.data.images.catalog import Corpus, CorpusFile, Variant, download_corpus

pytestmark = [pytest.mark.hostile, pytest.mark.usefixtures("no_proxy_no_wait")]

VICTIM = b"the victim's own bytes\n"


# ----------------------------------------------------------------------------- a loopback server
class Server(LoopbackServer):
    """Serves ``files`` on 127.0.0.1; ``behaviour[path]`` makes it hostile for that path:
    ``endless`` (no length, data until the client leaves), ``chunked-endless``, ``announce:N``
    (a Content-Length of N, whatever the body), ``range-more`` (a 206 whose Content-Range total
    is the file's size but whose body, without Content-Length, runs on)."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.behaviour: dict[str, str] = {}
        super().__init__()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        body = self.files.get(handler.path)
        if body is None:
            handler.send_error(404)
            return
        self.serve(handler, body, self.behaviour.get(handler.path, ""))

    @staticmethod
    def serve(handler: BaseHTTPRequestHandler, body: bytes, behaviour: str) -> None:
        block = b"\0" * 65536
        if behaviour == "endless":  # HTTP/1.0, no Content-Length: the body ends when the connection does
            handler.send_response(200)
            handler.end_headers()
            for _ in range(2048):  # 128 MiB: far past any bound below, yet never a hang
                handler.wfile.write(block)
            return
        if behaviour == "chunked-endless":
            handler.protocol_version = "HTTP/1.1"
            handler.send_response(200)
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            for _ in range(2048):
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
            handler.wfile.write(b"0\r\n\r\n")
            return
        if behaviour.startswith("announce:"):
            handler.send_response(200)
            handler.send_header("Content-Length", behaviour.split(":", 1)[1])
            handler.end_headers()
            handler.wfile.write(body)
            return
        if behaviour == "range-more":
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes 0-{len(body) - 1}/{len(body)}")
            handler.end_headers()
            handler.wfile.write(body + block * 64)
            return
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

@pytest.fixture
def server():
    with Server() as srv:
        yield srv


# ----------------------------------------------------------------------------- archive builders
def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes | None = None):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    if data is not None:
        info.size = len(data)
    return info, data


def _tar_bytes(members, mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _escape_chain(escape_to: str) -> list:
    """Members of the CVE-2025-4517 kind: sixteen folders with 247-character names, each reached
    through a one-letter symbolic link, so that the chain ``a/b/.../p`` is short to write but
    longer than PATH_MAX once resolved (where ``os.path.realpath``, and with it ``tarfile``'s
    ``data`` filter, stops resolving); a link at its end climbs back up, ``escape`` leads through
    it to ``escape_to``, and a hard link plus a file of the same name write through to
    ``escape/victim.txt``, while a ``.pth`` lands in ``escape/site-packages``. On Python 3.11.7
    the previous extraction (``filter="data"`` after a lexical check) overwrote the victim and
    dropped the ``.pth``."""
    long_dir, hops, last = "d" * 247, "abcdefghijklmnop", "l" * 254
    resolved = len(hops) * (len(long_dir) + 1) + len(last)  # a/b/.../p/lll once the hops are resolved
    assert resolved > os.pathconf("/", "PC_PATH_MAX")
    members, prefix = [], ""
    for hop in hops:
        members += [_entry(prefix + long_dir, tarfile.DIRTYPE), _entry(prefix + hop, tarfile.SYMTYPE, long_dir)]
        prefix += long_dir + "/"
    far = "/".join(hops) + "/" + last
    return members + [
        _entry(far, tarfile.SYMTYPE, "../" * len(hops)),
        _entry("escape", tarfile.SYMTYPE, f"{far}/../{escape_to}"),
        _entry("grab", tarfile.LNKTYPE, "escape/victim.txt"),
        _entry("grab", data=b"OVERWRITTEN\n"),
        _entry("escape/site-packages/zz-modforge-poc.pth", data=b"import os; os.system('touch /tmp/pwned')\n"),
    ]


def _outside(tmp_path: Path) -> Path:
    """A folder beside the destination holding a victim file and a site-packages folder."""
    outside = tmp_path / "outside"
    (outside / "site-packages").mkdir(parents=True)
    (outside / "victim.txt").write_bytes(VICTIM)
    return outside


def _serve_as_cifar10(server: Server, monkeypatch, archive: bytes) -> None:
    """The catalog's cifar10 (python) replaced by ``archive``, with its MD5, at its official path."""
    server.files["/~kriz/cifar-10-python.tar.gz"] = archive
    cifar = catalog.CORPORA["cifar10"]
    python = cifar.variants["python"]
    file = dataclasses.replace(python.files[0], md5=hashlib.md5(archive).hexdigest())
    python = dataclasses.replace(python, files=(file,))
    monkeypatch.setitem(catalog.CORPORA, "cifar10", dataclasses.replace(cifar, variants={**cifar.variants,
                                                                                         "python": python}))  # fmt: skip


def _assert_untouched(tmp_path: Path, outside: Path, root: Path) -> None:
    assert (outside / "victim.txt").read_bytes() == VICTIM
    assert files_under(outside) == {"victim.txt": VICTIM}
    assert not [p for p in tmp_path.rglob("*.pth")]
    assert os.listdir(root) == ["cifar-10-python.tar.gz"]  # the verified download only: no member, marker, staging


# ----------------------------------------------------------------------------- through the download
def test_a_symlink_chain_past_path_max_is_refused_through_the_download(server, tmp_path, monkeypatch):
    outside = _outside(tmp_path)
    _serve_as_cifar10(server, monkeypatch, _tar_bytes(_escape_chain("../outside")))
    root = tmp_path / "root"
    with pytest.raises(UnsafeArchiveError) as caught:
        download_corpus("cifar10", root, base_url=server.url)
    message = str(caught.value)
    assert "cifar-10-python.tar.gz" in message and "member 'a' is a symbolic link" in message
    assert "\n" not in message
    _assert_untouched(tmp_path, outside, root)


def test_the_cli_refuses_it_with_exit_2_and_one_error_line(server, tmp_path, monkeypatch, cli):
    outside = _outside(tmp_path)
    _serve_as_cifar10(server, monkeypatch, _tar_bytes(_escape_chain("../outside")))
    res = cli("data", "download", "cifar10", "--root", "root", "--mirror", server.url)
    assert res.code == 2, res
    errors = [line for line in res.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "symbolic link" in errors[0] and "cifar-10-python.tar.gz" in errors[0], res.err
    assert "Traceback" not in res.err
    _assert_untouched(tmp_path, outside, tmp_path / "root")


@pytest.mark.parametrize(
    "members, words",
    [
        ([("grab", tarfile.LNKTYPE, "VICTIM", None), ("grab", tarfile.REGTYPE, "", b"OVERWRITTEN\n")],
         "is a hard link"),
        ([("sp", tarfile.SYMTYPE, "OUTSIDE/site-packages", None), ("sp/zz.pth", tarfile.REGTYPE, "", b"import os\n")],
         "is a symbolic link"),
        ([("../outside/site-packages/zz.pth", tarfile.REGTYPE, "", b"import os\n")], "'..'"),
        ([("OUTSIDE/site-packages/zz.pth", tarfile.REGTYPE, "", b"import os\n")], "absolute name"),
        ([("fifo", tarfile.FIFOTYPE, "", None)], "is a FIFO"),
        ([("null", tarfile.CHRTYPE, "", None)], "is a device"),
        ([("set/a.bin", tarfile.REGTYPE, "", b"1"), ("set/a.bin", tarfile.REGTYPE, "", b"2")], "appears twice"),
        ([("set", tarfile.REGTYPE, "", b"a file")], "is both a file and a folder"),
        ([("cfg", tarfile.REGTYPE, "", b"a file"), ("cfg/a.bin", tarfile.REGTYPE, "", b"1")],
         "puts a folder where the archive has the file 'cfg'"),
    ],
    ids=["hard-link", "symlink-to-site-packages", "dotdot-pth", "absolute-pth", "fifo", "device", "twice",
         "folder-then-file", "file-then-folder"],  # fmt: skip
)
def test_each_escape_is_refused_whole(tmp_path, members, words):
    outside = _outside(tmp_path)
    named = {"OUTSIDE": str(outside), "VICTIM": str(outside / "victim.txt")}
    placed = [_entry("set/first.txt", data=b"first")]
    for name, kind, link, data in members:
        for word, path in named.items():
            name, link = name.replace(word, path), link.replace(word, path)
        placed.append(_entry(name, kind, link, data))
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(_tar_bytes(placed))
    root = tmp_path / "root"
    with pytest.raises(UnsafeArchiveError, match=words) as caught:
        extract_archive(archive, root)
    assert "bad.tar.gz" in str(caught.value)
    assert os.listdir(root) == [] and files_under(outside) == {"victim.txt": VICTIM}
    assert not [p for p in tmp_path.rglob("*.pth")]


def test_a_zip_link_or_device_is_refused(tmp_path):
    root = tmp_path / "root"
    for mode, words in ((0o120777, "symbolic link"), (0o020644, "not a regular file"), (0o010644, "not a regular")):
        archive = tmp_path / "bad.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("set/fine.txt", "fine")
            info = zipfile.ZipInfo("set/odd")
            info.external_attr = mode << 16
            zf.writestr(info, "/etc/passwd")
        with pytest.raises(UnsafeArchiveError, match=words):
            extract_archive(archive, root)
        assert os.listdir(root) == []


# ----------------------------------------------------------------------------- long paths, no links
def _read_below(root: Path, parts: list[str]) -> bytes:
    """Read ``root/parts...`` one component at a time (its whole path is longer than PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    with open(leaf, "rb") as handle:
        return handle.read()


def test_a_member_whose_whole_path_outgrows_path_max_is_written_inside(tmp_path):
    """Every member is walked from descriptors: a destination deep enough that a member's whole
    path passes PATH_MAX is still written (and checked again on the next run) inside it."""
    root = tmp_path
    for _ in range(15):
        root = root / ("r" * 230)
    parts = ["s" * 240, "t" * 240, "u" * 240, "file.bin"]
    archive = tmp_path / "deep.tar"
    archive.write_bytes(_tar_bytes([_entry("/".join(parts), data=b"deep")], mode="w"))
    assert len(os.fsencode(root)) + sum(len(p) + 1 for p in parts) > os.pathconf("/", "PC_PATH_MAX")
    assert extract_archive(archive, root) == [root / parts[0]]
    assert _read_below(root, parts) == b"deep"
    assert extract_archive(archive, root) == [root / parts[0]]  # the marker holds: verified, not redone


@pytest.mark.parametrize(
    "name, words",
    [("/".join(["n" * 200] * 6), "longer than 1024 characters"), ("/".join(["d"] * 40) + "/f", "folders deep"),
     ("x" * 300, "longer than 255 bytes"), (".modforge-extracted-other.tar", "modforge keeps")],  # fmt: skip
)
def test_names_too_long_too_deep_or_reserved_are_refused(tmp_path, name, words):
    archive = tmp_path / "names.tar"
    archive.write_bytes(_tar_bytes([_entry(name, data=b"x")], mode="w"))
    with pytest.raises(UnsafeArchiveError, match=words):
        extract_archive(archive, tmp_path / "root")
    assert os.listdir(tmp_path / "root") == []


# ----------------------------------------------------------------------------- bounds
def _bomb_gz(path: Path, gib: int = 1) -> Path:
    """A single-file .gz of ``gib`` GiB of zeros in about 1 MB: 16 MiB members, one after another."""
    member = gzip.compress(b"\0" * (16 << 20), compresslevel=9)
    path.write_bytes(member * (64 * gib))
    return path


def test_a_gzip_bomb_stops_at_the_bound_in_a_child_that_may_not_write_more(tmp_path):
    """The child may not write a file past 32 MiB (RLIMIT_FSIZE): an extraction that wrote the
    gigabyte before checking would be killed by SIGXFSZ instead of exiting 2."""
    bomb = _bomb_gz(tmp_path / "labels.bin.gz")
    root = tmp_path / "root"
    code = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (32 << 20, 32 << 20))
from modforge.core.errors import UsageError
from modforge.data.extract import extract_archive
try:
    extract_archive({str(bomb)!r}, {str(root)!r}, max_total_bytes=8 << 20)
except UsageError as exc:
    sys.stderr.write(f"error: {{exc}}\\n")
    sys.exit(2)
"""
    result = run_bounded_python(code)
    assert_clean_exit(result)
    assert result.returncode == 2 and "past the 8388608 bytes it may unpack to" in result.stderr and "labels.bin.gz" in result.stderr
    assert os.listdir(root) == []


def test_tar_bounds_on_bytes_and_members(tmp_path):
    root = tmp_path / "root"
    declared = tmp_path / "declared.tar.gz"  # one member of 64 MiB zeros: refused from its header, unread
    declared.write_bytes(_tar_bytes([_entry("set/zeros.bin", data=b"\0" * (64 << 20))]))
    with pytest.raises(UnsafeArchiveError, match="more than the 1048576 bytes one member may have"):
        extract_archive(declared, root, max_total_bytes=8 << 20, max_member_bytes=1 << 20)
    many = tmp_path / "many.tar.gz"  # twelve members of 1 MiB: the ninth passes the total
    many.write_bytes(_tar_bytes([_entry(f"set/{i}.bin", data=bytes([i]) * (1 << 20)) for i in range(12)]))
    with pytest.raises(UnsafeArchiveError, match=r"member 'set/8.bin' takes the archive past the 8388608 bytes"):
        extract_archive(many, root, max_total_bytes=8 << 20)
    with pytest.raises(UnsafeArchiveError, match=r"member 'set/8.bin' is more than the 8 members allowed"):
        extract_archive(many, root, max_members=8)
    assert os.listdir(root) == []
    assert len(extract_archive(many, root, max_total_bytes=12 << 20, max_members=12)) == 1  # within bounds: fine


def test_a_tar_header_claiming_gigabytes_of_name_is_refused_unread(tmp_path):
    """A GNU long-name header declaring 4 GiB would make tarfile read it all into memory."""
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = tarfile.GNUTYPE_LONGNAME, 4 << 30
    raw = header.tobuf(format=tarfile.GNU_FORMAT)
    archive = tmp_path / "longname.tar.gz"
    archive.write_bytes(gzip.compress(raw + b"\0" * (1 << 20)))
    with pytest.raises(UnsafeArchiveError, match="a tar header declares"):
        extract_archive(archive, tmp_path / "root")
    assert os.listdir(tmp_path / "root") == []


def _lying_zip(path: Path, real: int, claimed: int) -> Path:
    """A zip whose one member holds ``real`` zero bytes while both its headers claim ``claimed``."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("set/zeros.bin", b"\0" * real)
    data = bytearray(path.read_bytes())
    local = data.find(b"PK\x03\x04")
    struct.pack_into("<I", data, local + 22, claimed)
    central = data.find(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, claimed)
    path.write_bytes(bytes(data))
    return path


def test_a_zip_whose_headers_lie_about_sizes_is_stopped(tmp_path):
    root = tmp_path / "root"
    small = _lying_zip(tmp_path / "small.zip", real=32 << 20, claimed=100)  # 32 MiB behind a claim of 100 bytes
    with pytest.raises(ArchiveError, match="small.zip cannot be read"):
        extract_archive(small, root, max_total_bytes=1 << 20)
    large = _lying_zip(tmp_path / "large.zip", real=10, claimed=3 << 30)
    with pytest.raises(UnsafeArchiveError, match="past the 1048576 bytes it may unpack to"):
        extract_archive(large, root, max_total_bytes=1 << 20)
    assert os.listdir(root) == []


def test_a_zip_directory_listing_too_many_members_is_refused_before_it_is_read(tmp_path):
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(50):
            zf.writestr(f"set/{i}.txt", str(i))
    with pytest.raises(UnsafeArchiveError, match="its directory lists 50 members"):
        extract_archive(archive, tmp_path / "root", max_members=20)
    assert os.listdir(tmp_path / "root") == []


# ----------------------------------------------------------------------------- the marker
def _extracted(tmp_path: Path) -> tuple[Path, Path]:
    archive = tmp_path / "set.tar.gz"
    archive.write_bytes(_tar_bytes([_entry("set/a.bin", data=b"alpha"), _entry("set/sub/b.bin", data=b"beta")]))
    root = tmp_path / "root"
    extract_archive(archive, root)
    return archive, root


@pytest.mark.parametrize("change", ["altered", "same-size", "removed", "linked", "marker-edited"])
def test_a_changed_extraction_is_extracted_again_never_trusted(tmp_path, change):
    archive, root = _extracted(tmp_path)
    outside = _outside(tmp_path)
    target = root / "set" / "a.bin"
    if change == "altered":
        target.write_bytes(b"poisoned pixels")
    elif change == "same-size":
        target.write_bytes(b"ALPHA")
    elif change == "removed":
        target.unlink()
    elif change == "linked":  # the file swapped for a link to someone else's
        target.unlink()
        target.symlink_to(outside / "victim.txt")
    else:  # the marker made to describe an altered file (the content digest no longer matches)
        target.write_bytes(b"omega")
        marker = marker_path(archive, root)
        record = json.loads(marker.read_text())
        record["files"][0][2] = hashlib.sha256(b"omega").hexdigest()
        marker.write_text(json.dumps(record))
    assert extract_archive(archive, root) == [root / "set"]
    assert not target.is_symlink() and target.read_bytes() == b"alpha"
    assert files_under(outside) == {"victim.txt": VICTIM}


def test_a_folder_swapped_for_a_link_is_one_clear_error(tmp_path):
    archive, root = _extracted(tmp_path)
    outside = _outside(tmp_path)
    (root / "set" / "sub" / "b.bin").unlink()
    (root / "set" / "sub").rmdir()
    (root / "set" / "sub").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="is a symbolic link, where archive set.tar.gz puts a folder"):
        extract_archive(archive, root)
    assert files_under(outside) == {"victim.txt": VICTIM}


# ----------------------------------------------------------------------------- downloads bounded
@pytest.mark.parametrize("behaviour", ["endless", "chunked-endless"])
def test_an_endless_body_stops_at_the_bound_and_leaves_nothing(server, tmp_path, behaviour):
    server.files["/f.bin"] = b"unused"
    server.behaviour["/f.bin"] = behaviour
    with pytest.raises(DownloadError) as caught:
        download_file(f"{server.url}/f.bin", tmp_path / "f.bin", max_bytes=1 << 20)
    message = str(caught.value)
    assert "sent more than 1048576 bytes" in message and f"{server.url}/f.bin" in message
    assert not caught.value.network and os.listdir(tmp_path) == []


def test_a_length_announced_past_the_bound_is_refused_before_reading(server, tmp_path):
    server.files["/f.bin"] = b"x" * 1000
    server.behaviour["/f.bin"] = f"announce:{10 << 30}"
    with pytest.raises(DownloadError, match=r"announces 10737418240 bytes, more than the 1048576"):
        download_file(f"{server.url}/f.bin", tmp_path / "f.bin", max_bytes=1 << 20)
    assert os.listdir(tmp_path) == []


def test_a_range_reply_running_past_its_total_is_stopped(server, tmp_path):
    body = b"y" * 5000
    server.files["/f.bin"] = body
    server.behaviour["/f.bin"] = "range-more"
    with pytest.raises(DownloadError, match="sent more than 5000 bytes"):
        download_file(f"{server.url}/f.bin", tmp_path / "f.bin", md5=hashlib.md5(body).hexdigest())
    assert os.listdir(tmp_path) == []


def test_without_any_bound_given_the_default_applies(server, tmp_path, monkeypatch):
    monkeypatch.setattr(dl, "DEFAULT_MAX_BYTES", 2 << 20)
    server.files["/f.bin"] = b"unused"
    server.behaviour["/f.bin"] = "endless"
    with pytest.raises(DownloadError, match="sent more than 2097152 bytes"):
        download_file(f"{server.url}/f.bin", tmp_path / "f.bin")
    assert os.listdir(tmp_path) == []


def test_a_mirror_sending_more_than_the_catalog_size_is_stopped(server, tmp_path, monkeypatch):
    served = b"z" * (3 << 20)
    server.files["/toy/f.bin"] = served
    toy = Corpus("toy", "a toy", "https://example.invalid", "none", {"default": Variant(
        (CorpusFile("f.bin", hashlib.md5(served).hexdigest(), ("https://a.invalid/toy/f.bin",), size=1000),))})  # fmt: skip
    monkeypatch.setitem(catalog.CORPORA, "toy", toy)
    with pytest.raises(DownloadError, match=r"announces 3145728 bytes, more than the 1049576"):
        download_corpus("toy", tmp_path / "root", base_url=server.url)
    assert os.listdir(tmp_path / "root") == []


def test_the_catalog_fetches_over_https_with_bounds_for_every_file():
    for corpus in catalog.CORPORA.values():
        for variant in corpus.variants.values():
            for file in variant.files:
                assert file.urls and all(url.startswith("https://") for url in file.urls), file
                assert file.size is not None and file.download_limit() > file.size
                if file.extract:
                    limits = file.extraction_limits()
                    assert file.members and limits["max_members"] == file.members
                    assert limits["max_total_bytes"] > file.size and limits["max_member_bytes"] > file.size

