"""The readers of image corpora's official files (modforge.data.images.formats) and the picture guard
(modforge.data.pictures): the same arrays and file lists as torchvision's readers of the same files, and
one clear ImageDataError for every damaged, missing or hostile input."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from image_fixtures import (
    MNIST_FILES,
    hostile_pickle,
    idx_bytes,
    write_cifar_binary,
    write_cifar_python,
    write_emnist,
    write_idx,
    write_image_folder,
    write_manifest_csv,
    write_mnist_family,
    write_picture,
    write_tiny_imagenet,
)
from modforge.core.errors import UsageError
from modforge.core.safe_files import UnsafePathError
from modforge.data.images.formats import ImageDataError, ImagePathError, MissingImageDataError
from modforge.data.images.formats.cifar import load_cifar, read_cifar_binary, read_cifar_pickle
from modforge.data.images.formats.idx import (
    EMNIST_CLASSES,
    FASHION_MNIST_CLASSES,
    KMNIST_CLASSES,
    MNIST_CLASSES,
    load_emnist,
    load_mnist_family,
    read_idx,
)
from modforge.data.images.formats.listing import list_image_folder, manifest_classes, read_image_manifest
from modforge.data.images.formats.tiny_imagenet import list_tiny_imagenet
from modforge.data.pictures import PictureBombError, PictureError, decode_picture, open_picture

torchvision = pytest.importorskip("torchvision")
from torchvision import datasets  # noqa: E402

TV_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST", "kmnist": "KMNIST"}
TV_CLASSES = {"mnist": datasets.MNIST, "fashion_mnist": datasets.FashionMNIST, "kmnist": datasets.KMNIST}


# ================================================================== IDX
@pytest.mark.parametrize("corpus", ["mnist", "fashion_mnist", "kmnist"])
def test_mnist_family_equals_torchvision(tmp_path, corpus):
    written = write_mnist_family(tmp_path / TV_FOLDERS[corpus] / "raw", 20, 8, seed=len(corpus))
    got = load_mnist_family(tmp_path, corpus)
    for train, images, labels in (
        (True, got.train_images, got.train_labels),
        (False, got.test_images, got.test_labels),
    ):
        ref = TV_CLASSES[corpus](str(tmp_path), train=train)
        assert images.dtype == np.uint8 and images.shape[1:] == (28, 28) and labels.dtype == np.int64
        np.testing.assert_array_equal(images, ref.data.numpy())
        np.testing.assert_array_equal(labels, ref.targets.numpy())
        assert got.class_names == ref.classes
    np.testing.assert_array_equal(got.train_images, written.train_images)
    assert got.folder == tmp_path / TV_FOLDERS[corpus] / "raw"
    assert (MNIST_CLASSES, FASHION_MNIST_CLASSES, KMNIST_CLASSES) == tuple(c.classes for c in TV_CLASSES.values())


def test_gzipped_files_give_the_same_arrays_and_raw_ones_are_preferred(tmp_path):
    raw = write_mnist_family(tmp_path / "raw", seed=1)
    gz = write_mnist_family(tmp_path / "gz", seed=1, gz=True, raw=False)
    assert all(f.suffix == ".gz" for f in gz.files)
    a, b = load_mnist_family(tmp_path / "raw", "mnist"), load_mnist_family(tmp_path / "gz", "mnist")
    for name in ("train_images", "train_labels", "test_images", "test_labels"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_array_equal(getattr(a, name), getattr(raw, name))
    # both present: the raw file is read (here the .gz files hold other pixels)
    write_mnist_family(tmp_path / "raw", seed=2, gz=True, raw=False)
    np.testing.assert_array_equal(load_mnist_family(tmp_path / "raw", "mnist").train_images, raw.train_images)


@pytest.mark.parametrize("split", ["letters", "balanced"])
def test_emnist_equals_torchvision_and_is_found_in_the_official_gzip_folder(tmp_path, split):
    write_emnist(tmp_path / "EMNIST" / "raw", split, 18, 6, seed=3)
    got = load_emnist(tmp_path, split)
    for train, images, labels in (
        (True, got.train_images, got.train_labels),
        (False, got.test_images, got.test_labels),
    ):
        ref = datasets.EMNIST(str(tmp_path), split=split, train=train)
        np.testing.assert_array_equal(images, ref.data.numpy())  # as stored: transposed, like torchvision
        np.testing.assert_array_equal(labels, ref.targets.numpy())
        assert got.class_names == ref.classes == EMNIST_CLASSES[split]
    official = write_emnist(tmp_path / "zip" / "gzip", split, 18, 6, seed=3, gz=True, raw=False)
    from_zip = load_emnist(tmp_path / "zip", split)
    assert from_zip.folder == official.folder
    np.testing.assert_array_equal(from_zip.test_images, got.test_images)
    assert EMNIST_CLASSES == datasets.EMNIST.classes_split_dict


@pytest.mark.parametrize("dtype", ["u1", "i1", "i2", "i4", "f4", "f8"])
def test_read_idx_reads_every_type_in_native_byte_order(tmp_path, dtype):
    values = (np.arange(-12, 12).reshape(2, 3, 4) * 3).astype(dtype)
    for gz in (False, True):
        got = read_idx(write_idx(tmp_path / f"x{gz}", values, gz=gz))
        assert got.dtype == np.dtype(dtype).newbyteorder("=") and got.dtype.isnative
        np.testing.assert_array_equal(got, values)


def idx_error(path: Path, data: bytes, match: str, gz: bool = False) -> str:
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(ImageDataError, match=match) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    return message


def test_damaged_idx_files_are_refused_with_one_clear_message(tmp_path):
    good = idx_bytes(np.zeros((3, 28, 28), np.uint8))
    p = tmp_path / "f"
    idx_error(p, good[:-5], r"truncated IDX file: its header declares 3 × 28 × 28 unsigned byte values \(2352 bytes")
    idx_error(p, good[:-5], r"truncated IDX file", gz=True)
    idx_error(p, good + b"\0", r"longer than its header says")
    idx_error(p, good + b"\0", r"longer than its header says", gz=True)
    idx_error(p, b"\x08\x03" + good[2:], r"not an IDX file \(expected a header of two zero bytes")
    idx_error(p, b"", r"not an IDX file .*starts with nothing")
    idx_error(p, good[:2] + b"\x0a" + good[3:], r"IDX type code 0x0A is not one of 0x08 \(unsigned byte\)")
    idx_error(p, good[:3] + b"\x00" + good[4:], r"declares 0 dimensions")
    idx_error(p, good[:10], r"truncated IDX header")
    idx_error(
        p, bytes([0, 0, 8, 2]) + struct.pack(">2I", 2**20, 2**11), r"= 2147483648 unsigned byte values \(2147483648 bytes\), more than the 1073741824 bytes allowed"
    )
    damaged = bytearray(gzip.compress(good))
    damaged[-8] ^= 0xFF  # the CRC
    idx_error(p, bytes(damaged), r"not a readable gzip-compressed IDX file \(CRC check failed")
    idx_error(p, gzip.compress(good)[:30], r"not a readable gzip-compressed IDX file \(it ends early\)")
    with pytest.raises(MissingImageDataError, match="IDX file not found: .*nowhere"):
        read_idx(tmp_path / "nowhere")


def test_inconsistent_mnist_files_are_refused(tmp_path):
    write_mnist_family(tmp_path, 10, 5)
    write_idx(tmp_path / MNIST_FILES[1], np.zeros(9, np.uint8))
    with pytest.raises(ImageDataError, match=r"train-labels-idx1-ubyte: expected mnist labels as unsigned bytes \[10\] "
                                             r"\(an idx1-ubyte file: one label for each of the 10 images in "
                                             r"train-images-idx3-ubyte\), got unsigned byte values \[9\]"):  # fmt: skip
        load_mnist_family(tmp_path, "mnist")
    write_idx(tmp_path / MNIST_FILES[1], np.full(10, 10, np.uint8))
    with pytest.raises(
        ImageDataError, match=r"train-labels-idx1-ubyte: label 10 at position 0 is out of range \(expected 0 … 9"
    ):
        load_mnist_family(tmp_path, "kmnist")
    write_idx(tmp_path / MNIST_FILES[0], np.zeros((10, 32, 32), np.uint8))
    with pytest.raises(
        ImageDataError, match=r"train-images-idx3-ubyte: expected mnist images as unsigned bytes \[N, 28, 28\]"
    ):
        load_mnist_family(tmp_path, "mnist")


def test_missing_idx_files_name_the_files_the_folders_and_the_download_command(tmp_path):
    with pytest.raises(MissingImageDataError) as info:
        load_mnist_family(tmp_path / "data", "fashion_mnist")
    message = str(info.value)
    for part in (*MNIST_FILES, "each raw or .gz", f"{tmp_path / 'data'} or {tmp_path / 'data' / 'FashionMNIST' / 'raw'}",
                 f"`modforge data download fashion_mnist --root {tmp_path / 'data'}`"):  # fmt: skip
        assert part in message, part
    assert isinstance(info.value, UsageError)
    write_mnist_family(tmp_path / "data", 4, 2)
    (tmp_path / "data" / MNIST_FILES[3]).unlink()
    with pytest.raises(MissingImageDataError, match=rf"files missing in {tmp_path / 'data'}: expected "
                                                    r"t10k-labels-idx1-ubyte \(raw or .gz\) there too.*download mnist"):  # fmt: skip
        load_mnist_family(tmp_path / "data", "mnist")
    with pytest.raises(MissingImageDataError, match=r"emnist-digits-train-images-idx3-ubyte, .* in .* or .*gzip or "
                                                    r".*EMNIST/raw; `modforge data download emnist"):  # fmt: skip
        load_emnist(tmp_path / "data", "digits")


# ================================================================== CIFAR
@pytest.fixture
def cifar_integrity(monkeypatch):
    """torchvision checks the official MD5 sums; the tiny fixture files have others."""
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)


@pytest.mark.parametrize("corpus", ["cifar10", "cifar100"])
def test_cifar_python_equals_torchvision(tmp_path, cifar_integrity, corpus):
    written = write_cifar_python(tmp_path, corpus, 15, 7, seed=4)
    got = load_cifar(tmp_path, corpus)
    ref_class = datasets.CIFAR10 if corpus == "cifar10" else datasets.CIFAR100
    for train, images, labels in (
        (True, got.train_images, got.train_labels),
        (False, got.test_images, got.test_labels),
    ):
        ref = ref_class(str(tmp_path), train=train)
        assert images.shape[1:] == (32, 32, 3) and images.dtype == np.uint8 and labels.dtype == np.int64
        np.testing.assert_array_equal(images, ref.data)
        np.testing.assert_array_equal(labels, np.asarray(ref.targets))
        assert got.class_names == ref.classes
    assert got.folder == written.folder
    if corpus == "cifar100":
        np.testing.assert_array_equal(got.coarse_train_labels, written.coarse_train_labels)
        np.testing.assert_array_equal(got.coarse_test_labels, written.coarse_test_labels)
        assert got.coarse_names == written.coarse_names
    else:
        assert got.coarse_train_labels is None and got.coarse_names is None
    # root may be the corpus' folder itself
    np.testing.assert_array_equal(load_cifar(written.folder, corpus).test_images, got.test_images)


@pytest.mark.parametrize("corpus", ["cifar10", "cifar100"])
def test_cifar_binary_equals_the_python_version(tmp_path, corpus):
    python = load_cifar(write_cifar_python(tmp_path / "py", corpus, 12, 5, seed=5).folder.parent, corpus, "python")
    binary_root = write_cifar_binary(tmp_path / "bin", corpus, 12, 5, seed=5).folder.parent
    binary = load_cifar(binary_root, corpus)  # auto: no python folder there
    assert binary.folder.name in ("cifar-10-batches-bin", "cifar-100-binary")
    for name in ("train_images", "train_labels", "test_images", "test_labels", "class_names", "coarse_train_labels",
                 "coarse_test_labels", "coarse_names"):  # fmt: skip
        a, b = getattr(python, name), getattr(binary, name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b, name


def test_auto_prefers_the_python_version(tmp_path):
    write_cifar_binary(tmp_path, "cifar10", seed=1)
    assert load_cifar(tmp_path, "cifar10").folder.name == "cifar-10-batches-bin"
    write_cifar_python(tmp_path, "cifar10", seed=1)
    assert load_cifar(tmp_path, "cifar10").folder.name == "cifar-10-batches-py"
    assert load_cifar(tmp_path, "cifar10", "binary").folder.name == "cifar-10-batches-bin"


@pytest.mark.parametrize("how", ["system", "open"])
def test_a_hostile_cifar_pickle_is_refused_and_runs_nothing(tmp_path, how):
    folder = write_cifar_python(tmp_path, "cifar10").folder
    marker = tmp_path / "pwned"
    (folder / "data_batch_3").write_bytes(hostile_pickle(marker, how))
    with pytest.raises(ImageDataError) as info:
        load_cifar(tmp_path, "cifar10")
    message = str(info.value)
    refused = "posix.system" if how == "system" else ".open"
    assert str(folder / "data_batch_3") in message and refused in message and "nothing in the file was run" in message
    assert not marker.exists()
    if how == "open":  # the fixture is really hostile: plain pickle would have created the file
        pickle.loads(hostile_pickle(marker, how))[b"data"].close()
        assert marker.exists()


def test_pickles_of_other_globals_or_odd_arrays_are_refused(tmp_path):
    path = tmp_path / "batch"
    cases = [
        (pickle.dumps({"data": np.zeros(3, dtype=object)}), r"an array of type 'O8?'"),
        (pickle.dumps({"data": Path("x")}), r"the global pathlib.PosixPath"),
        (pickle.dumps({"data": np.array([(1, 2)], dtype=[("a", "u1"), ("b", "u1")])}), r"an array of type"),
        (b"\x80\x02cnumpy\nndarray\nK\x05\x85R.", r"TypeError"),  # numpy.ndarray((5,)) called directly
        (
            b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nJ\x00\x00\x00\x40\x85U\x01b\x87R.",
            r"_reconstruct called with other arguments",
        ),  # a 1 GiB shape asked of _reconstruct
        (pickle.dumps({"data": b"x"})[:-4], r"not a readable CIFAR python batch \(a pickle\)"),
        (b"not a pickle at all", r"not a readable CIFAR python batch"),
        (pickle.dumps([1, 2]), r"expected a pickled dict"),
    ]
    for data, match in cases:
        path.write_bytes(data)
        with pytest.raises(ImageDataError, match=match) as info:
            read_cifar_pickle(path)
        assert str(path) in str(info.value)


def test_malformed_cifar_batches_are_refused(tmp_path):
    folder = write_cifar_python(tmp_path, "cifar10").folder
    batch = pickle.loads((folder / "data_batch_1").read_bytes(), encoding="latin1")
    (folder / "data_batch_1").write_bytes(pickle.dumps({**batch, "labels": batch["labels"][:-1]}))
    with pytest.raises(ImageDataError, match=r"data_batch_1: 4 images but 3 labels; they must agree"):
        load_cifar(tmp_path, "cifar10")
    (folder / "data_batch_1").write_bytes(pickle.dumps({**batch, "labels": [10] * 4}))
    with pytest.raises(ImageDataError, match=r"data_batch_1: labels: 10 at position 0 is out of range"):
        load_cifar(tmp_path, "cifar10")
    (folder / "data_batch_1").write_bytes(pickle.dumps({**batch, "data": batch["data"][:, :100]}))
    with pytest.raises(ImageDataError, match=r"data_batch_1: 'data' must be unsigned bytes \[N, 3072\]"):
        load_cifar(tmp_path, "cifar10")
    binary = write_cifar_binary(tmp_path, "cifar100").folder
    with open(binary / "test.bin", "ab") as handle:
        handle.write(b"\0" * 10)
    with pytest.raises(
        ImageDataError, match=r"test.bin: 30750 bytes is not a whole number of CIFAR-100 records \(3074"
    ):
        read_cifar_binary(binary / "test.bin", "cifar100")


def test_missing_cifar_files_name_them_their_folder_and_the_download_command(tmp_path):
    with pytest.raises(MissingImageDataError) as info:
        load_cifar(tmp_path, "cifar100")
    message = str(info.value)
    for part in ("train, test, meta in", str(tmp_path / "cifar-100-python"), "train.bin, test.bin, fine_label_names.txt",
                 str(tmp_path / "cifar-100-binary"), f"`modforge data download cifar100 --root {tmp_path}`"):  # fmt: skip
        assert part in message, part
    folder = write_cifar_python(tmp_path, "cifar10").folder
    (folder / "data_batch_4").unlink()
    with pytest.raises(MissingImageDataError, match=rf"CIFAR-10 files missing in {folder}: expected data_batch_4 "
                                                    r"there too \(python version\); `modforge data download cifar10"):  # fmt: skip
        load_cifar(tmp_path, "cifar10")


# ================================================================== Tiny-ImageNet
def test_tiny_imagenet_listing(tmp_path):
    written = write_tiny_imagenet(tmp_path, n_classes=3, per_class=2, n_val=5)
    got = list_tiny_imagenet(tmp_path)
    assert got.folder == written.folder and got.wnids == written.wnids and got.class_names == written.class_names
    assert got.train == written.train and got.val == written.val
    assert got.wnids != sorted(got.wnids)  # labels follow wnids.txt, not sorted ids
    assert list_tiny_imagenet(written.folder).val == got.val  # root may be the folder itself


def test_tiny_imagenet_refuses_names_and_links_leading_out(tmp_path):
    written = write_tiny_imagenet(tmp_path / "data")
    annotations = written.folder / "val" / "val_annotations.txt"
    secret = write_picture(tmp_path / "secret.JPEG")
    lines = annotations.read_text().splitlines(keepends=True)
    annotations.write_text(lines[0] + f"../../../secret.JPEG\t{written.wnids[0]}\t0\t0\t1\t1\n")
    with pytest.raises(ImagePathError, match=r"val_annotations.txt: line 2: file name '../../../secret.JPEG' is not "
                                             r"a relative path inside"):  # fmt: skip
        list_tiny_imagenet(tmp_path / "data")
    annotations.write_text("".join(lines))
    os.symlink(secret, written.folder / "train" / written.wnids[0] / "images" / "stolen.JPEG")
    with pytest.raises(
        ImagePathError, match=r"stolen.JPEG is a symbolic link to .*secret.JPEG, outside the folder"
    ) as info:
        list_tiny_imagenet(tmp_path / "data")
    assert isinstance(info.value, UnsafePathError) and isinstance(info.value, ImageDataError)


def test_tiny_imagenet_missing_and_malformed(tmp_path):
    with pytest.raises(MissingImageDataError, match=r"expected wnids.txt, words.txt, train/<wnid>/images/, "
                                                    r"val/val_annotations.txt, val/images/ in .*tiny-imagenet-200.*"
                                                    r"`modforge data download tiny_imagenet --root"):  # fmt: skip
        list_tiny_imagenet(tmp_path)
    written = write_tiny_imagenet(tmp_path)
    annotations = written.folder / "val" / "val_annotations.txt"
    annotations.write_text("val_0.JPEG\tn123\t0\t0\t1\t1\n")
    with pytest.raises(ImageDataError, match=r"val_annotations.txt: line 1: 'n123' is not one of the ids in wnids.txt"):
        list_tiny_imagenet(tmp_path)
    annotations.write_text("val_0.JPEG\n")
    with pytest.raises(ImageDataError, match=r"val_annotations.txt: line 1: expected 6 tab-separated fields"):
        list_tiny_imagenet(tmp_path)


# ================================================================== a folder per class
def test_image_folder_equals_torchvisions_image_folder(tmp_path):
    root = tmp_path / "pictures"
    write_image_folder(root, {"dog": 3, "cat": 2, "Zebra": 1, "bird": 2})
    write_picture(root / "cat" / "nested" / "deeper" / "x.PNG", seed=9)  # upper-case extension, nested
    write_picture(root / "cat" / "a_sub" / "y.jpg", seed=8)
    write_picture(root / "cat" / "nested.png", seed=7)  # sorts between nested/ files in torchvision's order
    (root / "dog" / "notes.txt").write_text("not a picture")
    (root / "bird" / "more").mkdir()
    os.symlink(root / "dog", root / "bird" / "more" / "link_to_dog")  # a link inside the folder is followed
    samples, classes = list_image_folder(root)
    ref = datasets.ImageFolder(str(root))
    assert classes == ref.classes == ["Zebra", "bird", "cat", "dog"]
    assert [(str(p), k) for p, k in samples] == ref.samples
    assert all(isinstance(p, Path) for p, _ in samples)


def test_image_folder_with_given_classes(tmp_path):
    from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

    write_image_folder(tmp_path, {"a": 2, "b": 1, "c": 2})
    samples, classes = list_image_folder(tmp_path, ["c", "a"])
    assert classes == ["c", "a"]
    assert [(str(p), k) for p, k in samples] == make_dataset(str(tmp_path), {"c": 0, "a": 1}, IMG_EXTENSIONS)
    with pytest.raises(MissingImageDataError, match=r"class folder\(s\) zebra not found"):
        list_image_folder(tmp_path, ["a", "zebra"])
    with pytest.raises(ImageDataError, match=r"classes must be a non-empty list of folder names"):
        list_image_folder(tmp_path, ["../a"])


def test_image_folder_errors(tmp_path):
    write_image_folder(tmp_path, {"a": 1, "b": 0})
    with pytest.raises(ImageDataError, match=r"no picture in the class folder\(s\) b \(expected files ending in .jpg"):
        list_image_folder(tmp_path)
    with pytest.raises(FileNotFoundError):  # torchvision refuses it too
        datasets.ImageFolder(str(tmp_path))
    with pytest.raises(MissingImageDataError, match="image folder not found"):
        list_image_folder(tmp_path / "nowhere")
    (tmp_path / "b").rmdir()
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a")
    with pytest.raises(ImageDataError, match=r"loop is a symbolic link back to .*the folder tree loops"):
        list_image_folder(tmp_path)


@pytest.mark.parametrize("kind", ["file", "folder", "class"])
def test_links_out_of_an_image_folder_are_refused(tmp_path, kind):
    root, outside = tmp_path / "root", tmp_path / "outside"
    write_image_folder(root, {"a": 1})
    secret = write_picture(outside / "secret.png")
    link = {"file": root / "a" / "s.png", "folder": root / "a" / "sub", "class": root / "b"}[kind]
    link.symlink_to(secret if kind == "file" else outside)
    with pytest.raises(ImagePathError, match=rf"{link} is a symbolic link to {outside}.*outside the image folder"):
        list_image_folder(root)


# ================================================================== manifests
def test_csv_manifest(tmp_path):
    manifest = write_manifest_csv(tmp_path / "m.csv", [("a/1.png", "cat", "train"), ("b/2.png", "dog", ""),
                                                       ("3.png", "cat", "val")])  # fmt: skip
    rows = read_image_manifest(manifest)
    assert rows == [(tmp_path / "a/1.png", "cat", "train"), (tmp_path / "b/2.png", "dog", None),
                    (tmp_path / "3.png", "cat", "val")]  # fmt: skip
    assert manifest_classes(label for _, label, _ in rows) == ["cat", "dog"]
    other = write_manifest_csv(tmp_path / "lists" / "m.csv", [("x.png", "z")], header=("label", "path"))
    assert read_image_manifest(other, root=tmp_path) == [(tmp_path / "z", "x.png", None)]


def test_bad_manifests_are_refused_naming_file_and_line(tmp_path):
    def refused(rows, match, header=("path", "label", "split"), error=ImageDataError):
        manifest = write_manifest_csv(tmp_path / "m.csv", rows, header)
        with pytest.raises(error, match=match) as info:
            read_image_manifest(manifest)
        assert str(manifest) in str(info.value) and "\n" not in str(info.value)

    refused(
        [("ok.png", "a", ""), ("../x.png", "b", "")],
        r"line 3: path '../x.png' is not a relative path",
        error=ImagePathError,
    )
    refused([("/etc/passwd", "b", "")], r"line 2: path '/etc/passwd' is not a relative path", error=ImagePathError)
    refused([("ok.png", "a", ""), ("x.png", "b")], r"line 3: 2 fields, the header has 3 \('path,label,split'\)")
    refused([("ok.png", "", "")], r"line 2: empty or missing label for 'ok.png'")
    refused([("", "a", "")], r"line 2: empty or missing path")
    refused([("ok.png", "a")], r"the header lacks the column\(s\) label", header=("path", "class"))
    (tmp_path / "outside").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "escape").symlink_to(tmp_path / "outside")
    manifest = write_manifest_csv(tmp_path / "data" / "m.csv", [("fine.png", "a", ""), ("escape/x.png", "a", "")])
    with pytest.raises(ImagePathError, match=r"m.csv: line 3: path 'escape/x.png' leads outside .* through a link"):
        read_image_manifest(manifest)
    with pytest.raises(MissingImageDataError, match="manifest not found"):
        read_image_manifest(tmp_path / "none.csv")


def test_parquet_manifest(tmp_path):
    try:
        import pyarrow
    except ImportError:
        pyarrow = None
    path = tmp_path / "m.parquet"
    if pyarrow is None:
        path.write_bytes(b"PAR1")
        with pytest.raises(
            ImageDataError, match=r"m.parquet: reading a parquet manifest needs pyarrow.*pip install pyarrow"
        ):
            read_image_manifest(path)
        return
    import pyarrow.parquet as pq

    pq.write_table(pyarrow.table({"path": ["a.png", "../b.png"], "label": [1, 2]}), path)
    with pytest.raises(ImagePathError, match=r"m.parquet: row 2: path '../b.png'"):
        read_image_manifest(path)
    pq.write_table(pyarrow.table({"path": ["a.png"], "label": [1]}), path)
    assert read_image_manifest(path) == [(tmp_path / "a.png", "1", None)]


# ================================================================== pictures
def test_decode_picture_gives_torchvisions_pixels(tmp_path):
    from torchvision.datasets.folder import pil_loader

    files = [write_picture(tmp_path / "rgb.png"), write_picture(tmp_path / "photo.jpg", (9, 7)),
             write_picture(tmp_path / "gray.png", mode="L"), write_picture(tmp_path / "palette.png", mode="P"),
             write_picture(tmp_path / "cmyk.tiff", mode="CMYK"), write_picture(tmp_path / "x.ppm")]  # fmt: skip
    for file in files:
        rgb = decode_picture(file, mode="RGB")
        assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3 and rgb.flags.writeable
        np.testing.assert_array_equal(rgb, np.asarray(pil_loader(file)))
        with Image.open(file) as image:
            np.testing.assert_array_equal(decode_picture(file, mode="L")[:, :, 0], np.asarray(image.convert("L")))
    with open_picture(files[1], max_pixels=100) as image:
        assert image.size == (9, 7)


def test_pictures_that_cannot_be_used_are_one_value_error_naming_the_file(tmp_path):
    limit = Image.MAX_IMAGE_PIXELS
    big = write_picture(tmp_path / "big.png", (50, 40))
    with pytest.raises(PictureBombError, match=rf"image file {big} holds 2000 pixels, more than the 1500 allowed"):
        decode_picture(big, mode="RGB", max_pixels=1500)
    assert Image.MAX_IMAGE_PIXELS == limit
    with pytest.raises(PictureError, match=rf"image file not found: {tmp_path / 'gone.png'}"):
        decode_picture(tmp_path / "gone.png", mode="RGB")
    eps = tmp_path / "doc.png"
    eps.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 40 30\nshowpage\n")
    with pytest.raises(PictureError, match=rf"image file {eps} is not a readable image \(expected one of PNG"):
        open_picture(eps, max_pixels=10_000)
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes(write_picture(tmp_path / "whole.jpg", (64, 64)).read_bytes()[:300])
    with pytest.raises(PictureError, match=rf"image file {truncated} is not a readable image \("):
        decode_picture(truncated, mode="RGB")
    assert issubclass(PictureError, ValueError)


def test_nothing_imports_torchvision_at_module_level():
    import subprocess

    code = ("import sys; import modforge.data.images.formats.idx, modforge.data.images.formats.cifar, "
            "modforge.data.images.formats.tiny_imagenet, modforge.data.images.formats.listing, modforge.data.pictures; "
            "print('torchvision' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
