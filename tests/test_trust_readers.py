"""Bounded readers (issue 39, deliverable 6): files from someone else end in one clear error, never in an
exhausted machine or a hung run.

Each test plants what an attacker would — a 2 KB CIFAR batch and a 1.5 KB ``.pt`` whose shared references
nest into 10¹¹ items as a tree, a fairseq layer string of 10⁹ layers, a 4 MB gzip IDX file inflating to
4 GB, a FIFO named in an image manifest, a picture beyond a dataset's pixel budget, a world-writable
``MODFORGE_HOME``, a score file with a 5 MB line, a FIFO or a sparse 1 GiB file as a score or protocol
file — and checks the outcome: the file is read as before (an honest shape), or one error naming the file
(and line) is raised, quoting at most 200 characters of it. The bombs run in a child under memory and
CPU limits (:mod:`bounded_child`): before the fix each child was killed (the pickles by the CPU limit, the
IDX file by MemoryError).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import stat
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bounded_child import assert_clean_exit, files_under, run_bounded_python
from image_fixtures import write_manifest_csv, write_mnist_family, write_picture
from modforge.core.errors import UsageError
from modforge.core.restricted_pickle import MAX_PICKLE_NODES, plain
from modforge.core.safe_files import MAX_TEXT_TABLE_BYTES
from modforge.core.text_safety import MAX_QUOTED, quoted
from modforge.core.weight_formats import DamagedFileError
from modforge.data.audio.protocols import ProtocolError, read_asvspoof2019
from modforge.data.images.formats import ImageDataError
from modforge.data.images.formats.cifar import read_cifar_pickle
from modforge.data.images.formats.idx import read_idx
from modforge.data.images.formats.listing import read_image_manifest
from modforge.data.pictures import PictureBombError, PictureError, open_picture
from modforge.experiment.run_plugins import KEY_FILE, SigningKeyError, signing_key
from modforge.tasks.spoofing.metrics import read_asv_scores

pytestmark = pytest.mark.hostile

LAYERS_BOMB = "[(1,1,1)]*64*64*64*64*64"
FAIRSEQ_LAYERS = "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] + [(512,2,2)]"


def nested_shared(width: int, depth: int) -> list:
    """A list holding one list ``width`` times, that one holding one list ``width`` times... ``depth`` deep:
    a few bytes per level pickled, ``width ** depth`` items walked as a tree."""
    node: list = [0] * width
    for _ in range(depth):
        node = [node] * width
    return node


def gzip_zeros_idx(path: Path, header: bytes, zero_bytes: int) -> Path:
    """``header`` then ``zero_bytes`` zeros, gzip-compressed from one repeated 16 MiB block (each full flush
    resets deflate, so every block compresses to the same bytes): a 4 GB body in a 4 MB file, made at once.
    The trailer is left out; a reader never gets that far."""
    block = bytes(1 << 24)
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    start = deflate.compress(header) + deflate.flush(zlib.Z_FULL_FLUSH)
    repeated = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    with open(path, "wb") as out:
        out.write(start)
        for _ in range(zero_bytes // len(block)):
            out.write(repeated)
    return path


CHILD = """
import json, sys
from modforge.core.errors import ModforgeError

def attempt(name, call):
    try:
        call()
        print(json.dumps([name, "ok", ""]))
    except ModforgeError as exc:
        print(json.dumps([name, type(exc).__name__, str(exc)]))

"""


def outcomes(result) -> dict[str, tuple[str, str]]:
    """The child's ``[case, outcome, message]`` lines, by case."""
    assert_clean_exit(result)
    assert result.returncode == 0, result.stderr[-2000:]
    return {name: (kind, message) for name, kind, message in map(json.loads, result.stdout.splitlines())}


def test_pickle_idx_and_layer_string_bombs_end_in_a_bounded_child(tmp_path):
    import torch

    (tmp_path / "cifar_dag").write_bytes(pickle.dumps({"data": nested_shared(200, 4), "labels": [1]}, protocol=2))
    torch.save({"model": {}, "cfg": {"model": nested_shared(2, 40)}}, tmp_path / "dag.pt")
    mnist = tmp_path / "mnist"
    write_mnist_family(mnist, 6, 3)
    n = 684_000  # float64 [684000, 28, 28]: 4.3 GB, more than the child may map
    bomb = bytes([0, 0, 0x0E, 3]) + n.to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    gzip_zeros_idx(mnist / "train-images-idx3-ubyte.gz", bomb, n * 784 * 8)
    (mnist / "train-images-idx3-ubyte").unlink()
    assert (tmp_path / "cifar_dag").stat().st_size < 4096 and (tmp_path / "dag.pt").stat().st_size < 4096
    assert (mnist / "train-images-idx3-ubyte.gz").stat().st_size < 8 << 20
    before = files_under(tmp_path)
    (tmp_path / "cwd").mkdir()
    code = CHILD + f"""
from modforge.components.frontends.fairseq_weights import fairseq_model_config, ssl_frontend_args
from modforge.core.restricted_pickle import read_with_configs
from modforge.data.images.formats.cifar import read_cifar_pickle
from modforge.data.images.formats.idx import load_mnist_family, read_idx
root = {str(tmp_path)!r}
attempt("cifar", lambda: read_cifar_pickle(root + "/cifar_dag"))
attempt("pt", lambda: read_with_configs(root + "/dag.pt"))
attempt("layers", lambda: ssl_frontend_args(fairseq_model_config(
    {{"cfg": {{"model": {{"conv_feature_layers": {LAYERS_BOMB!r}}}}}}}, "bomb.pt"), "bomb.pt"))
attempt("mnist", lambda: load_mnist_family(root + "/mnist", "mnist"))
attempt("idx", lambda: read_idx(root + "/mnist/train-images-idx3-ubyte.gz"))
"""
    got = outcomes(run_bounded_python(code, cwd=tmp_path / "cwd"))
    assert got["cifar"] == ("ok", "") and got["pt"] == ("ok", "")
    assert got["layers"][0] == "WeightFormatError" and "more than the 1000 layers" in got["layers"][1]
    assert got["mnist"][0] == "ImageDataError"
    assert "expected mnist images as unsigned bytes [N, 28, 28]" in got["mnist"][1]
    assert "got double values [684000, 28, 28]" in got["mnist"][1]
    assert got["idx"][0] == "ImageDataError" and "more than the 1073741824 bytes allowed" in got["idx"][1]
    assert files_under(tmp_path) == before and not any((tmp_path / "cwd").iterdir())


# ------------------------------------------------------------------ pickle walkers
def test_plain_shares_what_the_pickle_shares_and_keeps_honest_values():
    shared = {"dim": 768, "layers": [1, 2, 3]}
    config = {"model": shared, "task": shared, "args": (shared, [shared])}
    out = plain(config, what="x.pt")
    assert out == {"model": shared, "task": shared, "args": (shared, [shared])}
    assert out["model"] is out["task"] is out["args"][0]  # converted once


def test_plain_and_cifar_refuse_more_nodes_than_the_budget(tmp_path):
    with pytest.raises(DamagedFileError, match=r"x.pt: more than 10 objects and items"):
        plain({"a": list(range(20))}, what="x.pt", max_nodes=10)
    loop: list = []
    loop.append(loop)
    with pytest.raises(DamagedFileError, match="x.pt: configuration nested more than 100 deep"):
        plain(loop, what="x.pt")
    batch = tmp_path / "data_batch_1"
    batch.write_bytes(pickle.dumps({"labels": [0] * (MAX_PICKLE_NODES + 1)}, protocol=2))
    with pytest.raises(ImageDataError, match=rf"data_batch_1: refused to unpickle more than {MAX_PICKLE_NODES} "
                                             r"objects and items \(a pickle nesting shared references"):  # fmt: skip
        read_cifar_pickle(batch)


def test_real_fairseq_layer_strings_still_read():
    from modforge.components.frontends.fairseq_weights import fairseq_model_config, ssl_frontend_args

    args = ssl_frontend_args(fairseq_model_config({"cfg": {"model": {"conv_feature_layers": FAIRSEQ_LAYERS}}}, "x"))
    assert args["conv_kernel"] == [10, 3, 3, 3, 3, 2, 2] and args["conv_stride"] == [5, 2, 2, 2, 2, 2, 2]


# ------------------------------------------------------------------ IDX headers before bodies
def test_an_idx_header_is_refused_before_its_body_is_decompressed(tmp_path):
    from modforge.data.images.formats.idx import IdxLayout

    header = bytes([0, 0, 0x0C, 3]) + (5).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    path = gzip_zeros_idx(tmp_path / "x.gz", header, 1 << 24)
    with open(path, "ab") as damaged:  # 16 MiB on, the stream is damaged: reading that far is a gzip error
        damaged.write(b"\xff" * 64)
    layout = IdxLayout(0x08, (None, 28, 28), "images as unsigned bytes [N, 28, 28]")
    with pytest.raises(ImageDataError, match=r"x.gz: expected images as unsigned bytes \[N, 28, 28\], got int "
                                             r"values \[5, 28, 28\]"):  # fmt: skip
        read_idx(path, layout)
    big = bytes([0, 0, 0x08, 3]) + (1_000_000).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    gzip_zeros_idx(path, big, 0)  # the header alone: 784 MB declared in a file of a few dozen bytes
    with pytest.raises(ImageDataError, match=r"truncated IDX file: .*784000000 bytes.*more than a gzip file of "
                                             r"\d+ bytes can hold"):  # fmt: skip
        read_idx(path, layout)


# ------------------------------------------------------------------ special files never opened for a blocking read
def finishes(call: Callable[[], Any], seconds: float = 30) -> Any:
    """``call()`` in a daemon thread; fails the test when it has not returned after ``seconds`` (a hang)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the reader hangs"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def plant_unreadable(path: Path, kind: str) -> str:
    """Put at ``path`` what no bounded reader may read — a FIFO, a folder or a sparse file one byte over
    :data:`MAX_TEXT_TABLE_BYTES` (``kind``: ``fifo``, ``folder``, ``huge``) — and return the words of its refusal
    as a pattern."""
    if kind == "fifo":
        os.mkfifo(path)
        return r"is a named pipe \(FIFO\); expected a regular file"
    if kind == "folder":
        path.mkdir()
        return "is a folder; expected a regular file"
    with open(path, "wb") as sparse:  # a hole: no disk space taken
        sparse.truncate(MAX_TEXT_TABLE_BYTES + 1)
    return rf"is {MAX_TEXT_TABLE_BYTES + 1} bytes, more than the {MAX_TEXT_TABLE_BYTES}"


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_an_image_manifest_row_naming_a_fifo_or_a_folder_is_one_error_naming_the_line(tmp_path, kind):
    root = tmp_path / "p"
    write_picture(root / "a" / "ok.png")
    special = root / "a" / "trap.png"
    os.mkfifo(special) if kind == "fifo" else special.mkdir()
    write_manifest_csv(root / "m.csv", [("a/ok.png", "a", ""), ("a/trap.png", "a", "")])
    what = "a named pipe \\(FIFO\\)" if kind == "fifo" else "a folder"
    with pytest.raises(ImageDataError, match=rf"m.csv: line 3: .*trap.png is {what}; expected a picture file"):
        finishes(lambda: read_image_manifest(root / "m.csv"))


def test_a_picture_that_is_a_fifo_is_refused_not_waited_for(tmp_path):
    fifo = tmp_path / "cat.png"
    os.mkfifo(fifo)
    with pytest.raises(PictureError, match=r"the image file .*cat.png is a named pipe \(FIFO\); expected a regular"):
        finishes(lambda: open_picture(fifo, max_pixels=100))


# ------------------------------------------------------------------ the pixel budget of a picture dataset
def test_image_csv_and_image_folder_refuse_pictures_beyond_their_pixel_budget(tmp_path):
    from modforge.core.registries import DATASETS

    root = tmp_path / "p"
    for k in range(4):
        write_picture(root / ("a" if k % 2 else "b") / f"{k}.png", size=(20, 10))
    write_manifest_csv(root / "m.csv", [(f"{'a' if k % 2 else 'b'}/{k}.png", "ab"[k % 2], "") for k in range(4)])
    for kind, args in (("image_csv", {"manifest": str(root / "m.csv")}), ("image_folder", {"root": str(root)})):
        fine = DATASETS.build({"type": kind, "args": {**args, "val_fraction": 0.0}})
        assert fine.train.source.read(0).shape == (3, 10, 20)
        with pytest.raises(PictureBombError, match=r"holds 200 pixels, more than the 199 allowed"):
            DATASETS.build({"type": kind, "args": {**args, "val_fraction": 0.0, "max_pixels": 199}}).train.source.read(0)


def test_predict_opens_pictures_through_the_one_picture_guard(tmp_path, monkeypatch):
    """``modforge predict`` — a classifier's ``read_input`` and a detector's ``prepare_picture`` — opens a picture
    through :func:`modforge.data.pictures.open_picture` (formats, bounded open, pixel limit) with its own limit,
    instead of a copy of that handling."""
    import modforge.data.pictures as pictures
    from modforge.engines.inputs import MAX_PICTURE_PIXELS, read_input
    from modforge.tasks.detection.predict import prepare_picture

    seen: list[tuple[str, int]] = []
    real = pictures.open_picture
    monkeypatch.setattr(pictures, "open_picture",
                        lambda path, **kw: seen.append((Path(path).name, kw["max_pixels"])) or real(path, **kw))  # fmt: skip
    picture = write_picture(tmp_path / "a.png", (8, 8))
    metadata = {"input": {"shape": [1, 8, 8], "layout": "image", "image": {"width": 8, "height": 8, "channels": 1}}}
    assert read_input(picture, metadata)[0].shape == (1, 1, 8, 8)
    assert prepare_picture(picture, {"mean": [0, 0, 0], "std": [1, 1, 1]}).input.shape == (1, 3, 8, 8)
    assert seen == [("a.png", MAX_PICTURE_PIXELS)] * 2


def test_a_picture_in_pillows_warning_band_is_refused_with_its_width_and_height(tmp_path):
    """Between once and twice the limit Pillow only warns, without the size; the shared guard refuses that
    band from the header (so ``predict`` can say ``W×H``), and above it Pillow's own error stands."""
    big = write_picture(tmp_path / "big.png", (50, 40))
    with pytest.raises(PictureBombError, match=r"big.png holds 2000 pixels, more than the 1500 allowed") as info:
        open_picture(big, max_pixels=1500)
    assert (info.value.size, info.value.pixels, info.value.max_pixels) == ((50, 40), "2000", 1500)
    with pytest.raises(PictureBombError, match=r"big.png holds 2000 pixels, more than the 500 allowed") as info:
        open_picture(big, max_pixels=500)
    assert info.value.size is None


# ------------------------------------------------------------------ an image manifest itself
@pytest.mark.parametrize("kind", ["fifo", "folder", "huge"])
def test_an_image_manifest_must_be_a_regular_file_within_the_cap(cli, tmp_path, kind):
    """The ``image_csv`` manifest is read through the bounded open (1 GiB, as protocols): a sparse 1 GiB + 1
    file is refused before a byte is read, a FIFO is not waited for; one error naming the file, one line
    through ``modforge data show``."""
    path = tmp_path / "m.csv"
    problem = plant_unreadable(path, kind) + (" a manifest may have" if kind == "huge" else "")
    with pytest.raises(ImageDataError, match=rf"^the manifest {path} {problem}$"):
        finishes(lambda: read_image_manifest(path))
    (tmp_path / "show.yaml").write_text(f"data: {{type: image_csv, args: {{manifest: {path}}}}}\n")
    result = cli("data", "show", "show.yaml", "-n", "2", "--out", "shown.png")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert re.search(rf"the manifest {path} {problem}", result.err), result.err


# ------------------------------------------------------------------ the run-signing key's folder
@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "home"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("MODFORGE_HOME", str(folder))
    return folder


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_key_in_a_folder_others_may_write_is_refused_saying_chmod_700(home, mode):
    os.chmod(home, mode)
    for create in (True, False):
        with pytest.raises(SigningKeyError, match=rf"key's folder {home} is writable by group or others "
                                                  rf"\(mode 0{mode:o}, no sticky bit\).*chmod 700 {home}"):  # fmt: skip
            signing_key(create=create) if create else (home / KEY_FILE).touch(0o600) or signing_key()
    assert not os.path.exists(home / KEY_FILE) or (home / KEY_FILE).stat().st_size == 0


def test_a_sticky_world_writable_key_folder_is_accepted_as_ssh_accepts_tmp(home):
    os.chmod(home, 0o1777)
    key = signing_key(create=True)
    assert key is not None and signing_key() == key
    assert stat.S_IMODE((home / KEY_FILE).stat().st_mode) == 0o600


def test_a_key_folder_above_which_lies_a_group_writable_folder_is_refused(tmp_path, monkeypatch):
    os.chmod(tmp_path, 0o775)
    inner = tmp_path / "a" / "home"
    inner.mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("MODFORGE_HOME", str(inner))
    with pytest.raises(SigningKeyError, match=rf"key's folder {inner} lies in {tmp_path}, which is writable by "
                                              "group or others"):  # fmt: skip
        signing_key(create=True)
    assert not (inner / KEY_FILE).exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="handing a folder to another user needs root")
def test_a_key_folder_owned_by_another_user_is_refused(home):
    os.chown(home, 4321, 4321)
    with pytest.raises(SigningKeyError, match=rf"key's folder {home} is owned by another user \(uid 4321\)"):
        signing_key(create=True)


# ------------------------------------------------------------------ score and protocol files
def test_quoted_cuts_a_line_and_says_how_long_it_was():
    assert quoted("abc") == "'abc'"
    long = quoted("x" * 5_000_000)
    assert len(long) < MAX_QUOTED + 40 and long.endswith("(5000000 characters)")


def test_a_5_mb_malformed_line_is_quoted_in_200_characters(cli, tmp_path):
    (tmp_path / "scores.txt").write_text("u1 0.5 bonafide -\n" + "x" * 5_000_000 + " 1 maybe A01\n")
    (tmp_path / "asv.txt").write_text("s1 target 1.0\n" + "y" * 5_000_000 + "\n")
    (tmp_path / "tandem.txt").write_text("z" * 5_000_000 + "\n")
    for args, where in ((["scores.txt"], "scores.txt:2"), (["scores.txt", "--asv", "asv.txt"], None),
                        (["--tandem", "tandem.txt"], "tandem.txt:1")):  # fmt: skip
        if where is None:  # the CM file is read first; give a good one
            (tmp_path / "scores.txt").write_text("u1 0.5 bonafide -\nu2 0.1 spoof A01\n")
            where = "asv.txt:2"
        result = cli("score", *args)
        assert result.code == 2 and where in result.err, result.err[:500]
        assert len(result.err.strip().splitlines()) == 1 and len(result.err) < 600, result.err[:500]
        assert re.search(r"…' \(50000\d\d characters\)$", result.err.strip()), result.err[:500]


@pytest.mark.parametrize("kind", ["fifo", "folder", "huge"])
def test_score_and_protocol_files_must_be_regular_files_within_the_cap(tmp_path, kind):
    from modforge.tasks.spoofing.scores import read_score_file

    path = tmp_path / "f.txt"
    problem = plant_unreadable(path, kind)
    for read, error, what in ((read_score_file, UsageError, "score file"),
                              (read_asv_scores, ValueError, "ASV score file"),
                              (lambda p: read_asvspoof2019(p, tmp_path), ProtocolError, "protocol file")):  # fmt: skip
        with pytest.raises(error, match=rf"the {what} {path} {problem}"):
            finishes(lambda read=read: read(str(path)))
