"""Verified, resumable downloads, safe extraction and the corpus catalog — against a loopback
HTTP server only (127.0.0.1); nothing here touches the internet."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import socket
import tarfile
import zipfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from loopback_http import LoopbackServer
from modforge.core.errors import UsageError
from modforge.core.safe_files import UnsafePathError
from modforge.data.download import DownloadError, download_file
from modforge.data.extract import UnsafeArchiveError, extract_archive, marker_path
from modforge.data.images import catalog
from modforge.data.images.catalog import Corpus, CorpusFile, Variant, download_corpus, offline_message

pytestmark = pytest.mark.usefixtures("no_proxy_no_wait")

PAYLOAD = bytes((i * 7 + i // 251) % 256 for i in range(700_000))  # several download chunks
MD5 = hashlib.md5(PAYLOAD).hexdigest()
SHA256 = hashlib.sha256(PAYLOAD).hexdigest()


class Loopback(LoopbackServer):
    """Serves ``files`` with Range support; can cut a transfer once, serve wrong bytes, ignore
    Range, redirect, and records every request."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, str] = {}
        self.cut_once: set[str] = set()
        self.wrong: set[str] = set()
        self.ignore_range = False
        self.requests: list[tuple[str, str | None]] = []
        super().__init__()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        path, wanted = handler.path, handler.headers.get("Range")
        self.requests.append((path, wanted))
        if path in self.redirects:
            handler.send_response(302)
            handler.send_header("Location", self.redirects[path])
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        body = self.files.get(path)
        if body is None:
            handler.send_error(404)
            return
        if path in self.wrong:
            body = bytes(b ^ 0x55 for b in body[:16]) + body[16:]
        start, status = 0, 200
        if wanted and not self.ignore_range:
            start = int(wanted.split("=", 1)[1].split("-", 1)[0])
            if start >= len(body):
                handler.send_response(416)
                handler.send_header("Content-Range", f"bytes */{len(body)}")
                handler.send_header("Content-Length", "0")
                handler.end_headers()
                return
            status = 206
        chunk = body[start:]
        handler.send_response(status)
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        handler.send_header("Content-Length", str(len(chunk)))
        handler.end_headers()
        if path in self.cut_once:
            self.cut_once.discard(path)
            handler.wfile.write(chunk[: len(chunk) // 2])
            handler.wfile.flush()
            handler.connection.shutdown(socket.SHUT_RDWR)
            handler.close_connection = True
            return
        handler.wfile.write(chunk)


@pytest.fixture
def server():
    with Loopback() as srv:
        srv.files["/f.bin"] = PAYLOAD
        yield srv


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


# ----------------------------------------------------------------------------- download_file
def test_full_download_is_verified_and_put_in_place(server, tmp_path):
    seen = []
    dest = download_file(f"{server.url}/f.bin", tmp_path / "sub" / "f.bin", md5=MD5, sha256=SHA256,
                         size=len(PAYLOAD), progress=lambda done, total: seen.append((done, total)))  # fmt: skip
    assert dest.read_bytes() == PAYLOAD
    assert not (tmp_path / "sub" / "f.bin.part").exists()
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD)) and len(seen) > 2
    # a complete file with the right checksum is not fetched again
    before = len(server.requests)
    download_file(f"{server.url}/f.bin", dest, md5=MD5)
    assert len(server.requests) == before


def test_an_interrupted_transfer_resumes_with_range(server, tmp_path):
    server.cut_once.add("/f.bin")
    dest = tmp_path / "f.bin"
    with pytest.raises(DownloadError) as caught:
        download_file(f"{server.url}/f.bin", dest, md5=MD5, retries=0)
    assert caught.value.network and f"{server.url}/f.bin" in str(caught.value) and "resumes" in str(caught.value)
    part = tmp_path / "f.bin.part"
    kept = part.stat().st_size
    assert 0 < kept < len(PAYLOAD) and not dest.exists()
    download_file(f"{server.url}/f.bin", dest, md5=MD5)
    assert server.requests[-1] == ("/f.bin", f"bytes={kept}-")
    assert dest.read_bytes() == PAYLOAD and not part.exists()


def test_a_retry_within_one_call_resumes(server, tmp_path):
    server.cut_once.add("/f.bin")
    dest = download_file(f"{server.url}/f.bin", tmp_path / "f.bin", md5=MD5, retries=1)
    assert dest.read_bytes() == PAYLOAD
    assert [r[1] is not None for r in server.requests] == [False, True]


def test_a_wrong_checksum_leaves_nothing(server, tmp_path):
    server.wrong.add("/f.bin")
    with pytest.raises(DownloadError) as caught:
        download_file(f"{server.url}/f.bin", tmp_path / "f.bin", md5=MD5)
    message = str(caught.value)
    assert f"{server.url}/f.bin" in message and f"expected md5 {MD5}" in message and "got " in message
    assert sorted(os.listdir(tmp_path)) == []


def test_a_server_ignoring_range_restarts_cleanly(server, tmp_path):
    (tmp_path / "f.bin.part").write_bytes(b"garbage that is not the start of the file")
    server.ignore_range = True
    dest = download_file(f"{server.url}/f.bin", tmp_path / "f.bin", md5=MD5)
    assert server.requests[-1][1] is not None  # it asked for a range, got the whole file
    assert dest.read_bytes() == PAYLOAD and not (tmp_path / "f.bin.part").exists()


def test_416_on_a_complete_part_verifies_it_and_on_a_wrong_one_restarts(server, tmp_path):
    (tmp_path / "f.bin.part").write_bytes(PAYLOAD)
    download_file(f"{server.url}/f.bin", tmp_path / "f.bin", md5=MD5)
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD and len(server.requests) == 1
    (tmp_path / "g.bin.part").write_bytes(b"x" * len(PAYLOAD))  # full length, wrong bytes
    download_file(f"{server.url}/f.bin", tmp_path / "g.bin", md5=MD5)
    assert (tmp_path / "g.bin").read_bytes() == PAYLOAD
    assert server.requests[-1] == ("/f.bin", None)


def test_a_link_planted_at_the_part_is_not_followed(server, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (tmp_path / "d").mkdir()
    os.symlink(precious, tmp_path / "d" / "f.bin.part")
    with pytest.raises(UnsafePathError, match="f.bin.part"):
        download_file(f"{server.url}/f.bin", tmp_path / "d" / "f.bin", md5=MD5)
    assert precious.read_text() == "keep me" and not (tmp_path / "d" / "f.bin").exists()


def test_only_http_urls_and_redirects(server, tmp_path):
    for url in ("file:///etc/passwd", "ftp://example.org/x", "x.bin"):
        with pytest.raises(DownloadError, match="only http"):
            download_file(url, tmp_path / "x.bin")
    server.redirects["/hop"] = "file:///etc/passwd"
    with pytest.raises(DownloadError, match="redirects to 'file:///etc/passwd'"):
        download_file(f"{server.url}/hop", tmp_path / "x.bin")
    server.redirects["/ftp"] = "ftp://127.0.0.1/f.bin"
    with pytest.raises(DownloadError, match="redirects to 'ftp://"):
        download_file(f"{server.url}/ftp", tmp_path / "x.bin")
    assert os.listdir(tmp_path) == []  # nothing received, nothing left
    server.redirects["/ok"] = "/f.bin"
    assert download_file(f"{server.url}/ok", tmp_path / "x.bin", md5=MD5).read_bytes() == PAYLOAD


def test_http_errors_and_refused_connections_are_one_clear_error(server, tmp_path):
    with pytest.raises(DownloadError, match=r"/missing: the server answered HTTP 404"):
        download_file(f"{server.url}/missing", tmp_path / "x.bin", md5=MD5)
    url = f"http://127.0.0.1:{_closed_port()}/f.bin"
    with pytest.raises(DownloadError) as caught:
        download_file(url, tmp_path / "x.bin", md5=MD5, retries=1)
    assert caught.value.network and url in str(caught.value) and "refused" in str(caught.value)
    assert not (tmp_path / "x.bin").exists()


# ----------------------------------------------------------------------------- extract_archive
def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), f"content of {name}".encode()


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.mark.parametrize(
    "hostile",
    [
        ("../evil", "leads outside"),
        ("ABSOLUTE", "absolute name"),
        ("symlink", "is a symbolic link (to '/etc')"),
        ("uplink", "is a symbolic link (to '../../outside')"),
        ("hardlink", "is a hard link (to '/etc/passwd')"),
        ("device", "is a device"),
    ],
)
def test_a_hostile_tar_is_refused_whole(tmp_path, hostile):
    kind, words = hostile
    outside = tmp_path / "outside"
    outside.mkdir()
    member = {
        "../evil": _file("../evil"),
        "ABSOLUTE": _file(str(outside / "evil")),
        "symlink": _link("etc", "/etc"),
        "uplink": _link("data/up", "../../outside"),
        "hardlink": _link("pw", "/etc/passwd", tarfile.LNKTYPE),
        "device": (tarfile.TarInfo("null"), None),
    }[kind]
    if kind == "device":
        member[0].type = tarfile.CHRTYPE
    archive = _tar(tmp_path / "bad.tar.gz", [_file("data/fine.txt"), member, _file("data/after.txt")])
    into = tmp_path / "root"
    with pytest.raises(UnsafeArchiveError) as caught:
        extract_archive(archive, into)
    assert "bad.tar.gz" in str(caught.value) and words in str(caught.value)
    assert os.listdir(into) == []  # nothing half-extracted, no marker, no staging folder
    assert os.listdir(outside) == [] and not (tmp_path / "evil").exists()


def test_links_inside_the_folder_are_refused_too(tmp_path):
    """Even a link that stays inside is refused: only regular files and folders are written."""
    good = _tar(tmp_path / "good.tar.gz", [_file("set/a.bin"), _file("set/sub/b.bin")])
    assert extract_archive(good, tmp_path / "r") == [tmp_path / "r" / "set"]
    assert (tmp_path / "r" / "set" / "sub" / "b.bin").read_bytes() == b"content of set/sub/b.bin"
    for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        linked = _tar(tmp_path / "linked.tar.gz", [_file("set/a.bin"), _link("set/l", "set/a.bin", kind)])
        with pytest.raises(UnsafeArchiveError, match="link"):
            extract_archive(linked, tmp_path / "r2")
        assert os.listdir(tmp_path / "r2") == []


def test_a_hostile_zip_is_refused_whole(tmp_path):
    into = tmp_path / "root" / "deeper"
    for name, attr, words in (("../evil", 0, "leads outside"), ("link", 0o120777 << 16, "symbolic link")):
        archive = tmp_path / "bad.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("fine.txt", "fine")
            info = zipfile.ZipInfo(name)
            info.external_attr = attr
            zf.writestr(info, "/etc/passwd" if attr else "evil")
        with pytest.raises(UnsafeArchiveError, match=words) as caught:
            extract_archive(archive, into)
        assert "bad.zip" in str(caught.value) and repr(name) in str(caught.value)
        assert os.listdir(into) == [] and not (tmp_path / "root" / "evil").exists()


def test_extraction_is_done_once_and_an_interrupted_one_is_redone(tmp_path):
    archive = _tar(tmp_path / "set.tar.gz", [_file("set/a.bin"), _file("set/sub/b.bin"), _file("top.txt")])
    into = tmp_path / "root"
    made = extract_archive(archive, into)
    assert made == [into / "set", into / "top.txt"]
    assert (into / "set" / "sub" / "b.bin").read_bytes() == b"content of set/sub/b.bin"
    record = json.loads(marker_path(archive, into).read_text())
    assert record["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert record["files"] == sorted(
        [name, len(data), hashlib.sha256(data).hexdigest()]
        for name, data in (("set/a.bin", b"content of set/a.bin"), ("set/sub/b.bin", b"content of set/sub/b.bin"),
                           ("top.txt", b"content of top.txt"))
    )  # fmt: skip
    before = os.stat(into / "set" / "a.bin")
    assert extract_archive(archive, into) == made  # a finished, unaltered extraction is not redone
    assert os.stat(into / "set" / "a.bin").st_ino == before.st_ino
    (into / "set" / "a.bin").write_bytes(b"touched")  # an altered file is not trusted: extracted again
    assert extract_archive(archive, into) == made and (into / "set" / "a.bin").read_bytes() == b"content of set/a.bin"
    # interrupted: no marker, a staging folder left behind, one file cut short, one missing
    marker_path(archive, into).unlink()
    (into / ".modforge-extracting-set.tar.gz.abc123").mkdir()
    (into / ".modforge-extracting-set.tar.gz.abc123" / "junk").write_text("x")
    (into / "set" / "a.bin").write_bytes(b"cont")
    (into / "top.txt").unlink()
    assert extract_archive(archive, into) == made
    assert (into / "set" / "a.bin").read_bytes() == b"content of set/a.bin" and (into / "top.txt").exists()
    assert sorted(os.listdir(into)) == [".modforge-extracted-set.tar.gz", "set", "top.txt"]


def test_zip_and_single_gz_extract(tmp_path):
    archive = tmp_path / "pack.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pack/", "")
        zf.writestr("pack/x.txt", "x")
    assert extract_archive(archive, tmp_path / "r") == [tmp_path / "r" / "pack"]
    assert (tmp_path / "r" / "pack" / "x.txt").read_text() == "x"
    single = tmp_path / "labels.bin.gz"
    single.write_bytes(gzip.compress(b"labels"))
    assert extract_archive(single, tmp_path / "r") == [tmp_path / "r" / "labels.bin"]
    assert (tmp_path / "r" / "labels.bin").read_bytes() == b"labels"


def test_a_damaged_archive_is_one_clear_error(tmp_path):
    archive = tmp_path / "cut.tar.gz"
    archive.write_bytes(gzip.compress(b"not a tar at all" * 100)[:50])
    with pytest.raises(UsageError, match="cut.tar.gz cannot be read"):
        extract_archive(archive, tmp_path / "r")


# ----------------------------------------------------------------------------- catalog
def _fake_corpora(server: Loopback, monkeypatch) -> dict[str, bytes]:
    """mnist with generated files at its official paths, and cifar10 (python) as a generated tar.gz."""
    blobs = {}
    mnist = catalog.CORPORA["mnist"]
    files = []
    for file in mnist.variant().files:
        data = gzip.compress(file.filename.encode() * 50)
        blobs[file.filename] = data
        server.files["/mnist/" + file.filename] = data  # the official path of the first mirror
        files.append(dataclasses.replace(file, md5=hashlib.md5(data).hexdigest()))
    fake_mnist = dataclasses.replace(mnist, variants={"default": Variant(tuple(files))})
    monkeypatch.setitem(catalog.CORPORA, "mnist", fake_mnist)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("data_batch_1", "test_batch", "batches.meta"):
            info, data = _file(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    server.files["/~kriz/cifar-10-python.tar.gz"] = buffer.getvalue()
    cifar = catalog.CORPORA["cifar10"]
    python = cifar.variants["python"]
    archive = dataclasses.replace(python.files[0], md5=hashlib.md5(buffer.getvalue()).hexdigest())
    python = dataclasses.replace(python, files=(archive,))
    fake_cifar = dataclasses.replace(cifar, variants={**cifar.variants, "python": python})
    monkeypatch.setitem(catalog.CORPORA, "cifar10", fake_cifar)
    return blobs


def test_download_corpus_lands_in_the_official_layout(server, tmp_path, monkeypatch):
    blobs = _fake_corpora(server, monkeypatch)
    root = tmp_path / "root"
    seen = set()
    folder = download_corpus("mnist", root, base_url=server.url, progress=lambda name, done, total: seen.add(name))
    assert folder == root and seen == set(blobs)
    for name, data in blobs.items():
        assert (root / name).read_bytes() == data  # the official .gz files directly in ROOT
    # the base URL replaced the host and kept the official path of the first mirror
    assert server.requests[0] == ("/mnist/train-images-idx3-ubyte.gz", None) and len(server.requests) == 4
    monkeypatch.setenv(catalog.MIRROR_ENV, server.url)  # the environment variable works like base_url
    folder = download_corpus("cifar10", root)
    assert folder == root / "cifar-10-batches-py"
    assert sorted(os.listdir(folder)) == ["batches.meta", "data_batch_1", "test_batch"]
    assert (root / ".modforge-extracted-cifar-10-python.tar.gz").is_file()
    requests = len(server.requests)
    assert download_corpus("cifar10", root) == folder and len(server.requests) == requests  # nothing fetched again


def test_mirrors_are_tried_in_order(server, tmp_path, monkeypatch):
    server.files["/second/f.bin"] = PAYLOAD
    toy = Corpus("toy", "a toy", "https://example.invalid", "none", {"default": Variant(
        (CorpusFile("f.bin", MD5, ("https://a.invalid/first/f.bin", "https://b.invalid/second/f.bin")),))})  # fmt: skip
    monkeypatch.setitem(catalog.CORPORA, "toy", toy)
    assert download_corpus("toy", tmp_path, base_url=server.url) == tmp_path
    assert [r[0] for r in server.requests] == ["/first/f.bin", "/second/f.bin"]
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD


def test_the_catalog_holds_the_official_figures():
    cifar10 = catalog.CORPORA["cifar10"]
    assert cifar10.entries("binary") == [
        ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz", "cifar-10-binary.tar.gz",
         "c32a1d4ab5d03f1284b67883e8d87530", True)
    ]  # fmt: skip
    assert catalog.CORPORA["cifar100"].variant("binary").files[0].md5 == "03b5dce01913d631647c71ecec9e9cb8"
    assert catalog.CORPORA["cifar100"].variant().folder == "cifar-100-python"
    assert catalog.CORPORA["tiny_imagenet"].variant().files[0].md5 == "90528d7ca1a48142e341f4ef8d21d0de"
    assert catalog.CORPORA["mnist"].variant().files[0].urls[0].startswith("https://ossci-datasets.s3.amazonaws.com/")
    assert catalog.CORPORA["emnist"].variant().folder == "gzip"
    assert catalog.get_corpus("Fashion-MNIST").name == "fashion_mnist"
    with pytest.raises(catalog.UnknownCorpusError, match="did you mean 'cifar10'"):
        catalog.get_corpus("cifar1O")
    with pytest.raises(UsageError, match="one form only"):
        catalog.CORPORA["mnist"].variant("binary")


def test_offline_message_names_files_checksums_urls_and_folder(tmp_path):
    text = offline_message("cifar100", tmp_path / "data", variant="binary")
    assert "cifar-100-binary.tar.gz" in text and "03b5dce01913d631647c71ecec9e9cb8" in text
    assert "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz" in text
    assert str(tmp_path / "data" / "cifar-100-binary") in text and "--variant binary" in text
    mnist = offline_message("mnist", "data")
    assert mnist.count("md5 ") == 4 and "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-labels-idx1-ubyte.gz" in mnist
    mirrored = offline_message("mnist", "data", base_url="https://mirror.example.org/sets")
    assert "https://mirror.example.org/sets/mnist/t10k-labels-idx1-ubyte.gz" in mirrored


# ----------------------------------------------------------------------------- command line
def test_cli_offline_exits_2_naming_files_and_folder(cli, monkeypatch):
    monkeypatch.setenv(catalog.MIRROR_ENV, f"http://127.0.0.1:{_closed_port()}")
    res = cli("data", "download", "mnist", "--root", "mnist-root")
    assert res.code == 2, res
    assert res.err.count("error:") == 1 and "cannot download" in res.err and "127.0.0.1" in res.err
    assert "train-images-idx3-ubyte.gz  md5 f68b3c2dcbeaaa9fbdd348bbdeb94873" in res.err
    assert "into mnist-root" in res.err
    assert not any(p.name.endswith(".gz") for p in Path("mnist-root").iterdir())


def test_cli_unknown_name_and_missing_root(cli):
    res = cli("data", "download", "cifar", "--root", "r")
    assert res.code == 2 and "unknown corpus 'cifar'" in res.err and "cifar10" in res.err and "tiny_imagenet" in res.err
    res = cli("data", "download", "mnist")
    assert res.code == 2 and "--root DIR is required" in res.err
    res = cli("data", "download", "cifar10", "--root", "r", "--variant", "matlab")
    assert res.code == 2 and "invalid choice" in res.err


def test_cli_list_and_download(cli, server, monkeypatch):
    res = cli("data", "download", "--list")
    assert res.code == 0, res
    assert "cifar-10-binary.tar.gz" in res.out and "ROOT/tiny-imagenet-200" in res.out and "licence" in res.out
    _fake_corpora(server, monkeypatch)
    res = cli("data", "download", "cifar10", "--root", "data", "--mirror", server.url)
    assert res.code == 0, res
    md5 = catalog.CORPORA["cifar10"].variant().files[0].md5
    assert md5 in res.out and "verified" in res.out and "cifar-10-batches-py" in res.out
    assert Path("data/cifar-10-batches-py/test_batch").is_file()
