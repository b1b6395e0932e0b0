"""Generated hostile CIFAR batches and IDX files (issue 39, deliverables 6 and 7), each read in a child under
memory and CPU limits (:mod:`bounded_child`).

CIFAR: pickles whose containers share one another at random (a DAG that is exponential as a tree), nest
deep, hold arrays declaring huge or negative shapes, odd dtypes, data of the wrong length, or are damaged
byte by byte — put in place of ``data_batch_1`` of an honest corpus. IDX: random magic numbers, type codes,
dimension counts and dimensions, bodies exact, short, long or of inflating zeros, raw or gzip-compressed.

Whatever is drawn, the reader in the child either returns (and an honest file reads as numpy reads it) or
raises one :class:`~modforge.core.errors.ModforgeError` whose message is one line naming the file — the
child exits 0, nothing is written, and nothing escapes as another exception, a MemoryError or a kill.
Several files are read per child, so the interpreter starts once per example.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bounded_child import assert_clean_exit, files_under, run_bounded_python
from image_fixtures import write_cifar_python

pytestmark = pytest.mark.hostile

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CHILD_MEMORY = 2 * 1024**3  # neither reader imports torch: 2 GB is room for numpy and twice the IDX cap
CHILD = """
import hashlib, json, sys
from modforge.core.errors import ModforgeError

def attempt(name, call):
    try:
        value = call()
    except ModforgeError as exc:
        print(json.dumps([name, type(exc).__name__, str(exc)]))
        return
    digest = ""
    if hasattr(value, "tobytes"):  # an IDX array: what it holds, for the parent to compare
        digest = f"{value.dtype.str} {list(value.shape)} {hashlib.sha256(value.tobytes()).hexdigest()}"
    print(json.dumps([name, "ok", digest]))
"""


def run_cases(folder: Path, calls: list[tuple[str, str]], setup: str) -> dict[str, tuple[str, str]]:
    """Run ``setup`` then ``attempt(name, call)`` for each ``(name, call source)`` in one bounded child (cwd:
    an empty folder); check it exits cleanly, writes nothing, and every error is one line naming its file.
    By name: ``(outcome, message or digest)``."""
    before = files_under(folder)
    cwd = Path(tempfile.mkdtemp(prefix="cwd-", dir=folder.parent))
    code = CHILD + setup + "\n" + "\n".join(f"attempt({name!r}, lambda: {call})" for name, call in calls)
    result = run_bounded_python(code, cwd=cwd, memory_bytes=CHILD_MEMORY)
    assert_clean_exit(result)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr[-2000:]
    got = {name: (kind, text) for name, kind, text in map(json.loads, result.stdout.splitlines())}
    assert set(got) == {name for name, _ in calls}
    for kind, text in got.values():
        if kind != "ok":
            assert "\n" not in text and str(folder) in text and len(text) < 2000, text[:2000]
    assert files_under(folder) == before and not any(cwd.iterdir())
    return got


# ----------------------------------------------------------------------------- CIFAR batches
class FakeArray:
    """Pickles as numpy's own array reduction (``_reconstruct`` + state) with whatever shape, dtype, order
    and data it is given — a numpy array that lies about itself."""

    def __init__(self, shape: Any, dtype: str, raw: bytes, fortran: bool):
        self.shape, self.dtype, self.raw, self.fortran = shape, dtype, raw, fortran

    def __reduce__(self):
        from numpy._core.multiarray import _reconstruct

        return _reconstruct, (np.ndarray, (0,), b"b"), (1, self.shape, np.dtype(self.dtype), self.fortran, self.raw)


_leaf = st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=6), st.binary(max_size=6), st.none(),
                  st.floats(allow_nan=True), st.booleans())  # fmt: skip
_fake_array = st.builds(
    FakeArray,
    st.one_of(st.tuples(st.integers(0, 4), st.integers(0, 3072)),
              st.lists(st.sampled_from([0, 1, 3, 3072, 2**31, 2**40, 2**63 - 1]), max_size=4).map(tuple)),
    st.sampled_from(["|u1", "<f8", ">i4", "<i8", "|b1", "<U3", "|V8"]),
    st.binary(max_size=64),
    st.booleans(),
)  # fmt: skip


@st.composite
def shared_graph(draw: st.DrawFn, wide: bool = False) -> Any:
    """Containers built bottom-up, each repeating the one before (now and then an earlier one too) up to 300
    times, nested up to 10 deep: up to 300¹⁰ items as a tree, a few KB pickled (a memo reference is two
    bytes). ``wide``: every container 100 to 300 wide, at least 4 deep (a bomb for a walker that does not
    memoise)."""
    nodes = [draw(_leaf)]
    width = st.integers(100, 300) if wide else st.sampled_from([300, 2, 1, 0])
    for _ in range(draw(st.integers(4 if wide else 1, 10))):
        picks = [nodes[-1], *draw(st.lists(st.sampled_from(nodes), max_size=1))]
        items = [picks[i % len(picks)] for i in range(draw(width))]
        kind = draw(st.sampled_from(["list", "tuple", "dict"]))
        nodes.append(items if kind == "list" else tuple(items) if kind == "tuple" else
                     {f"k{i}".encode(): item for i, item in enumerate(items)})  # fmt: skip
    return nodes[-1]


HONEST_BATCH = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [7], b"batch_label": b"training batch"}


@st.composite
def cifar_batch(draw: st.DrawFn) -> tuple[bytes, bool]:
    """The bytes of a CIFAR-10 training batch of 1 picture, and whether it is honest (then it must read). A
    third are honest, a third hold a wide shared graph (a bomb), the rest lying arrays, other graphs or junk,
    pickled with protocol 2 (where bytes pickle as ``_codecs`` calls, refused) to 5, now and then damaged."""
    kind = draw(st.sampled_from(["honest", "bomb", "hostile"]))
    if kind == "honest":
        return pickle.dumps(HONEST_BATCH, protocol=draw(st.integers(3, 5))), True
    if kind == "bomb":
        data = labels = draw(shared_graph(wide=True))
    else:
        data = draw(st.one_of(shared_graph(), _fake_array, st.just(HONEST_BATCH[b"data"])))
        labels = draw(st.one_of(shared_graph(), st.lists(_leaf, max_size=5)))
    batch = draw(st.sampled_from([{**HONEST_BATCH, b"data": data, b"labels": labels}, [data, labels, data]]))
    raw = bytearray(pickle.dumps(batch, protocol=2 if draw(st.integers(0, 9)) == 5 else draw(st.integers(3, 5))))
    if kind == "hostile" and draw(st.integers(0, 3)) == 2:  # damaged: a byte changed, or the end cut off
        at = draw(st.integers(0, len(raw) - 1))
        raw[at:] = bytes([draw(st.integers(0, 255))]) + raw[at + 1:] if draw(st.booleans()) else b""
    return bytes(raw), False


@SETTINGS
@given(batches=st.lists(cifar_batch(), min_size=2, max_size=4))
def test_hostile_cifar_batches_are_read_or_refused_in_one_line(batches):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "data"
        template = folder / "template"
        write_cifar_python(template, "cifar10", n_train=5, n_test=2)
        calls = []
        for k, (raw, _) in enumerate(batches):
            root = folder / f"case{k}"
            shutil.copytree(template, root)
            batch = root / "cifar-10-batches-py" / "data_batch_1"
            batch.write_bytes(raw)
            calls.append((f"batch{k}", f"read_cifar_pickle({str(batch)!r})"))
            calls.append((f"corpus{k}", f"load_cifar({str(root)!r}, 'cifar10', 'python')"))
        got = run_cases(folder, calls, setup="from modforge.data.images.formats.cifar import load_cifar, "
                                             "read_cifar_pickle")  # fmt: skip
        for k, (_, honest) in enumerate(batches):
            assert got[f"corpus{k}"][0] in ("ok", "ImageDataError"), got[f"corpus{k}"]
            if honest:
                assert got[f"batch{k}"][0] == got[f"corpus{k}"][0] == "ok", got


# ----------------------------------------------------------------------------- IDX files
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
MAX_HONEST_BODY = 16 << 20
IMAGES = "IdxLayout(0x08, (None, 28, 28), 'images as unsigned bytes [N, 28, 28]')"


@st.composite
def idx_file(draw: st.DrawFn) -> tuple[bytes, str | None, bool]:
    """``(file bytes, what numpy reads from it or None when it must be refused, whether it holds images
    [N, 28, 28] of unsigned bytes)``: a header of random magic, type code, dimension count and dimensions
    (some missing), a body exact, short, long, of random bytes or of zeros, raw or gzip-compressed. A third
    are bombs: a valid header declaring 2²⁸ to 2³² values, then gzip-compressed zeros."""
    bomb = draw(st.integers(0, 2)) == 1
    if bomb:
        magic, code, ndim = b"\0\0", draw(st.sampled_from(sorted(IDX_DTYPES))), draw(st.integers(1, 2))
        dims = [draw(st.sampled_from([2**28, 2**29, 2**31, 2**32 - 1])), *[1] * (ndim - 1)]
    else:
        magic = draw(st.one_of(st.just(b"\0\0"), st.sampled_from([b"\0\1", b"\x80\0", b"", b"\0"])))
        code = draw(st.one_of(st.sampled_from(sorted(IDX_DTYPES)), st.integers(0, 255)))
        ndim = draw(st.one_of(st.integers(1, 3), st.integers(0, 255)))
        count = min(ndim, 6) if draw(st.integers(0, 4)) else draw(st.integers(0, 5))  # else: a truncated header
        dims = draw(st.lists(st.one_of(st.integers(0, 6), st.just(28), st.sampled_from([60000, 2**20, 2**31])),
                             min_size=count, max_size=count))  # fmt: skip
    header = magic + bytes([code, ndim])[: 4 - len(magic)] + b"".join(struct.pack(">I", d) for d in dims)
    valid = magic == b"\0\0" and code in IDX_DTYPES and 1 <= ndim <= 16 and len(dims) == ndim
    nbytes = int(np.prod(dims, dtype=object)) * np.dtype(IDX_DTYPES.get(code, ">u1")).itemsize if valid else None
    kind = "zeros" if bomb else draw(st.sampled_from(["exact", "short", "long", "random", "zeros"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if nbytes is not None and nbytes <= MAX_HONEST_BODY and kind in ("exact", "zeros"):
        body = rng.bytes(nbytes) if kind == "exact" and nbytes <= 1 << 20 else bytes(nbytes)
    elif nbytes is not None and kind == "short" and nbytes:
        body = bytes(min(nbytes, MAX_HONEST_BODY) - draw(st.integers(1, min(nbytes, MAX_HONEST_BODY))))
    else:
        body = rng.bytes(draw(st.integers(0, 64))) if kind != "zeros" else bytes(MAX_HONEST_BODY)
        if nbytes is not None and len(body) == nbytes:  # by chance exact: make it long
            body += b"\0"
    expected = None
    if nbytes is not None and len(body) == nbytes:
        values = np.frombuffer(body, IDX_DTYPES[code]).reshape(dims)
        values = values.astype(values.dtype.newbyteorder("="))
        expected = f"{values.dtype.str} {list(values.shape)} {hashlib.sha256(values.tobytes()).hexdigest()}"
    images = expected is not None and code == 0x08 and ndim == 3 and dims[1:] == [28, 28]
    data = header + body
    return (gzip.compress(data, mtime=0) if bomb or draw(st.booleans()) else data), expected, images


@SETTINGS
@given(files=st.lists(idx_file(), min_size=3, max_size=6))
def test_hostile_idx_files_are_read_as_numpy_reads_them_or_refused_in_one_line(files):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "data"
        folder.mkdir()
        calls = []
        for k, (data, _, _) in enumerate(files):
            path = folder / f"f{k}-idx3-ubyte"
            path.write_bytes(data)
            calls += [(f"any{k}", f"read_idx({str(path)!r})"), (f"images{k}", f"read_idx({str(path)!r}, {IMAGES})")]
        got = run_cases(folder, calls, setup="from modforge.data.images.formats.idx import IdxLayout, read_idx")
        for k, (_, expected, images) in enumerate(files):
            assert got[f"any{k}"] == (("ok", expected) if expected else ("ImageDataError", got[f"any{k}"][1]))
            assert got[f"images{k}"][0] == ("ok" if images else "ImageDataError"), got[f"images{k}"]
