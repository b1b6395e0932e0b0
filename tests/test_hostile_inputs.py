"""Hostile and damaged input files for ``modforge predict``: decompression-bomb pictures,
empty, truncated, complex and lying ``.npy`` arrays are each one clear error (exit status
2, one stderr line naming the file), never an "unexpected ..." failure or a silent
conversion; ordinary inputs still predict."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from modforge.cli.main import main
from modforge.engines import inputs
from modforge.engines.inputs import InputError, read_input

pytestmark = pytest.mark.hostile

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"
METADATA = {"input": {"shape": [1, 8, 8], "layout": "image",
                      "image": {"width": 8, "height": 8, "channels": 1, "ink": "dark", "scale": 1.0}}}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    """One tiny trained digits model, exported once for the whole module."""
    folder = tmp_path_factory.mktemp("hostile")
    run_dir = folder / "run"
    assert main(["train", str(CONFIG), "train.max_epochs=2", "train.progress=never", "--run-dir", str(run_dir)]) == 0
    path = folder / "model.onnx"
    assert main(["export", str(run_dir), "--engine", "onnx", "--out", str(path)]) == 0
    return path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(path: Path, width: int = 30000, height: int = 30000) -> Path:
    """A PNG whose header claims ``width × height`` grey pixels, with one row of data: a few
    hundred bytes on disk (a real bomb only differs by compressing all its rows)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey, no interlace
    rows = zlib.compress(b"\x00" * (width + 1), 9)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", rows) + _chunk(b"IEND", b""))
    return path


def npy_with_header(path: Path, header: dict, data: bytes = b"\x00" * 16) -> Path:
    with open(path, "wb") as fp:
        np.lib.format.write_array_header_1_0(fp, header)
        fp.write(data)
    return path


def picture(path: Path, size: tuple[int, int] = (32, 32)) -> Path:
    from PIL import Image

    Image.new("L", size, 255).save(path)
    return path


def refused(cli, artifact: Path, path: Path, *needles: str) -> str:
    """``modforge predict`` on ``path``: exit 2 and one stderr line naming the file."""
    result = cli("predict", str(artifact), str(path))
    assert result.code == 2, (result.code, result.err)
    assert result.err.count("\n") == 1 and result.err.startswith("error: "), result.err
    assert path.name in result.err and "Traceback" not in result.err and "unexpected" not in result.err, result.err
    for needle in needles:
        assert needle in result.err, result.err
    return result.err


# --- through the command line ---------------------------------------------------------------------


def test_ordinary_inputs_still_predict(cli, artifact, tmp_path):
    from sklearn.datasets import load_digits

    digits = load_digits()
    np.save(tmp_path / "two.npy", (digits.data[:2] / 16).reshape(2, 1, 8, 8).astype("float32"))
    np.save(tmp_path / "ints.npy", digits.images[0].astype("int64")[None])  # integers are numbers too
    picture(tmp_path / "blank.png")
    result = cli("predict", str(artifact), str(tmp_path / "two.npy"), str(tmp_path / "ints.npy"),
                 str(tmp_path / "blank.png"))
    assert result.code == 0, result.err
    for name in ("two.npy[0]", "two.npy[1]", "ints.npy", "blank.png"):
        assert name in result.out, result.out


def test_a_decompression_bomb_png_is_refused_before_decoding(cli, artifact, tmp_path):
    path = bomb_png(tmp_path / "bomb.png")
    assert path.stat().st_size < 10_000
    refused(cli, artifact, path, "decompression bomb", "900000000 pixels")


def test_pictures_in_pillows_warning_band_are_refused_too(cli, artifact, tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 40×40 = 1600: Pillow only warns (1× to 2×)
    refused(cli, artifact, picture(tmp_path / "warned.png", (40, 40)), "decompression bomb", "1600 pixels")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # Pillow's check off: modforge's own still applies
    monkeypatch.setattr(inputs, "MAX_PICTURE_PIXELS", 1000)
    refused(cli, artifact, picture(tmp_path / "large.png", (40, 40)), "40×40 = 1600 pixels", "limit is 1000")


def test_garbage_truncated_and_disguised_pictures_are_refused(cli, artifact, tmp_path):
    garbage = tmp_path / "garbage.png"
    garbage.write_bytes(bytes(range(256)) * 4)
    refused(cli, artifact, garbage, "not a picture this command reads")
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    refused(cli, artifact, empty, "not a picture this command reads")
    from PIL import Image

    whole = tmp_path / "whole.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8)).save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    refused(cli, artifact, cut, "damaged or truncated picture")
    eps = tmp_path / "script.png"  # Pillow would hand EPS to Ghostscript: never opened
    eps.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n")
    refused(cli, artifact, eps, "not a picture this command reads")


def test_a_zero_length_npy_is_refused(cli, artifact, tmp_path):
    path = tmp_path / "zero.npy"
    path.write_bytes(b"")
    refused(cli, artifact, path, "empty file (0 bytes)")


def test_a_complex_npy_is_refused_not_truncated_to_its_real_part(cli, artifact, tmp_path):
    path = tmp_path / "complex.npy"
    np.save(path, np.ones((1, 8, 8), dtype=np.complex64) * (1 + 2j))
    refused(cli, artifact, path, "complex values", "real numbers")


def test_a_truncated_npy_is_refused(cli, artifact, tmp_path):
    whole = tmp_path / "whole.npy"
    np.save(whole, np.ones((4, 1, 8, 8), dtype=np.float32))
    path = tmp_path / "truncated.npy"
    path.write_bytes(whole.read_bytes()[:300])
    refused(cli, artifact, path, "truncated or damaged .npy array", "[4, 1, 8, 8]")
    header_cut = tmp_path / "header_cut.npy"
    header_cut.write_bytes(whole.read_bytes()[:40])
    refused(cli, artifact, header_cut, "damaged .npy header")


def test_a_npy_whose_header_lies_about_its_size_is_refused_without_allocating(cli, artifact, tmp_path):
    path = npy_with_header(tmp_path / "huge.npy", {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    assert path.stat().st_size < 200
    refused(cli, artifact, path, "8000000000000 bytes", "holds 16 bytes")
    overflow = npy_with_header(tmp_path / "overflow.npy",  # 2**64 elements: wraps to 0 in int64 arithmetic
                               {"descr": "<f8", "fortran_order": False, "shape": (2**32, 2**32)})
    refused(cli, artifact, overflow, "truncated or damaged .npy array")
    negative = npy_with_header(tmp_path / "negative.npy", {"descr": "<f8", "fortran_order": False, "shape": (-1, 8)})
    refused(cli, artifact, negative, "negative dimension")
    long_header = tmp_path / "long_header.npy"  # a 4 GB header length in a 20-byte file
    long_header.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", 4_000_000_000) + b"{}")
    refused(cli, artifact, long_header, "header of 4000000000 bytes")


def test_npz_pickles_and_other_non_arrays_are_refused(cli, artifact, tmp_path):
    npz = tmp_path / "archive.npy"
    with open(npz, "wb") as fp:
        np.savez(fp, a=np.ones((1, 8, 8)))
    refused(cli, artifact, npz, ".npz archive")
    text = tmp_path / "text.npy"
    text.write_text("1 2 3\n")
    refused(cli, artifact, text, "not a .npy array")


# --- the reader itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "needle"), [
    (np.ones((1, 8, 8), dtype=bool), "booleans"),
    (np.array(["a"] * 64).reshape(1, 8, 8), "text"),
    (np.zeros(64, dtype=[("x", "<f4")]).reshape(1, 8, 8), "records"),
    (np.zeros((1, 8, 8), dtype="datetime64[s]"), "dates"),
    (np.full((1, 8, 8), np.nan), "NaN or infinite"),
    (np.full((1, 8, 8), -np.inf, dtype=np.float16), "NaN or infinite"),
    (np.full((1, 8, 8), 1e300), "beyond float32's range"),
])
def test_arrays_of_values_the_model_cannot_take_are_named(tmp_path, values, needle):
    path = tmp_path / "x.npy"
    np.save(path, values)
    with pytest.raises(InputError, match=needle):
        read_input(path, METADATA)


def test_object_arrays_are_refused_without_unpickling(tmp_path):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([1, "a"], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="Python objects"):
        read_input(path, METADATA)


def test_every_numeric_layout_reads_as_numpy_would(tmp_path):
    values = np.arange(3 * 64, dtype=np.float64).reshape(3, 1, 8, 8)
    for name, stored in {"fortran": np.asfortranarray(values), "big_endian": values.astype(">f4"),
                         "half": values.astype(np.float16), "uint16": values.astype(np.uint16),
                         "one": values[0]}.items():
        np.save(tmp_path / f"{name}.npy", stored)
        batch, names = read_input(tmp_path / f"{name}.npy", METADATA)
        expected = np.asarray(np.load(tmp_path / f"{name}.npy"), dtype=np.float32).reshape(-1, 1, 8, 8)
        assert batch.dtype == np.float32 and batch.flags.c_contiguous and np.array_equal(batch, expected), name
        assert len(names) == len(expected)


def test_messages_stay_one_line(tmp_path):
    path = tmp_path / "two\nlines.npy"
    path.write_bytes(b"")
    with pytest.raises(InputError) as caught:
        read_input(path, METADATA)
    assert "\n" not in str(caught.value) and "two\\nlines.npy" in str(caught.value)
