"""The registered image datasets: torchvision's tensors, configs, training runs, resume, show, predict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from image_fixtures import write_cifar_python, write_image_folder, write_mnist_family, write_picture
from modforge.core.registries import DATASETS
from train_processes import kill_and_resume

pytest.importorskip("torchvision")
from torchvision import datasets  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

from run_configs import cnn, run_config

VISION = Path(__file__).resolve().parents[1] / "configs" / "vision"


def _reference_transform(mean, std):
    return v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)])


def _whole(split) -> dict:
    return split.__getitems__(list(range(len(split))))


def test_mnist_splits_are_torchvisions_tensors_normalised_by_the_training_statistics(tmp_path):
    write_mnist_family(tmp_path / "MNIST" / "raw", 30, 12)
    splits = DATASETS.build({"type": "mnist", "args": {"root": str(tmp_path), "val_fraction": 0.0}})
    mean, std = splits.normalisation["mean"], splits.normalisation["std"]
    reference = datasets.MNIST(str(tmp_path), train=False, transform=_reference_transform(mean, std))
    batch = _whole(splits.test)
    assert torch.allclose(batch["input"], torch.stack([reference[i][0] for i in range(len(reference))]), atol=1e-6)
    assert batch["label"].tolist() == reference.targets.tolist()
    raw = datasets.MNIST(str(tmp_path), train=True).data.double() / 255
    assert mean == [round(float(raw.mean()), 4)] and std == [round(float(raw.std()), 4)]
    assert splits.class_names == reference.classes and splits.input_shape == (1, 28, 28)


def test_cifar_test_split_is_torchvisions_and_val_is_carved_from_train(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)  # generated files: no official MD5s
    write_cifar_python(tmp_path, "cifar10", n_train=60, n_test=10)
    splits = DATASETS.build({"type": "cifar10", "args": {"root": str(tmp_path), "val_fraction": 0.2}}, seed=4)
    reference = datasets.CIFAR10(str(tmp_path), train=False,
                                 transform=_reference_transform(splits.normalisation["mean"], splits.normalisation["std"]))  # fmt: skip
    batch = _whole(splits.test)
    assert torch.allclose(batch["input"], torch.stack([reference[i][0] for i in range(10)]), atol=1e-6)
    assert (len(splits.train), len(splits.val)) == (48, 12)
    ids = sorted(splits.train.ids.tolist() + splits.val.ids.tolist())
    assert ids == list(range(60))  # a partition of the official training pictures
    again = DATASETS.build({"type": "cifar10", "args": {"root": str(tmp_path), "val_fraction": 0.2}}, seed=4)
    assert torch.equal(again.val.ids, splits.val.ids)  # reproducible carve


def test_image_folder_streams_files_as_torchvisions_image_folder_reads_them(tmp_path):
    write_image_folder(tmp_path / "train", {"cat": 4, "dog": 4}, size=(9, 7))
    write_image_folder(tmp_path / "test", {"cat": 2, "dog": 2}, size=(9, 7), seed=50)
    splits = DATASETS.build({"type": "image_folder", "args": {"root": str(tmp_path / "train"),
                                                              "test_root": str(tmp_path / "test")}})  # fmt: skip
    reference = datasets.ImageFolder(str(tmp_path / "test"),
                                     transform=_reference_transform(splits.normalisation["mean"], splits.normalisation["std"]))  # fmt: skip
    batch = _whole(splits.test)
    assert torch.allclose(batch["input"], torch.stack([reference[i][0] for i in range(4)]), atol=1e-6)
    assert splits.class_names == ["cat", "dog"] and splits.input_shape == (3, 7, 9)
    assert all(isinstance(f, Path) for f in splits.train.source.files)  # listed, not decoded up front


@pytest.mark.parametrize("path", sorted(p for p in VISION.glob("*.yaml") if p.stem != "base"), ids=lambda p: p.stem)
def test_every_vision_config_validates(cli, path):
    init = (yaml.safe_load(path.read_text()).get("model") or {}).get("init")
    absent = init is not None and not (path.parent / init["path"]).is_file()  # published weights the user fetches
    result = cli("config", str(path), *(["model.init=null"] if absent else []))
    assert result.code == 0, result.err
    data = yaml.safe_load(result.out)["data"]
    assert path.stem.startswith(data["type"]) and {"root", "manifest"} & set(data["args"])


def test_transforms_for_a_dataset_without_pictures_is_one_error(cli, write):
    cfg = write("d.yaml", """
        data: {type: digits, transforms: {train: [random_horizontal_flip]}}
        model: {backbone: cnn, neck: global_avg_pool, head: linear, losses: [cross_entropy]}
    """)
    result = cli("config", str(cfg))
    assert result.code == 2 and "data.transforms" in result.err and "takes no image transforms" in result.err


def test_a_missing_corpus_names_its_files_and_the_download_command(cli, write, tmp_path):
    cfg = write("m.yaml", """
        data: {type: fashion_mnist, args: {root: nowhere}}
        model: {backbone: cnn, neck: global_avg_pool, head: linear, losses: [cross_entropy]}
    """)
    result = cli("train", str(cfg), "--run-dir", "run")
    assert result.code == 2
    assert "train-images-idx3-ubyte" in result.err and "modforge data download fashion_mnist" in result.err
    assert not (tmp_path / "run").exists()


def test_download_true_without_a_network_is_one_error_naming_the_files(cli, write, monkeypatch):
    import socket

    with socket.socket() as s:  # a port on loopback nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MODFORGE_DATA_MIRROR", f"http://127.0.0.1:{port}")
    import modforge.data.download as download

    monkeypatch.setattr(download, "BACKOFF", 0.0)
    cfg = write("k.yaml", """
        data: {type: kmnist, args: {root: kmnist, download: true}}
        model: {backbone: cnn, neck: global_avg_pool, head: linear, losses: [cross_entropy]}
    """)
    result = cli("train", str(cfg), "--run-dir", "run")
    assert result.code == 2 and "127.0.0.1" in result.err and result.err.count("\n") <= 12


def test_mixing_needs_a_loss_that_takes_class_probabilities(cli, write, tmp_path):
    write_cifar_python(tmp_path / "cifar", "cifar10", n_train=20, n_test=10)
    cfg = write("mix.yaml", """
        data: {type: cifar10, args: {root: cifar}, transforms: {mix: {mixup_alpha: 0.4}}}
        model: {backbone: cnn, neck: global_avg_pool, head: linear, losses: [focal]}
        train: {max_epochs: 1}
    """)
    result = cli("train", str(cfg), "--run-dir", "run")
    assert result.code == 2 and "data.transforms.mix" in result.err and "cross_entropy" in result.err


RESUMABLE = run_config("""
  type: cifar10
  args: {root: cifar, val_fraction: 0.25}
  batch_size: 8
  num_workers: WORKERS
  persistent_workers: true
  transforms:
    train: [{type: random_crop, args: {size: 32, padding: 4}}, random_horizontal_flip,
            {type: random_erasing, args: {p: 0.5}}]
    mix: {mixup_alpha: 0.4, cutmix_alpha: 1.0}
""", cnn(8, 16), neck="global_avg_pool", seed=3, train=dict(
    max_epochs=4, optimizer="{type: adamw, args: {lr: 3.0e-3}}", checkpoint="{every_n_steps: 3, keep_last: 2}",
    num_threads=1, progress="never"))


@pytest.mark.slow
def test_augmented_training_with_workers_killed_and_resumed_equals_a_run_without_workers(cli, write, tmp_path):
    """SIGKILL at several moments of a run with crops, erasing, MixUp/CutMix and 2 persistent
    workers; resumed, it ends bit for bit where the same config without workers ends."""
    write_cifar_python(tmp_path / "cifar", "cifar10", n_train=96, n_test=16)
    reference_cfg = write("reference.yaml", RESUMABLE.replace("WORKERS", "0"))
    reference = cli("train", str(reference_cfg), "--run-dir", "reference")  # in this process: no 4 s of imports
    assert reference.code == 0, reference.err
    killed_cfg = write("killed.yaml", RESUMABLE.replace("WORKERS", "2"))
    kills = kill_and_resume([str(killed_cfg)], tmp_path / "killed", (0.3, 0.9, 0.5), tmp_path)
    assert kills >= 1
    ours = torch.load(tmp_path / "killed" / "checkpoints" / "last.pt", weights_only=True)["model"]
    theirs = torch.load(tmp_path / "reference" / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert (tmp_path / "killed" / "metrics.csv").read_text() == (tmp_path / "reference" / "metrics.csv").read_text()


def test_data_show_draws_augmented_samples_with_their_class_names(cli, write, tmp_path):
    from PIL import Image

    write_cifar_python(tmp_path / "cifar", "cifar10", n_train=20, n_test=10)
    cfg = write("show.yaml", RESUMABLE.replace("WORKERS", "0"))
    result = cli("data", "show", str(cfg), "-n", "6", "--out", "grid.png")
    assert result.code == 0, result.err
    assert Image.open(tmp_path / "grid.png").size[0] > 100 and "6 train samples" in result.out
    from modforge.cli.config_args import resolve_config_from_cli
    from modforge.experiment.data_preview import show_samples

    cfg_test = resolve_config_from_cli("data show", [str(cfg)]).config
    drawn = show_samples(cfg_test, "test", 3, tmp_path / "test.png")
    assert drawn["titles"] and all(t in {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                                         "ship", "truck"} for t in drawn["titles"])  # fmt: skip
    mixed = show_samples(cfg_test, "train", 4, tmp_path / "train.png")
    assert any(" / " in t for t in mixed["titles"])  # mixed samples show their two largest class shares
    bad = cli("data", "show", str(cfg), "--split", "nope")
    assert bad.code == 2 and "--split" in bad.err


def test_predict_normalises_a_picture_as_the_training_data_was(tmp_path):
    from modforge.engines.inputs import read_input

    picture = write_picture(tmp_path / "p.png", (4, 3), seed=1)
    image = {"height": 3, "width": 4, "channels": 3, "ink": "light", "scale": 1.0, "mean": [0.5, 0.4, 0.3],
             "std": [0.2, 0.25, 0.5]}  # fmt: skip
    batch, names = read_input(picture, {"input": {"shape": [3, 3, 4], "layout": "image", "image": image}})
    pixels = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(picture).convert("RGB"), dtype=np.float32) / 255
    expected = (pixels.transpose(2, 0, 1) - np.array([0.5, 0.4, 0.3]).reshape(3, 1, 1)) / np.array(
        [0.2, 0.25, 0.5]).reshape(3, 1, 1)  # fmt: skip
    assert names == ["p.png"] and np.allclose(batch[0], expected, atol=1e-6)


@pytest.mark.slow
def test_a_picture_folder_run_exports_and_predicts_a_picture_like_its_test_split(cli, write, tmp_path):
    """Train one epoch on a folder of pictures, export to ONNX, predict one of the test pictures:
    the artifact's probabilities equal the model's on that sample as the test split serves it."""
    pytest.importorskip("onnxruntime")
    write_image_folder(tmp_path / "train", {"cat": 6, "dog": 6}, size=(12, 10))
    files = write_image_folder(tmp_path / "test", {"cat": 1, "dog": 1}, size=(12, 10), seed=70)
    cfg = write("folder.yaml", """
        seed: 0
        data:
          type: image_folder
          args: {root: train, test_root: test, val_fraction: 0.0}
          batch_size: 4
          transforms: {train: [random_horizontal_flip]}
        model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear,
                losses: [cross_entropy]}
        train: {max_epochs: 1, progress: never}
    """)
    assert cli("train", str(cfg), "--run-dir", "run").code == 0
    assert cli("export", "run", "--engine", "onnx", "--out", "model.onnx").code == 0
    result = cli("predict", "model.onnx", str(files[0]))
    assert result.code == 0 and files[0].name in result.out, result.err
    from modforge.cli.commands.predict_files import load_artifact
    from modforge.cli.config_args import resolve_config_from_cli
    from modforge.engines.inputs import read_input
    from modforge.experiment.runner import Experiment

    runner, metadata = load_artifact(tmp_path / "model.onnx")
    assert metadata["input"]["image"]["mean"] == [0.485, 0.456, 0.406]  # ImageNet's, for a colour folder
    batch, _ = read_input(files[0], metadata)
    logits = np.asarray(runner({"input": batch})["logits"])
    exp = Experiment.build(resolve_config_from_cli("train", [str(cfg)]).config, init_weights=False)
    exp.model.load_state_dict(torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)["model"])
    exp.model.eval()
    with torch.no_grad():  # the same picture as the test split serves it
        expected = exp.model(exp.splits.test.__getitems__([0])["input"]).numpy()
    assert np.allclose(logits, expected, atol=1e-4)


def test_kfold_pools_and_resplits_a_picture_dataset(cli, write, tmp_path):
    write_cifar_python(tmp_path / "cifar", "cifar10", n_train=40, n_test=10)
    cfg = write("kfold.yaml", """
        seed: 0
        data:
          type: cifar10
          args: {root: cifar, val_fraction: 0.25}
          batch_size: 8
          transforms: {train: [random_horizontal_flip]}
        model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear,
                losses: [cross_entropy]}
        train: {max_epochs: 1, progress: never}
    """)
    result = cli("kfold", str(cfg), "--folds", "2", "--run-dir", "folds")
    assert result.code == 0, result.err
    summary = json.loads((tmp_path / "folds" / "kfold.json").read_text())
    assert len(summary["folds"]) == 2


def test_predict_repeats_the_evaluation_resize_and_crop_on_a_picture_file(tmp_path):
    """A folder set evaluated at 'resize the shorter side to 20, centre-crop 16': the artifact
    records the steps and predict's picture is the test split's sample, pixel for pixel."""
    from modforge.engines.inputs import read_input

    write_image_folder(tmp_path / "train", {"a": 3, "b": 3}, size=(40, 30))
    files = write_image_folder(tmp_path / "test", {"a": 2, "b": 2}, size=(40, 30), seed=9)
    transforms = {"train": [{"type": "random_resized_crop", "args": {"size": 16}}],
                  "eval": [{"type": "resize", "args": {"size": 20}}, {"type": "center_crop", "args": {"size": 16}}]}  # fmt: skip
    splits = DATASETS.build({"type": "image_folder", "args": {"root": str(tmp_path / "train"), "val_fraction": 0.0,
                                                              "test_root": str(tmp_path / "test")}},
                            transforms=transforms)  # fmt: skip
    assert splits.image["steps"] == [["resize", [20]], ["center_crop", [16, 16]]]
    metadata = {"input": {"shape": list(splits.input_shape), "layout": "image", "image": splits.image}}
    for i, file in enumerate(files):
        batch, _ = read_input(file, metadata)
        assert np.allclose(batch, splits.test.__getitems__([i])["input"].numpy(), atol=1e-6)


def test_a_damaged_picture_read_by_a_loader_worker_is_one_line_naming_it(cli, write, tmp_path):
    write_image_folder(tmp_path / "train", {"a": 4, "b": 4}, size=(12, 10))
    (tmp_path / "train" / "b" / "img_3.png").write_bytes(b"not a png at all")  # not among the pictures probed
    cfg = write("bad.yaml", """
        data: {type: image_folder, args: {root: train, val_fraction: 0.25}, batch_size: 2, num_workers: 2}
        model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear,
                losses: [cross_entropy]}
        train: {max_epochs: 1, progress: never}
    """)
    result = cli("train", str(cfg), "--run-dir", "run")
    assert result.code == 2, result.err
    assert result.err.strip().endswith("not a readable image (expected one of PNG, JPEG, BMP, GIF, TIFF, WEBP, PPM)")
    assert "img_3.png" in result.err and "Traceback" not in result.err
    assert [line for line in result.err.splitlines() if line.startswith("error:")] == result.err.splitlines()[-1:]


def test_data_show_lays_flattened_inputs_out_as_pictures(cli, tmp_path):
    write_mnist_family(tmp_path / "data" / "mnist", 40, 10)
    config = Path(__file__).resolve().parents[1] / "configs" / "continual" / "mammoth" / "seq_mnist.yaml"
    result = cli("data", "show", str(config), "data.args.root=data/mnist", "-n", "4", "--out", "seq.png")
    assert result.code == 0, result.err
    assert (tmp_path / "seq.png").stat().st_size > 0


@pytest.mark.slow
def test_resuming_a_persistent_worker_run_from_checkpoints_of_later_epochs_equals_the_run_without_workers(
    write, tmp_path, monkeypatch
):
    """Deterministic companion of the SIGKILL test: the data-order generator a persistent-worker run
    saves is the one a run without workers saves, and resuming from checkpoints in epochs 1–3
    ends where the run without workers ends (a persistent loader once saved a generator that
    stopped moving after the first epoch, so only resumes into epoch 0 were exact)."""
    import shutil

    import modforge as mf
    from modforge.experiment.runner import train_run
    from modforge.experiment.schema import validate_config
    from modforge.train.checkpoint import load_checkpoint

    write_cifar_python(tmp_path / "cifar", "cifar10", n_train=96, n_test=16)
    text = RESUMABLE.replace("keep_last: 2", "keep_last: 100")
    configs = {w: write(f"w{w}.yaml", text.replace("WORKERS", w)) for w in ("0", "2")}
    runs = {w: tmp_path / f"full{w}" for w in configs}
    monkeypatch.chdir(tmp_path)
    for w, run in runs.items():
        run.mkdir()
        train_run(validate_config(mf.load_config(configs[w])), run)
    reference = load_checkpoint(runs["0"] / "checkpoints" / "last.pt")["model"]
    for name in ("epoch0001-step0000012", "epoch0002-step0000018", "epoch0003-step0000033"):
        ours, theirs = (load_checkpoint(runs[w] / "checkpoints" / f"{name}.pt") for w in ("2", "0"))
        assert torch.equal(ours["loader_generator"], theirs["loader_generator"]), name
        run = tmp_path / f"from-{name}"
        (run / "checkpoints").mkdir(parents=True)
        shutil.copy(runs["2"] / "checkpoints" / f"{name}.pt", run / "checkpoints")
        train_run(validate_config(mf.load_config(configs["2"])), run, resume=ours)
        model = load_checkpoint(run / "checkpoints" / "last.pt")["model"]
        assert all(torch.equal(model[k], reference[k]) for k in reference), name


def test_jpegs_decode_to_pillows_pixels_and_a_damaged_one_is_one_error(tmp_path):
    """The libjpeg-turbo fast path gives what torchvision's ImageFolder (Pillow) gives: colour,
    grey and progressive JPEGs; a truncated file is a PictureError naming it."""
    from PIL import Image

    from modforge.data.images.dataset import FilePictures
    from modforge.data.pictures import PictureError

    rng = np.random.default_rng(0)
    base = Image.fromarray(rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)).resize((47, 35))
    files = []
    for name, picture, extra in (("rgb.jpg", base, {}), ("grey.jpg", base.convert("L"), {}),
                                 ("progressive.jpg", base, {"progressive": True}),
                                 ("subsampled.jpg", base, {"subsampling": 2, "quality": 60})):  # fmt: skip
        picture.save(tmp_path / name, **extra)
        files.append(tmp_path / name)
    source = FilePictures(files, "RGB")
    for i, file in enumerate(files):
        expected = np.asarray(Image.open(file).convert("RGB")).transpose(2, 0, 1)
        assert np.array_equal(source.read(i).numpy(), expected), file.name
    damaged = tmp_path / "damaged.jpg"
    damaged.write_bytes((tmp_path / "rgb.jpg").read_bytes()[:300])
    with pytest.raises(PictureError, match="damaged.jpg"):
        FilePictures([damaged], "RGB").read(0)


def test_a_manifest_split_other_than_train_val_test_is_one_error(tmp_path):
    from image_fixtures import write_manifest_csv
    from modforge.core.errors import UsageError

    files = write_image_folder(tmp_path / "p", {"a": 2, "b": 2})
    write_manifest_csv(tmp_path / "p" / "m.csv", [(f.relative_to(tmp_path / "p"), f.parent.name, "training") for f in files])
    with pytest.raises(UsageError, match="split column holds 'training'; expected train, val, test"):
        DATASETS.build({"type": "image_csv", "args": {"manifest": str(tmp_path / "p" / "m.csv")}})
