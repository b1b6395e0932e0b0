"""Mammoth parity: modforge's presets give the task streams Mammoth's own dataset classes give on the same
files — the samples of every task (their indexes in the official files, in Mammoth's order), their labels,
the transformed training tensors for the same random draws, the test tensors, the Perm-MNIST permutations
and Rot-MNIST angles, the normalisation constants — and its backbones compute what Mammoth's compute.

The reference values (``fixtures/mammoth_parity.json``) were recorded by ``fixtures/record_mammoth_parity.py``
running Mammoth's classes (the commit is in the file) on the files ``test_continual_benchmarks_files.py``
writes; these tests need neither Mammoth nor a network. A training tensor was recorded with torch's global
generator seeded, right before Mammoth read the sample, by modforge's per-sample seed for (seed, epoch,
sample index): Mammoth's pipeline (torchvision v1 on PIL pictures) and modforge's (v2 on uint8 tensors)
then draw the same crop and flip, and the tensors must be bit for bit equal.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import modforge as mf
from modforge.continual.benchmarks import task_angles, task_permutations
from modforge.continual.mammoth import MAMMOTH_BENCHMARKS
from test_continual_benchmarks_files import pattern, write_parity_files

pytest.importorskip("torchvision")

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "mammoth_parity.json").read_text())
PRESET = {"seq-mnist": "seq_mnist", "seq-cifar10": "seq_cifar10", "seq-cifar100": "seq_cifar100",
          "seq-tinyimg": "seq_tinyimg", "perm-mnist": "perm_mnist", "rot-mnist": "rot_mnist"}  # fmt: skip
ROOT_OF = {"seq_mnist": "mnist", "seq_cifar10": "cifar10", "seq_cifar100": "cifar100", "seq_tinyimg": "tiny_imagenet",
           "perm_mnist": "mnist", "rot_mnist": "mnist"}  # fmt: skip


def _digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().to(torch.float32).contiguous().numpy().tobytes()).hexdigest()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_parity_files(tmp_path_factory.mktemp("parity"))


def _build(files, record: dict):
    name = PRESET[record["name"]]
    args = {"root": str(files.roots[ROOT_OF[name]])}
    if record["args"].get("permute_classes"):
        args["class_order"] = "mammoth"
    if "validation" in record["args"]:
        args["validation"] = record["args"]["validation"]
    return mf.DATASETS.build({"type": name, "args": args}, path="data", seed=record["seed"])


def _decoder_as_recorded(files) -> bool:
    """Whether Pillow decodes the Tiny-ImageNet JPEGs as it did when the reference was recorded."""
    from PIL import Image

    picture = np.asarray(Image.open(files.tiny_train_files[0]).convert("RGB"), dtype=np.float32) / 255.0
    return hashlib.sha256(picture.tobytes()).hexdigest() == REFERENCE["raw"]["tiny_imagenet_train_0"]


STREAMS = REFERENCE["streams"]


@pytest.mark.parametrize("record", STREAMS, ids=[f"{r['name']}-seed{r['seed']}-{'-'.join(map(str, r['args']))}"
                                                 for r in STREAMS])  # fmt: skip
def test_task_streams_equal_mammoths(files, record):
    splits = _build(files, record)
    assert len(splits.tasks) == len(record["tasks"])
    assert splits.setting == record["setting"]
    if "class_order_mammoth" in record:  # Mammoth maps class c to label perm[c]; modforge lists the classes in order
        assert [splits.class_order.index(c) for c in range(len(splits.class_order))] == record["class_order_mammoth"]
    validation = "validation" in record["args"]
    tensors = record["name"] != "seq-tinyimg" or _decoder_as_recorded(files)
    for task, expected in zip(splits.tasks, record["tasks"], strict=True):
        held = task.val if validation else task.test  # Mammoth's --validation carve replaces its test set
        assert task.train.ids.tolist() == expected["train_ids"]
        assert task.train.labels.tolist() == expected["train_labels"]
        assert held.ids.tolist() == expected["test_ids"] and held.labels.tolist() == expected["test_labels"]
        if validation:
            assert task.test is None
        if not tensors:
            continue
        for sample in expected["train_tensors"]:
            assert int(task.train.ids[sample["position"]]) == sample["id"]
            image = task.train.picture(sample["position"], epoch=sample["epoch"])
            assert _digest(image) == sample["sha256"], (sample, float(image.double().sum()))
        for sample in expected["test_tensors"]:
            image = held.picture(sample["position"])
            assert _digest(image) == sample["sha256"], (sample, float(image.double().sum()))
    if not tensors:
        pytest.skip("Pillow decodes the fixture JPEGs differently from when the reference was recorded: "
                    "samples and labels compared, tensors not")  # fmt: skip


def test_the_batch_path_serves_what_the_sample_path_serves(files):
    """Batches without random transforms are converted in one operation (rotation, permutation and
    flattening included): the same tensors as one sample at a time."""
    for name in ("seq_mnist", "perm_mnist", "rot_mnist", "seq_cifar10"):
        splits = mf.DATASETS.build({"type": name, "args": {"root": str(files.roots[ROOT_OF[name]])}}, seed=0)
        for task in splits.tasks[:3]:
            batch = task.test.__getitems__(list(range(len(task.test))))
            assert torch.equal(batch["input"], torch.stack([task.test.picture(i) for i in range(len(task.test))]))
            assert torch.equal(batch["label"], task.test.labels) and torch.equal(batch["index"], task.test.ids)


@pytest.mark.parametrize("record", [r for r in STREAMS if r["name"] in ("perm-mnist", "rot-mnist")],
                         ids=lambda r: f"{r['name']}-seed{r['seed']}")  # fmt: skip
def test_permutations_and_angles_are_drawn_as_mammoth_draws_them(record):
    if record["name"] == "perm-mnist":
        drawn = task_permutations(784, len(record["tasks"]), record["seed"], "mammoth")
        assert [p.tolist() for p in drawn] == [t["permutation"] for t in record["tasks"]]
    else:
        assert task_angles(len(record["tasks"]), record["seed"], 0.0, 180.0, "mammoth") == \
            [t["degrees"] for t in record["tasks"]]  # fmt: skip


def test_constants_and_pipelines_are_mammoths(files):
    constants = REFERENCE["constants"]
    for name, spec in MAMMOTH_BENCHMARKS.items():
        theirs = constants[spec["mammoth"]]
        splits = mf.DATASETS.build({"type": name, "args": {"root": str(files.roots[ROOT_OF[name]])}}, seed=0)
        assert len(splits.tasks) == theirs["N_TASKS"]
        assert all(len(t.classes) == theirs["N_CLASSES_PER_TASK"] for t in splits.tasks)
        pipeline = splits.tasks[0].train.train_pipeline
        if theirs["MEAN"]:
            assert spec["mean"] == tuple(theirs["MEAN"]) and spec["std"] == tuple(theirs["STD"])
            assert pipeline.mean.flatten().tolist() == torch.tensor(theirs["MEAN"]).tolist()
            assert pipeline.std.flatten().tolist() == torch.tensor(theirs["STD"]).tolist()
            size = theirs["SIZE"][0]
            crop, flip = pipeline.before
            assert type(crop).__name__ == "RandomCrop" and list(crop.size) == [size, size] and crop.padding == [4, 4, 4, 4]
            assert f"RandomCrop(size=({size}, {size}), padding=4)" in theirs["TRANSFORM"]
            assert type(flip).__name__ == "RandomHorizontalFlip" and flip.p == 0.5 and "RandomHorizontalFlip(p=0.5)" in \
                theirs["TRANSFORM"]  # fmt: skip
            assert not splits.tasks[0].test.eval_pipeline.random
        else:  # MNIST: ToTensor only
            assert theirs["TRANSFORM"] == "None" and not pipeline.random
            assert pipeline.mean.flatten().tolist() == [0.0] and pipeline.std.flatten().tolist() == [1.0]
            assert splits.input_shape == (784,) and splits.in_dim == 784  # flattened for the MLP


def _fixed_weights(parameters: list[tuple[str, torch.Tensor]], buffers: list[tuple[str, torch.Tensor]]) -> None:
    """The weights the recording gave Mammoth's backbones, by position (record_mammoth_parity.fixed_weights)."""
    for salt, (name, tensor) in enumerate([*parameters, *buffers]):
        values = torch.from_numpy(pattern(tensor.numel(), 7000 + salt).astype(np.float32)).reshape(tensor.shape)
        values = values / 255.0 if "running_var" in name else (values / 255.0 - 0.5) * 0.2
        with torch.no_grad():
            tensor.copy_(values)


@pytest.mark.parametrize(("name", "model", "in_dim", "classes"), [
    ("mnistmlp_10", {"backbone": {"type": "mlp", "args": {"hidden_dims": [100, 100]}}, "head": "linear"}, 784, 10),
    ("resnet18_10", {"backbone": "resnet18", "head": "linear"}, 3, 10),
    ("resnet18_200", {"backbone": "resnet18", "head": "linear"}, 3, 200),
])  # fmt: skip
def test_backbones_compute_what_mammoths_compute(name, model, in_dim, classes):
    """Mammoth's MNISTMLP is ``mlp`` [100, 100] + ``linear``; its ResNet18 (BasicBlock, 3×3 stem, no max-pool)
    is ``resnet18`` (stem 'cifar', its default) + ``linear``: the same parameter count, and with the same
    weights the same logits. (Their initialisations differ: see the benchmarks page.)"""
    theirs = REFERENCE["backbones"][name]
    shape = theirs["input_shape"]
    net = mf.build_model(model, in_dim=in_dim, num_classes=classes,
                         input_shape=(784,) if in_dim == 784 else tuple(shape[1:]))  # fmt: skip
    assert sum(p.numel() for p in net.parameters()) == theirs["params"]
    parameters = list(net.named_parameters())
    assert len(parameters) == len(theirs["parameter_names"])
    for (ours, _), their in zip(parameters, theirs["parameter_names"], strict=True):  # same roles in the same order
        assert ours.rsplit(".", 1)[-1] == their.rsplit(".", 1)[-1], (ours, their)
    _fixed_weights(parameters, [(n, b) for n, b in net.named_buffers() if "running" in n])
    net.eval()
    x = torch.from_numpy(pattern(int(np.prod(shape)), 9000).astype(np.float32)).reshape(shape) / 255.0
    with torch.no_grad():
        logits = net(x.reshape(len(x), -1) if in_dim == 784 else x)
    assert torch.allclose(logits, torch.tensor(theirs["logits"]), rtol=1e-4, atol=1e-5)
