"""The small corpora the Mammoth parity tests read, in the official on-disk formats, with contents
that are a pure function of their sizes (no random generator whose stream could change between
NumPy releases): MNIST's idx files, CIFAR-10/100's python batches, a Tiny-ImageNet-200 tree.

The same writers made the files Mammoth's own dataset classes read when the reference values of
``tests/fixtures/mammoth_parity.json`` were recorded (see ``docs/worlds/continual-benchmarks.md``),
so this module imports only NumPy, Pillow and ``image_fixtures`` at its top: the recording script
imports it outside modforge's environment. The tests at the end check that modforge reads the files
back as written.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from PIL import Image

from image_fixtures import CIFAR10_NAMES, py2_pickle_dumps, write_idx

__all__ = ["PARITY_SIZES", "ParityFiles", "pattern", "write_parity_files"]

PARITY_SIZES = {"mnist": (60, 30), "cifar10": (50, 20), "cifar100": (200, 100), "tiny_imagenet": (200, 100)}
"""(train, test) pictures of each corpus."""


def pattern(count: int, salt: int) -> np.ndarray:
    """``count`` bytes that look random: SplitMix64 of ``0 … count − 1`` offset by ``salt``, top byte kept."""
    with np.errstate(over="ignore"):
        x = np.arange(count, dtype=np.uint64) + np.uint64(salt) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(56)).astype(np.uint8)


def _labels(count: int, classes: int, salt: int) -> np.ndarray:
    """Every class as often as the count allows, in a scattered order (7 is prime to 10, 100 and 200)."""
    return ((np.arange(count) * 7 + salt) % classes).astype(np.int64)


def _rows(images: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), -1))


@dataclasses.dataclass
class ParityFiles:
    """Where each corpus was written (the ``root`` its modforge reader takes) and its arrays: images
    uint8 (MNIST ``[N, 28, 28]``, the others ``[N, H, W, 3]``), labels int64."""

    roots: dict[str, Path]
    arrays: dict[str, dict[str, np.ndarray]]
    tiny_train_files: list[Path]
    tiny_val_files: list[Path]


def write_parity_files(root: str | Path) -> ParityFiles:
    """Write the four corpora below ``root``: ``mnist/``, ``cifar10/``, ``cifar100/``, ``tiny_imagenet/``."""
    root = Path(root)
    arrays: dict[str, dict[str, np.ndarray]] = {}
    roots = {name: root / name for name in PARITY_SIZES}

    n_train, n_test = PARITY_SIZES["mnist"]
    mnist = {"train_images": pattern(n_train * 784, 1).reshape(n_train, 28, 28), "train_labels": _labels(n_train, 10, 3),
             "test_images": pattern(n_test * 784, 2).reshape(n_test, 28, 28), "test_labels": _labels(n_test, 10, 5)}  # fmt: skip
    for name, key in (("train-images-idx3-ubyte", "train_images"), ("train-labels-idx1-ubyte", "train_labels"),
                      ("t10k-images-idx3-ubyte", "test_images"), ("t10k-labels-idx1-ubyte", "test_labels")):  # fmt: skip
        value = mnist[key]
        write_idx(roots["mnist"] / name, value if value.dtype == np.uint8 else value.astype(np.uint8))
    arrays["mnist"] = mnist

    for corpus, classes, salt in (("cifar10", 10, 10), ("cifar100", 100, 20)):
        n_train, n_test = PARITY_SIZES[corpus]
        data = {"train_images": pattern(n_train * 3072, salt).reshape(n_train, 32, 32, 3),
                "train_labels": _labels(n_train, classes, salt + 1),
                "test_images": pattern(n_test * 3072, salt + 2).reshape(n_test, 32, 32, 3),
                "test_labels": _labels(n_test, classes, salt + 3)}  # fmt: skip
        arrays[corpus] = data
        if corpus == "cifar10":
            folder = roots[corpus] / "cifar-10-batches-py"
            folder.mkdir(parents=True, exist_ok=True)
            for k, part in enumerate(np.array_split(np.arange(n_train), 5), 1):
                batch = {b"batch_label": f"training batch {k} of 5".encode(),
                         b"labels": data["train_labels"][part].tolist(), b"data": _rows(data["train_images"][part]),
                         b"filenames": [f"img_{i}.png".encode() for i in part]}  # fmt: skip
                (folder / f"data_batch_{k}").write_bytes(py2_pickle_dumps(batch))
            test = {b"batch_label": b"testing batch 1 of 1", b"labels": data["test_labels"].tolist(),
                    b"data": _rows(data["test_images"]), b"filenames": [f"t_{i}.png".encode() for i in range(n_test)]}  # fmt: skip
            (folder / "test_batch").write_bytes(py2_pickle_dumps(test))
            meta = {b"num_cases_per_batch": n_train // 5, b"label_names": [n.encode() for n in CIFAR10_NAMES],
                    b"num_vis": 3072}  # fmt: skip
            (folder / "batches.meta").write_bytes(py2_pickle_dumps(meta))
        else:
            folder = roots[corpus] / "cifar-100-python"
            folder.mkdir(parents=True, exist_ok=True)
            for split in ("train", "test"):
                fine = data[f"{split}_labels"]
                batch = {b"filenames": [f"{split}_{i}.png".encode() for i in range(len(fine))],
                         b"batch_label": f"{split}ing batch 1 of 1".encode(), b"fine_labels": fine.tolist(),
                         b"coarse_labels": (fine // 5).tolist(), b"data": _rows(data[f"{split}_images"])}  # fmt: skip
                (folder / split).write_bytes(py2_pickle_dumps(batch))
            meta = {b"fine_label_names": [f"fine_{k:02d}".encode() for k in range(100)],
                    b"coarse_label_names": [f"coarse_{k:02d}".encode() for k in range(20)]}  # fmt: skip
            (folder / "meta").write_bytes(py2_pickle_dumps(meta))

    # Tiny-ImageNet-200: 200 ids (wnids.txt deliberately not sorted), one training JPEG per class, 100 val JPEGs
    n_train, n_test = PARITY_SIZES["tiny_imagenet"]
    folder = roots["tiny_imagenet"] / "tiny-imagenet-200"
    wnids = [f"n{9_000_000 - 1_000 * ((k * 37) % 200):08d}" for k in range(200)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wnids.txt").write_text("".join(f"{w}\n" for w in wnids))
    (folder / "words.txt").write_text("n00000001\tentity\n" + "".join(f"{w}\tthing {k}, alias\n" for k, w in enumerate(wnids)))
    train_files, train_labels = [], []
    for label, wnid in enumerate(wnids):
        images = folder / "train" / wnid / "images"
        images.mkdir(parents=True, exist_ok=True)
        picture = pattern(64 * 64 * 3, 1000 + label).reshape(64, 64, 3)
        file = images / f"{wnid}_0.JPEG"
        Image.fromarray(picture, mode="RGB").save(file, format="JPEG", quality=95)
        (folder / "train" / wnid / f"{wnid}_boxes.txt").write_text(f"{file.name}\t0\t0\t63\t63\n")
        train_files.append(file)
        train_labels.append(label)
    (folder / "val" / "images").mkdir(parents=True, exist_ok=True)
    lines, val = [], []
    val_labels = _labels(n_test, 200, 11)
    for i, label in enumerate(val_labels):
        file = folder / "val" / "images" / f"val_{i}.JPEG"
        Image.fromarray(pattern(64 * 64 * 3, 5000 + i).reshape(64, 64, 3), mode="RGB").save(file, format="JPEG",
                                                                                            quality=95)
        lines.append(f"{file.name}\t{wnids[label]}\t1\t2\t62\t63\n")
        val.append((file, int(label)))
    (folder / "val" / "val_annotations.txt").write_text("".join(lines))
    val.sort(key=lambda item: str(item[0]))  # modforge lists the val pictures by file name
    arrays["tiny_imagenet"] = {"train_labels": np.asarray(train_labels, dtype=np.int64),
                               "test_labels": np.asarray([label for _, label in val], dtype=np.int64)}  # fmt: skip
    return ParityFiles(roots, arrays, train_files, [file for file, _ in val])


# ----------------------------------------------------------------------------- the files read back
def test_the_parity_files_read_back_as_written(tmp_path):
    import torch

    import modforge as mf

    files = write_parity_files(tmp_path)
    mnist = mf.DATASETS.build({"type": "mnist", "args": {"root": str(files.roots["mnist"]), "val_fraction": 0.0}})
    assert torch.equal(mnist.train.source.pictures[:, 0], torch.from_numpy(files.arrays["mnist"]["train_images"]))
    assert mnist.test.labels.tolist() == files.arrays["mnist"]["test_labels"].tolist()
    for corpus in ("cifar10", "cifar100"):
        splits = mf.DATASETS.build({"type": corpus, "args": {"root": str(files.roots[corpus]), "val_fraction": 0.0}})
        expected = torch.from_numpy(files.arrays[corpus]["train_images"]).permute(0, 3, 1, 2)
        assert torch.equal(splits.train.source.pictures, expected)
        assert splits.train.labels.tolist() == files.arrays[corpus]["train_labels"].tolist()
    tiny = mf.DATASETS.build({"type": "tiny_imagenet", "args": {"root": str(files.roots["tiny_imagenet"])}})
    assert tiny.train.labels.tolist() == list(range(200)) and tiny.num_classes == 200
    assert tiny.test.labels.tolist() == files.arrays["tiny_imagenet"]["test_labels"].tolist()
    assert [Path(f) for f in tiny.test.source.files] == files.tiny_val_files
    assert pattern(8, 3).tolist() == [6, 248, 152, 156, 219, 59, 14, 230]  # the contents never change
