"""The generic sequence builders (``seq``, ``perm``, ``rot``) over any classification dataset — tensors or
pictures — and the digits presets built on them: ``seq_digits``, ``perm_digits`` and ``rot_digits`` give
exactly the tasks they gave before the builders existed (recorded in ``fixtures/continual_digits_legacy.json``
from the former implementation), so the Seq-Digits results table stands; the shipped Mammoth configs carry
Mammoth's published hyper-parameters and run."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import pytest
import torch
import yaml

import modforge as mf
from image_fixtures import write_cifar_python, write_mnist_family
from modforge.continual.benchmarks import ContinualSplits, concat_splits
from modforge.data.images.dataset import ImageDataset, JoinedImageDataset
from run_configs import SGD, mlp, run_config

FIXTURES = Path(__file__).parent / "fixtures"
MAMMOTH_CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "continual" / "mammoth"
LEGACY = json.loads((FIXTURES / "continual_digits_legacy.json").read_text())


def _digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


def _build(spec: dict, seed: int = 0):
    return mf.DATASETS.build(spec, path="data", seed=seed)


# ----------------------------------------------------------------------------- the digits presets, unchanged
@pytest.mark.parametrize("case", LEGACY["cases"], ids=[f"{c['type']}-{i}" for i, c in enumerate(LEGACY["cases"])])
def test_digits_presets_give_the_tasks_they_gave_before(case):
    splits = _build({"type": case["type"], "args": case["args"]}, case["seed"])
    assert (splits.setting, splits.class_order, splits.class_names) == (case["setting"], case["class_order"],
                                                                        case["class_names"])  # fmt: skip
    assert (splits.num_classes, splits.in_dim, splits.layout.value, list(splits.input_shape)) == \
        (case["num_classes"], case["in_dim"], case["layout"], case["input_shape"])  # fmt: skip
    assert (splits.normalisation, splits.image) == (case["normalisation"], case["image"])
    assert len(splits.tasks) == len(case["tasks"])
    for task, expected in zip(splits.tasks, case["tasks"], strict=True):
        assert task.classes == expected["classes"]
        for name in ("train", "val", "test"):
            data, want = getattr(task, name), expected[name]
            assert (len(data), _digest(data.ids), _digest(data.labels), _digest(data.inputs)) == \
                (want["len"], want["ids_sha256"], want["labels_sha256"], want["inputs_sha256"]), (name, task.task)  # fmt: skip
    for name in ("train", "val", "test"):
        data, want = getattr(splits, name), case[name]
        assert (len(data), _digest(data.ids), _digest(data.labels), _digest(data.inputs)) == \
            (want["len"], want["ids_sha256"], want["labels_sha256"], want["inputs_sha256"]), name  # fmt: skip


def test_the_generic_builders_over_digits_are_the_digits_presets():
    for seed in (0, 3):
        preset = _build({"type": "seq_digits", "args": {"as_image": False}}, seed)
        generic = _build({"type": "seq", "args": {"dataset": {"type": "digits", "args": {"as_image": False}},
                                                  "classes_per_task": 2, "class_order": "seeded"}}, seed)  # fmt: skip
        assert generic.class_order == preset.class_order
        for a, b in zip(generic.tasks, preset.tasks, strict=True):
            assert all(torch.equal(getattr(a, s).inputs, getattr(b, s).inputs) and
                       torch.equal(getattr(a, s).labels, getattr(b, s).labels) for s in ("train", "val", "test"))  # fmt: skip
    perm = _build({"type": "perm", "args": {"dataset": {"type": "digits", "args": {"as_image": False}}, "tasks": 4}}, 2)
    legacy = _build({"type": "perm_digits", "args": {"tasks": 4}}, 2)
    assert all(torch.equal(a.train.inputs, b.train.inputs) for a, b in zip(perm.tasks, legacy.tasks, strict=True))
    rot = _build({"type": "rot", "args": {"dataset": "digits", "tasks": 3, "max_angle": 90.0}}, 1)
    legacy = _build({"type": "rot_digits", "args": {"tasks": 3, "max_angle": 90.0}}, 1)
    assert all(torch.equal(a.test.inputs, b.test.inputs) for a, b in zip(rot.tasks, legacy.tasks, strict=True))


# ----------------------------------------------------------------------------- class-incremental over pictures
@pytest.fixture
def mnist_root(tmp_path):
    write_mnist_family(tmp_path / "mnist", n_train=80, n_test=40)
    return str(tmp_path / "mnist")


def _seq_mnist(root: str, seed: int = 0, **args):
    spec = {"dataset": {"type": "mnist", "args": {"root": root, "val_fraction": 0.0}}, "classes_per_task": 2, **args}
    return _build({"type": "seq", "args": spec}, seed)


def test_seq_over_pictures_renumbers_classes_in_the_order_asked(mnist_root):
    base = _build({"type": "mnist", "args": {"root": mnist_root, "val_fraction": 0.0}})
    natural = _seq_mnist(mnist_root)
    assert isinstance(natural, ContinualSplits) and natural.class_order == list(range(10))
    assert isinstance(natural.tasks[0].train, ImageDataset) and len(natural.tasks) == 5
    for t, task in enumerate(natural.tasks):
        keep = (base.train.labels // 2) == t
        assert task.train.ids.tolist() == keep.nonzero().reshape(-1).tolist()  # the official order, ids kept
        assert task.train.labels.tolist() == base.train.labels[keep].tolist()
        assert set(task.test.labels.tolist()) <= set(task.classes)
    given = _seq_mnist(mnist_root, class_order=[9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
    first = given.tasks[0].train
    assert set(base.train.labels[first.ids].tolist()) <= {9, 8} and set(first.labels.tolist()) <= {0, 1}
    assert torch.equal(base.train.labels[first.ids], 9 - first.labels)  # renumbered: 9 → 0, 8 → 1
    assert given.class_names == [base.class_names[c] for c in range(9, -1, -1)] and given.class_names[0] == "9 - nine"
    assert torch.equal(first.picture(0), base.train.picture(int(first.ids[0])))  # the same picture, new label
    seeded = _seq_mnist(mnist_root, seed=4, class_order="seeded")
    assert seeded.class_order == torch.randperm(10, generator=torch.Generator().manual_seed(4)).tolist()
    mammoth = _seq_mnist(mnist_root, seed=4, class_order="mammoth")
    import numpy as np

    perm = np.random.RandomState(4).permutation(10)  # Mammoth: class c becomes label perm[c]
    assert [mammoth.class_order.index(c) for c in range(10)] == perm.tolist()


def test_seq_refuses_what_it_cannot_build(mnist_root):
    with pytest.raises(mf.ConfigError, match="do not divide into tasks of 3"):
        _seq_mnist(mnist_root, classes_per_task=3)
    with pytest.raises(mf.ConfigError, match="class_order must list each of the 10 classes once"):
        _seq_mnist(mnist_root, class_order=[0, 1])
    with pytest.raises(mf.ConfigError, match="already a task sequence"):
        _build({"type": "seq", "args": {"dataset": "seq_digits", "classes_per_task": 2}})
    with pytest.raises(mf.ConfigError, match="no dataset named 'mnsit'"):
        _build({"type": "seq", "args": {"dataset": {"type": "mnsit", "args": {"root": mnist_root}}, "classes_per_task": 2}})
    with pytest.raises(mf.ConfigError, match="'digits' takes none"):
        mf.DATASETS.build({"type": "seq", "args": {"dataset": "digits", "classes_per_task": 2}}, seed=0,
                          transforms={"train": ["random_horizontal_flip"]})  # fmt: skip
    with pytest.raises(mf.ConfigError, match="seeds 0 … 2\\*\\*32 − 1"):
        _seq_mnist(mnist_root, seed=-1, class_order="mammoth")


def test_data_transforms_reach_the_sequences_dataset(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)
    write_cifar_python(tmp_path, "cifar10", n_train=40, n_test=10)
    transforms = {"train": [{"type": "random_crop", "args": {"size": 32, "padding": 4}}, "random_horizontal_flip"]}
    splits = mf.DATASETS.build({"type": "seq", "args": {"dataset": {"type": "cifar10", "args": {"root": str(tmp_path)}},
                                                        "classes_per_task": 5}}, seed=1, transforms=transforms)  # fmt: skip
    train = splits.tasks[1].train
    assert [type(t).__name__ for t in train.train_pipeline.before] == ["RandomCrop", "RandomHorizontalFlip"]
    assert train.train and not splits.tasks[1].test.train
    assert not torch.equal(train.picture(0, epoch=0), train.picture(0, epoch=1))  # augmented per epoch
    assert len(splits.val) + len(splits.train) == 40  # cifar10's own val carve, split by task too


def test_flatten_serves_vectors_for_an_mlp(mnist_root):
    splits = _seq_mnist(mnist_root, flatten=True)
    assert splits.input_shape == (784,) and splits.in_dim == 784 and splits.layout.value == "vector"
    batch = splits.tasks[2].train.__getitems__([0, 1, 2])
    assert batch["input"].shape == (3, 784)
    assert torch.equal(batch["input"][1], splits.tasks[2].train.picture(1))


# ----------------------------------------------------------------------------- domain-incremental over pictures
def test_perm_and_rot_over_pictures_transform_each_task_as_read(mnist_root):
    base = _build({"type": "mnist", "args": {"root": mnist_root, "val_fraction": 0.0}})
    perm = _build({"type": "perm", "args": {"dataset": {"type": "mnist", "args": {"root": mnist_root,
                                                                                  "val_fraction": 0.0}},
                                            "tasks": 3, "draws": "mammoth"}}, seed=7)  # fmt: skip
    assert perm.setting == "domain-il" and perm.input_shape == (1, 28, 28)
    import numpy as np

    state = np.random.RandomState(7)
    for task in perm.tasks:
        order = torch.from_numpy(state.permutation(784))
        assert torch.equal(task.test.picture(3).reshape(-1), base.test.picture(3).reshape(-1)[order])
        assert torch.equal(task.train.ids, base.train.ids) and torch.equal(task.train.labels, base.train.labels)
    assert isinstance(perm.train, JoinedImageDataset) and len(perm.train) == 3 * len(base.train)
    rot = _build({"type": "rot", "args": {"dataset": {"type": "mnist", "args": {"root": mnist_root}}, "tasks": 2,
                                          "min_angle": 90.0, "max_angle": 90.0, "flatten": True}}, seed=0)  # fmt: skip
    turned = rot.tasks[0].test.picture(0).reshape(1, 28, 28)
    quarter = torch.rot90(base.test.source.read(0), 1, dims=(1, 2))  # 90° anticlockwise, exactly a quarter turn
    assert torch.equal(turned, base.test.eval_pipeline.to_float(quarter))
    assert rot.input_shape == (784,) and rot.tasks[1].train.__getitems__([0, 1])["input"].shape == (2, 784)


def test_joined_tasks_serve_every_sample_as_its_task_does(mnist_root):
    perm = _build({"type": "perm", "args": {"dataset": {"type": "mnist", "args": {"root": mnist_root}}, "tasks": 3}}, 1)
    joined = perm.train
    n = len(perm.tasks[0].train)
    positions = [2 * n + 5, 0, n + 1, 2 * n + 5, n - 1]
    batch = joined.__getitems__(positions)
    expected = [perm.tasks[p // n].train.picture(p % n) for p in positions]
    assert torch.equal(batch["input"], torch.stack(expected))
    assert batch["label"].tolist() == [int(perm.tasks[p // n].train.labels[p % n]) for p in positions]
    part = joined.subset([n + 1, 2 * n + 5])
    assert torch.equal(part.__getitems__([0, 1])["input"], batch["input"][[2, 0]])
    again = pickle.loads(pickle.dumps(joined))  # what a spawned loader worker receives
    assert torch.equal(again.__getitems__(positions)["input"], batch["input"])
    cumulative = concat_splits([t.train for t in perm.tasks[:2]])
    assert len(cumulative) == 2 * n and torch.equal(cumulative.picture(n + 1), expected[2])
    classes = _seq_mnist(mnist_root)
    joint = concat_splits([t.train for t in classes.tasks[:3]])  # class-IL tasks share one pipeline: one split
    assert isinstance(joint, ImageDataset) and joint.ids.tolist() == sum((t.train.ids.tolist() for t in classes.tasks[:3]), [])


RUN = run_config("{type: seq, args: {dataset: {type: mnist, args: {root: ROOT, val_fraction: 0.0}}, "
                 "classes_per_task: 2, flatten: true}, batch_size: 16}", mlp(32),
                 train=dict(optimizer=SGD, num_threads=1, progress="never"),
                 after="continual: {algorithm: joint, epochs_per_task: 1}\n")


def test_a_continual_run_over_pictures(cli, write, mnist_root, tmp_path):
    config = write("seq.yaml", RUN.replace("ROOT", mnist_root))
    res = cli("train", str(config), "--run-dir", "joint")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "joint" / "summary.json").read_text())
    assert summary["tasks"] == 5 and summary["params"] == 784 * 32 + 32 + 330
    res = cli("train", str(config), "data.type=perm", "data.args.classes_per_task=null",
              "data.args={dataset: {type: mnist, args: {root: " + mnist_root + "}}, tasks: 3, flatten: true}",
              "continual.algorithm={type: der, args: {buffer_size: 20}}", "--run-dir", "perm")  # fmt: skip
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "perm" / "summary.json").read_text())
    assert summary["setting"] == "domain-il" and summary["tasks"] == 3
    res = cli("test", "perm")
    assert res.code == 0, res.err


# ----------------------------------------------------------------------------- Mammoth's configs
BEST = json.loads((FIXTURES / "mammoth_parity.json").read_text())["best_args"]
STEMS = {"seq_mnist": "seq-mnist", "seq_cifar10": "seq-cifar10", "seq_cifar100": "seq-cifar100",
         "seq_tinyimg": "seq-tinyimg", "perm_mnist": "perm-mnist", "rot_mnist": "rot-mnist"}  # fmt: skip
DATASET_DEFAULTS = {"seq-cifar100": {"batch_size": 32, "n_epochs": 50}}  # what its best args leave to the dataset


def _resolved(cli, path: Path, *overrides: str) -> dict:
    res = cli("config", str(path), *overrides)
    assert res.code == 0, res.err
    return yaml.safe_load(res.out)


def test_every_published_hyper_parameter_set_is_a_shipped_config(cli):
    shipped = {p.stem for p in MAMMOTH_CONFIGS.glob("*.yaml")}
    expected = set(STEMS) | {f"{s}_joint" for s in STEMS}
    for stem, name in STEMS.items():
        expected |= {f"{stem}_{method}_{buffer}" for method in ("er", "der", "derpp") for buffer in BEST[name][method]}
    assert shipped == expected
    for stem, name in STEMS.items():
        for method, sets in BEST[name].items():
            for buffer, published in sets.items():
                values = {**DATASET_DEFAULTS.get(name, {}), **published}
                cfg = _resolved(cli, MAMMOTH_CONFIGS / (f"{stem}.yaml" if method == "sgd" else f"{stem}_{method}_{buffer}.yaml"))
                optimizer = cfg["train"]["optimizer"]
                assert optimizer["type"] == "sgd" and optimizer["args"]["lr"] == values["lr"]
                assert optimizer["args"]["momentum"] == values.get("optim_mom", 0.0)
                assert optimizer["args"]["weight_decay"] == values.get("optim_wd", 0.0)
                assert cfg["data"]["batch_size"] == values["batch_size"]
                assert cfg["continual"]["epochs_per_task"] == values["n_epochs"]
                algorithm = cfg["continual"]["algorithm"]
                assert algorithm["type"] == method
                args = algorithm["args"]
                if method != "sgd":
                    assert args["buffer_size"] == int(buffer)
                    assert args.get("minibatch_size") == values.get("minibatch_size")
                for key in ("alpha", "beta"):
                    assert args.get(key) == values.get(key), (stem, method, buffer, key)
        base = _resolved(cli, MAMMOTH_CONFIGS / f"{stem}.yaml")
        assert base["data"]["type"] == stem and base["model"]["head"]["type"] == "linear"
        if "mnist" in stem:  # MNISTMLP: Xavier-uniform linear layers, classifier included
            assert base["model"]["backbone"] == {"type": "mlp", "args": {"hidden_dims": [100, 100],
                                                                         "weight_init": "xavier_uniform"}}  # fmt: skip
            assert base["model"]["head"]["args"] == {"weight_init": "xavier_uniform"}
        else:  # ResNet18 with PyTorch's default initialisation
            assert base["model"]["backbone"] == {"type": "resnet18", "args": {"conv_init": "pytorch"}}
        joint = _resolved(cli, MAMMOTH_CONFIGS / f"{stem}_joint.yaml")
        assert joint["continual"]["algorithm"]["type"] == "joint" and joint["train"] == base["train"]
    cifar100 = _resolved(cli, MAMMOTH_CONFIGS / "seq_cifar100.yaml")
    assert cifar100["train"]["scheduler"]["args"] == {"milestones": [35, 45], "gamma": 0.1}


def test_a_shipped_config_runs(cli, tmp_path):
    from test_continual_benchmarks_files import write_parity_files

    files = write_parity_files(tmp_path / "files")
    res = cli("train", str(MAMMOTH_CONFIGS / "seq_mnist_derpp_500.yaml"), f"data.args.root={files.roots['mnist']}",
              "train.progress=never", "--run-dir", "run")  # fmt: skip
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["params"] == 89_610 and summary["tasks"] == 5  # Mammoth's MNISTMLP with its 10 outputs
