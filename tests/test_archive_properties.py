"""Generated hostile archives (issue 39, deliverable 7, the archive part): tar (plain, gz, bz2,
xz), zip and single-file gz archives with random members — regular files, folders, symbolic and
hard links to random targets (``..``, absolute, the victim beside the destination, long chains),
FIFOs and devices, duplicate, long, deeply nested, absolute and reserved names — and then,
sometimes, a lying size field, a flipped byte or a cut. Each is extracted in a child process
under memory and CPU-time limits (the child imports ``modforge.data.extract`` only, no torch).
Whatever the mix: the child exits 0, or 2 with one line; nothing outside the destination
changes; only plain files and folders appear in it; a refused archive leaves the destination
empty (no marker), and an accepted one leaves a marker that the next run believes."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import struct
import tarfile
import tempfile
import warnings
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bounded_child import assert_clean_exit, files_under, run_bounded_python

pytestmark = pytest.mark.hostile

VICTIM = b"the victim's own bytes\n"
KINDS = ("tar", "tar.gz", "tar.bz2", "tar.xz", "zip", "gz")
LIMITS = {"max_total_bytes": 1 << 20, "max_members": 40}

# ----------------------------------------------------------------------------- strategies
_component = st.one_of(
    st.sampled_from(["a", "b", "set", "sub", "evil.pth", "..", ".", "", "é", ".modforge-extracted-arch.tar"]),
    st.text(alphabet="abcxyz._-", min_size=1, max_size=6),
)
_relative = st.lists(_component, min_size=1, max_size=5).map("/".join)
_long = st.tuples(_relative, st.integers(200, 300)).map(lambda t: f"{t[0]}/{'n' * t[1]}")  # some past NAME_MAX
_deep = st.integers(8, 70).map(lambda depth: "/".join(["d" * 60] * depth) + "/f")  # past PATH_MAX when deep
_name = st.one_of(  # a branch is drawn about evenly: plain relative names thrice as often as each hostile kind
    _relative,
    _relative,
    _relative,
    _relative.map(lambda n: "/" + n),
    _relative.map(lambda n: "OUTSIDE/" + n),  # an absolute name into the folder beside the destination
    _relative.map(lambda n: "../outside/" + n),
    _long,
    _deep,
    st.sampled_from(["a", "a/b", "set/sub"]),  # often repeated: duplicates and file/folder clashes
)
_target = st.one_of(
    st.sampled_from(["..", "../outside", "../outside/victim.txt", "OUTSIDE/victim.txt", "OUTSIDE/site-packages",
                     "/etc/passwd", "a", "a/b/../../..", "../" * 20, "l" * 254]),  # fmt: skip
    _name,
)
_data = st.one_of(st.binary(max_size=64), st.integers(1, 700_000).map(lambda n: b"\0" * n))
_member = st.tuples(st.sampled_from(["reg", "reg", "dir", "sym", "hard", "fifo", "chr", "blk"]), _name, _target, _data)
_mutation = st.tuples(st.sampled_from(["none", "none", "none", "lie", "flip", "cut"]), st.floats(0, 1),
                      st.integers(0, 1 << 34))  # fmt: skip
_archive = st.tuples(st.sampled_from(KINDS), st.lists(_member, min_size=1, max_size=12), _mutation)


# ----------------------------------------------------------------------------- building
def _placed(text: str, outside: Path) -> str:
    return text.replace("OUTSIDE", str(outside))


def _tar(members: list, outside: Path) -> bytes:
    kinds = {"reg": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
             "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE}  # fmt: skip
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, target, data in members:
            info = tarfile.TarInfo(_placed(name, outside))
            info.type, info.linkname = kinds[kind], _placed(target, outside)
            info.size = len(data) if kind == "reg" else 0
            tar.addfile(info, io.BytesIO(data) if kind == "reg" else None)
    return buffer.getvalue()


def _zip(members: list, outside: Path) -> bytes:
    modes = {"reg": 0o100644, "dir": 0o040755, "sym": 0o120777, "hard": 0o100644, "fifo": 0o010644,
             "chr": 0o020644, "blk": 0o060644}  # fmt: skip
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        warnings.simplefilter("ignore")  # duplicate names are the point
        for kind, name, target, data in members:
            name = _placed(name, outside) + ("/" if kind == "dir" else "")
            info = zipfile.ZipInfo(name)
            info.external_attr = modes[kind] << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, _placed(target, outside).encode() if kind == "sym" else data)
    return buffer.getvalue()


def _lie_tar(raw: bytes, size: int) -> bytes:
    """The first header's size field set to ``size`` (its checksum recomputed): a header that lies."""
    header = bytearray(raw[:512])
    header[124:136] = b"%011o\0" % (size % 8**11)
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header) + raw[512:]


def _lie_zip(raw: bytes, size: int) -> bytes:
    """The first member's uncompressed size, in its local and central headers, set to ``size``."""
    data = bytearray(raw)
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(signature)
        if at >= 0:
            struct.pack_into("<I", data, at + offset, size % 2**32)
    return bytes(data)


def _mutate(raw: bytes, mutation: tuple, liar) -> bytes:  # noqa: ANN001
    how, where, number = mutation
    if not raw or how == "none":
        return raw
    if how == "lie":
        return liar(raw, number)
    position = min(int(where * len(raw)), len(raw) - 1)
    if how == "flip":
        return raw[:position] + bytes([raw[position] ^ (1 + number % 255)]) + raw[position + 1 :]
    return raw[:position]


def _build(kind: str, members: list, mutation: tuple, work: Path, outside: Path) -> Path:
    if kind == "gz":
        data = b"".join(m[3] for m in members)
        path = work / "labels.bin.gz"
        path.write_bytes(_mutate(gzip.compress(data), mutation, lambda raw, _n: raw))
        return path
    if kind == "zip":
        path = work / "arch.zip"
        path.write_bytes(_mutate(_zip(members, outside), mutation, _lie_zip))
        return path
    raw = _mutate(_tar(members, outside), mutation, _lie_tar)
    packed = {"tar": lambda b: b, "tar.gz": gzip.compress, "tar.xz": lzma.compress,
              "tar.bz2": bz2.compress}[kind](raw)  # fmt: skip
    path = work / f"arch.{kind}"
    path.write_bytes(packed)
    return path


# ----------------------------------------------------------------------------- the child
CHILD = """
import sys
from modforge.core.errors import UsageError
from modforge.data.extract import extract_archive
try:
    extract_archive(sys.argv[1], sys.argv[2], max_total_bytes={max_total_bytes}, max_members={max_members})
except UsageError as exc:
    sys.stderr.write(f"error: {{exc}}\\n")
    sys.exit(2)
"""


def _extract_in_child(archive: Path, into: Path):  # noqa: ANN202
    code = CHILD.format(**LIMITS).replace("sys.argv[1]", repr(str(archive))).replace("sys.argv[2]", repr(str(into)))
    return run_bounded_python(code, memory_bytes=1 << 30, cpu_seconds=30)


def _only_files_and_folders(into: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(into):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), os.path.join(dirpath, name)


def _tree(work: Path) -> set[str]:
    """Every name under ``work`` outside the destination (links listed, not followed)."""
    names = set()
    for dirpath, dirnames, filenames in os.walk(work):
        for name in dirnames + filenames:
            relative = os.path.relpath(os.path.join(dirpath, name), work)
            if relative != "dest" and not relative.startswith("dest" + os.sep):
                names.add(relative)
    return names


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_archive)
def test_a_hostile_archive_is_extracted_inside_or_refused_whole(spec):
    kind, members, mutation = spec
    with tempfile.TemporaryDirectory(prefix="modforge-archive-") as folder:
        work = Path(folder)
        outside = work / "outside"
        (outside / "site-packages").mkdir(parents=True)
        (outside / "victim.txt").write_bytes(VICTIM)
        archive = _build(kind, members, mutation, work, outside)
        into = work / "dest"
        before = _tree(work)
        result = _extract_in_child(archive, into)
        assert_clean_exit(result)
        assert files_under(outside) == {"victim.txt": VICTIM}
        assert _tree(work) == before  # nothing new beside the destination, nothing gone
        _only_files_and_folders(into)
        marker = into / f".modforge-extracted-{archive.name}"
        if result.returncode == 2:
            left = os.listdir(into) if into.exists() else []
            assert left == [], (result.stderr, left)  # refused whole: no member, no marker, no staging folder
            return
        assert marker.is_file()
        again = _extract_in_child(archive, into)  # the marker is believed: the same outcome, nothing new
        assert again.returncode == 0, again.stderr
        assert files_under(outside) == {"victim.txt": VICTIM}
