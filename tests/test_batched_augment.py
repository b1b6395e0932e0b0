"""Whole-batch augmentation of in-memory pictures (the same pictures as v2 one at a time) and
``data.device`` (the training split held on a device, its batches cut there; resumed exactly)."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch

from image_fixtures import write_cifar_python
from modforge.core.errors import ConfigError
from modforge.data.base import ArrayDataset
from modforge.data.images.dataset import FilePictures, ImageDataset, TensorPictures
from modforge.data.images.mersenne import first_outputs
from modforge.data.images.transforms import make_pipeline, sample_seed, sample_seeds
from modforge.data.loader import LoaderSettings, make_loader
from modforge.data.placement import place

pytest.importorskip("torchvision")

CIFAR = [{"type": "random_crop", "args": {"size": 32, "padding": 4}}, "random_horizontal_flip"]
MNIST = [{"type": "random_crop", "args": {"size": 28, "padding": 2}}]
OTHERS = [  # every batched transform and padding mode, in orders where the maps compose
    [{"type": "random_crop", "args": {"size": 30, "padding": [1, 2, 3, 4], "padding_mode": "reflect"}},
     {"type": "random_vertical_flip", "args": {"p": 0.3}}],
    ["random_horizontal_flip", {"type": "random_crop", "args": {"size": 32, "padding": 5, "padding_mode": "symmetric"}}],
    [{"type": "pad", "args": {"padding": 3, "fill": 9}}, {"type": "random_crop", "args": {"size": 34, "fill": 9}},
     {"type": "center_crop", "args": {"size": 33}}],
    [{"type": "random_crop", "args": {"size": 36, "pad_if_needed": True, "padding_mode": "edge"}},
     {"type": "center_crop", "args": {"size": [27, 30]}}],
    [*CIFAR, {"type": "random_erasing", "args": {"p": 0.5}}],  # geometry batched, then erasing per sample
]  # fmt: skip


def _split(transforms, shape, *, n=40, batched=True, seed=3):
    g = torch.Generator().manual_seed(0)
    pictures = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g)
    channels = shape[0]
    pipeline, _, _ = make_pipeline(transforms, "data.transforms.train", [0.4] * channels, [0.3] * channels, batched)
    return ImageDataset(TensorPictures(pictures), torch.arange(n) % 4, train_pipeline=pipeline,
                        eval_pipeline=pipeline, train=True, seed=seed, ids=torch.arange(100, 100 + n))  # fmt: skip


@pytest.mark.parametrize(
    ("transforms", "shape"),
    [(CIFAR, (3, 32, 32)), (MNIST, (1, 28, 28)), *((t, (3, 32, 32)) for t in OTHERS)],
    ids=["cifar", "mnist", "reflect-vflip", "flip-symmetric", "pad-crop-center", "edge-center", "then-erasing"],
)
def test_a_batch_augmented_whole_is_the_per_sample_v2_pictures(transforms, shape):
    whole, single = _split(transforms, shape), _split(transforms, shape, batched=False)
    positions = list(range(len(whole)))
    for epoch in (0, 1):
        whole.set_epoch(epoch)
        single.set_epoch(epoch)
        ours = whole.__getitems__(positions)["input"]
        assert torch.equal(ours, single.__getitems__(positions)["input"])  # picture for picture, bit for bit
        # and the same as v2 called on one picture under its sample's seed, by hand
        torch.manual_seed(sample_seed(3, epoch, 105))
        by_hand = whole.pipeline(whole.source.pictures[5])
        assert torch.equal(ours[5], by_hand)
    assert whole.pipeline.plan(*shape[1:]) is not None  # these were batched, not the fallback


def test_a_samples_pictures_do_not_depend_on_its_batch():
    split = _split(CIFAR, (3, 32, 32))
    split.set_epoch(2)
    alone = torch.cat([split.__getitems__([i])["input"] for i in range(12)])
    shuffled = split.__getitems__([7, 3, 11, 0, 5, 1, 9, 2, 10, 4, 8, 6])["input"]
    assert torch.equal(shuffled[torch.argsort(torch.tensor([7, 3, 11, 0, 5, 1, 9, 2, 10, 4, 8, 6]))], alone)
    assert not torch.equal(alone, split.__getitems__(list(range(12)))["input"].flip(0))  # the crops do vary


def test_a_transform_without_a_batched_form_goes_per_sample_and_says_why_once(caplog):
    rotation = [*MNIST, {"type": "random_rotation", "args": {"degrees": 15}}]
    split = _split(rotation, (1, 28, 28), n=8)
    with caplog.at_level(logging.INFO, logger="modforge.data"):
        first = split.__getitems__(list(range(8)))["input"]
        split.__getitems__(list(range(8)))
    said = [r.getMessage() for r in caplog.records if "one at a time" in r.getMessage()]
    assert len(said) == 1 and "data.transforms.train: RandomRotation" in said[0]
    assert torch.equal(first, torch.stack([split.picture(i) for i in range(8)]))


def test_batch_seeds_are_the_per_sample_seeds():
    ids = torch.tensor([0, 1, 7, 2**40, 2**62 + 3, 12345])
    for seed, epoch, stream in ((0, 0, 0), (-5, 3, 1), (2**70, 2**33, 0)):
        assert sample_seeds(seed, epoch, ids, stream) == [sample_seed(seed, epoch, int(i), stream) for i in ids]


def test_a_batch_of_seeds_gives_the_first_outputs_torchs_generator_gives_each_seed():
    seeds = sample_seeds(3, 1, torch.arange(64)) + [0, 2**32 - 1, 2**32, 2**63 - 1]
    outputs = first_outputs(seeds, 4).astype("int64")
    generator = torch.Generator()
    for seed, row in zip(seeds, outputs, strict=True):
        for modulus in (2**24, 40, 2**28 - 3):  # as the batched crops and flips read them
            generator.manual_seed(seed)
            assert torch.empty(4, dtype=torch.int64).random_(0, modulus, generator=generator).tolist() == [
                v % modulus for v in row.tolist()]
    assert first_outputs(seeds, 0).shape == (len(seeds), 0)
    with pytest.raises(ValueError, match="count must be in 0..227"):
        first_outputs(seeds, 228)


def test_bad_data_device_values_get_one_error_naming_the_key(cli, write, tmp_path):
    cfg = write(
        "d.yaml",
        """
        data: {type: digits, device: gpu}
        model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear,
                losses: [cross_entropy]}
        train: {max_epochs: 1}
    """,
    )
    result = cli("config", str(cfg))
    assert result.code == 2 and "data.device" in result.err and "'cuda'" in result.err and "'gpu'" in result.err
    with pytest.raises(ConfigError, match=r"data\.device.*'gpu'"):
        LoaderSettings(device="gpu")
    folder = ImageDataset(FilePictures([tmp_path / "a.png"]), torch.zeros(1), train_pipeline=make_pipeline(
        [], "p", None, None)[0], eval_pipeline=make_pipeline([], "p", None, None)[0], train=True)  # fmt: skip
    with pytest.raises(ConfigError, match=r"data\.device.*decoded from files"):
        place(folder, "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device"):
            place(ArrayDataset(torch.zeros(2, 3), torch.zeros(2)), "cuda")


def test_a_training_loader_on_the_device_serves_the_batches_of_the_host_loader():
    host = _split([*CIFAR, {"type": "random_erasing", "args": {"p": 0.5}}], (3, 32, 32), n=24)
    settings = LoaderSettings(batch_size=8, device="cpu", num_workers=2)
    placed = make_loader(host, settings, train=True, generator=torch.Generator().manual_seed(1))
    plain = make_loader(host, LoaderSettings(batch_size=8), train=True, generator=torch.Generator().manual_seed(1))
    assert placed.num_workers == 0 and placed.dataset is not host  # a copy on the device, cut in-process
    for a, b in zip(placed, plain, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in b)
    assert make_loader(host, settings, train=False).dataset is host  # evaluation stays in host memory


RUN = """
seed: 2
data:
  type: cifar10
  args: {root: cifar, val_fraction: 0.25}
  batch_size: 8
  DEVICE
  transforms:
    train: [{type: random_crop, args: {size: 32, padding: 4}}, random_horizontal_flip ERASING]
    mix: {mixup_alpha: 0.4, cutmix_alpha: 1.0}
    batched: BATCHED
model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear, losses: [cross_entropy]}
train:
  max_epochs: 2
  optimizer: {type: adamw, args: {lr: 3.0e-3}}
  checkpoint: {every_n_steps: 2, keep_last: 100}
  num_threads: 1
  progress: never
"""


@pytest.mark.parametrize("way", ["batch-by-batch-then-erasing", "epoch-at-once", "uint8-from-workers"])
def test_a_run_with_its_data_on_the_device_resumes_bit_for_bit_and_trains_as_per_sample_v2(
    write, tmp_path, monkeypatch, way
):
    """Three ways a GPU run makes its pictures, here on the CPU: data.device with batched crops,
    flips, MixUp/CutMix and per-sample erasing; data.device with each epoch's crops and flips made
    at once (as on an accelerator); pictures in host memory leaving two loader workers as uint8,
    normalised where the model trains (as with CUDA). Resumed from a mid-epoch checkpoint each ends
    exactly where its uninterrupted run ends — and exactly where the same config ends with
    per-sample v2 transforms in host memory."""
    import modforge as mf
    import modforge.data.images.dataset as datasets
    from modforge.experiment.experiment import Experiment
    from modforge.experiment.runner import train_run
    from modforge.experiment.schema import validate_config
    from modforge.train.checkpoint import load_checkpoint

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets, "_at_once_on", lambda device: way == "epoch-at-once")  # the accelerator's, on the CPU
    training_gpu = [torch.device("cpu")]  # CUDA's path, on the CPU (the per-sample reference below: none)
    monkeypatch.setattr(Experiment, "_training_gpu", lambda self: training_gpu[0])
    taken = []  # (the epoch made at once, the split serving uint8): which paths the runs took
    at_once, serving = datasets.ImageDataset._augmented_epoch, datasets.ImageDataset.serving_uint8
    monkeypatch.setattr(datasets.ImageDataset, "_augmented_epoch",
                        lambda self, *a: taken.append(("at once", at_once(self, *a))) or taken[-1][1])  # fmt: skip
    monkeypatch.setattr(datasets.ImageDataset, "serving_uint8",
                        lambda self: taken.append(("uint8", serving(self))) or taken[-1][1])  # fmt: skip
    write_cifar_python(tmp_path / "cifar", "cifar10", n_train=32, n_test=8)
    config = RUN.replace(" ERASING", ", {type: random_erasing, args: {p: 0.5}}" if way.endswith("erasing") else "")
    if way == "uint8-from-workers":  # no batch mixing: the pictures must reach the training process as uint8
        config = config.replace("    mix: {mixup_alpha: 0.4, cutmix_alpha: 1.0}\n", "")
    ours = "num_workers: 2" if way == "uint8-from-workers" else "device: cpu"
    on_device = write("device.yaml", config.replace("DEVICE", ours).replace("BATCHED", "true"))
    per_sample = write("host.yaml", config.replace("DEVICE", "num_workers: 0").replace("BATCHED", "false"))

    def run(cfg, folder, resume=None):
        train_run(validate_config(mf.load_config(cfg)), folder, resume=resume)
        return load_checkpoint(folder / "checkpoints" / "last.pt")["model"], (folder / "metrics.csv").read_text()

    (tmp_path / "full").mkdir()
    model, metrics = run(on_device, tmp_path / "full")
    middle = tmp_path / "full" / "checkpoints" / "epoch0001-step0000004.pt"  # 3 steps an epoch: 1 into the second
    resumed_dir = tmp_path / "resumed"
    (resumed_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(middle, resumed_dir / "checkpoints" / middle.name)
    resumed, resumed_metrics = run(on_device, resumed_dir, load_checkpoint(middle))
    assert resumed_metrics == metrics and all(torch.equal(resumed[k], model[k]) for k in model)
    paths = {kind for kind, made in taken if made is not None}
    assert paths == {"batch-by-batch-then-erasing": set(), "epoch-at-once": {"at once"},
                     "uint8-from-workers": {"uint8"}}[way]  # fmt: skip
    (tmp_path / "host").mkdir()
    training_gpu[0] = None
    host, host_metrics = run(per_sample, tmp_path / "host")
    assert host_metrics == metrics and all(torch.equal(host[k], model[k]) for k in model)


CONTINUAL = """
seed: 1
data:
  type: seq
  args: {dataset: {type: cifar10, args: {root: cifar, val_fraction: 0.0}}, classes_per_task: 5}
  batch_size: 8
  num_workers: 2
  transforms:
    train: [{type: random_crop, args: {size: 32, padding: 4}}, random_horizontal_flip]
    batched: true
model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear, losses: [cross_entropy]}
train: {optimizer: {type: sgd, args: {lr: 0.05}}, num_threads: 1, progress: never}
continual: {algorithm: {type: derpp, args: {buffer_size: 12}}, epochs_per_task: 1}
"""


def test_a_continual_runs_task_loaders_serve_uint8_from_the_workers_as_a_run_does(write, tmp_path, monkeypatch):
    """Each task's training loader of a continual run takes the path a plain run's takes on CUDA
    (pictures leave the loader workers as uint8 and are normalised where the model trains; here
    the CPU stands in): the same weights, buffer replays and accuracies as the float path."""
    import modforge as mf
    import modforge.data.images.dataset as datasets
    from modforge.experiment.experiment import Experiment
    from modforge.experiment.runner import train_run
    from modforge.experiment.schema import validate_config
    from modforge.train.checkpoint import load_checkpoint

    monkeypatch.chdir(tmp_path)
    write_cifar_python(tmp_path / "cifar", "cifar10", n_train=40, n_test=10)
    training_gpu = [torch.device("cpu")]  # CUDA's path, on the CPU; then None: the float path
    monkeypatch.setattr(Experiment, "_training_gpu", lambda self: training_gpu[0])
    served, serving = [], datasets.ImageDataset.serving_uint8
    monkeypatch.setattr(datasets.ImageDataset, "serving_uint8",
                        lambda self: served.append(serving(self)) or served[-1])  # fmt: skip
    config = validate_config(mf.load_config(write("seq.yaml", CONTINUAL)))
    runs = {}
    for way in ("uint8", "float"):
        (tmp_path / way).mkdir()
        train_run(config, tmp_path / way)
        runs[way] = load_checkpoint(tmp_path / way / "checkpoints" / "last.pt")
        training_gpu[0] = None
    assert len(served) == 2 and all(split is not None for split in served)  # both tasks' loaders, uint8 once
    uint8, floats = runs["uint8"], runs["float"]
    assert all(torch.equal(uint8["model"][k], floats["model"][k]) for k in floats["model"])
    summaries = [json.loads((tmp_path / way / "summary.json").read_text()) for way in ("uint8", "float")]
    for setting in ("class_il", "task_il"):
        assert summaries[0][setting] == summaries[1][setting]
    assert summaries[0]["samples_seen"] == summaries[1]["samples_seen"] and sum(summaries[0]["samples_seen"]) == 40


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (benchmarks/device_check.py runs it)")
@pytest.mark.parametrize("transforms", [CIFAR, [*CIFAR, {"type": "random_erasing", "args": {"p": 0.5}}]],
                         ids=["epoch-at-once", "then-erasing"])  # fmt: skip
def test_batches_made_on_a_cuda_device_are_the_host_batches(transforms):
    host = _split(transforms, (3, 32, 32), n=64)
    placed = place(host, "cuda")
    assert placed.source.pictures.is_cuda
    for epoch in (0, 1):
        host.set_epoch(epoch)
        placed.set_epoch(epoch)
        positions = list(range(epoch, 64, 3))
        ours, theirs = placed.__getitems__(positions), host.__getitems__(positions)
        assert ours["input"].is_cuda and ours["label"].is_cuda
        assert all(torch.equal(ours[k].cpu(), theirs[k]) for k in theirs)
    assert (placed._epoch_pictures is not None) == (transforms is CIFAR)  # crops and flips only: made at once


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (benchmarks/device_check.py runs it)")
def test_pictures_leaving_the_workers_as_uint8_are_normalised_on_the_gpu_to_the_host_numbers():
    from modforge.data.device_finish import FinishedOnDevice

    split = _split(CIFAR, (3, 32, 32), n=64)
    settings = LoaderSettings(batch_size=16, num_workers=2)
    ours = make_loader(split, settings, train=True, generator=torch.Generator().manual_seed(0),
                       finish_on=torch.device("cuda"))  # fmt: skip
    theirs = make_loader(split, settings, train=True, generator=torch.Generator().manual_seed(0))
    assert isinstance(ours, FinishedOnDevice) and ours.loader.dataset.__getitems__([0, 1])["input"].dtype == torch.uint8
    assert ours.dataset is split  # read directly (a distillation's sizing batch): the split, normalised
    for a, b in zip(ours, theirs, strict=True):
        assert a["input"].is_cuda and torch.equal(a["input"].cpu(), b["input"])
        assert torch.equal(a["label"], b["label"]) and torch.equal(a["index"], b["index"])


def test_a_loader_finishing_pictures_on_the_device_copies_like_a_loader():
    import copy

    from modforge.data.device_finish import FinishedOnDevice

    split = _split(CIFAR, (3, 32, 32), n=32)
    ours = make_loader(split, LoaderSettings(batch_size=8), train=True, generator=torch.Generator().manual_seed(0),
                       finish_on=torch.device("cpu"))  # fmt: skip
    assert isinstance(ours, FinishedOnDevice)
    clone = copy.copy(ours)  # copy probes attributes of a bare instance first: an AttributeError, not a KeyError
    assert len(clone) == len(ours) == 4 and clone.batch_sampler is ours.batch_sampler
    with pytest.raises(AttributeError):
        getattr(FinishedOnDevice.__new__(FinishedOnDevice), "batch_sampler")  # noqa: B009 - the lookup is the test


def test_an_epoch_augmented_at_once_gives_each_sample_the_pictures_its_seed_gives(monkeypatch):
    # on an accelerator a split makes the epoch's pictures at its first batch (here run on the CPU, in chunks)
    split_transforms = [{"type": "random_crop", "args": {"size": 30, "padding": 3, "padding_mode": "reflect"}},
                        "random_horizontal_flip", {"type": "random_vertical_flip", "args": {"p": 0.3}}]
    split = _split(split_transforms, (3, 32, 32))
    monkeypatch.setattr(ImageDataset, "_EPOCH_CHUNK", 16)  # 40 pictures: chunks of 16, 16 and 8
    split.set_epoch(4)
    made = split._augmented_epoch(split.pipeline, 4)
    assert made.dtype == torch.uint8 and made.shape == (40, 3, 30, 30)
    assert split._augmented_epoch(split.pipeline, 4) is made  # once an epoch
    positions = torch.tensor([5, 0, 39, 17, 17, 2])
    by_seed = torch.stack([split.picture(int(p)) for p in positions])
    assert torch.equal(split.pipeline.to_float(made.index_select(0, positions)), by_seed)
    fifth = split._augmented_epoch(split.pipeline, 5)
    assert not torch.equal(fifth, made)  # the next epoch draws anew
    assert split._draw_block[0] == 4  # ... from the draws made for epochs 4 to 11 at once
    resumed = _split(split_transforms, (3, 32, 32))  # a resumed run: its block starts at its own epoch
    assert torch.equal(resumed._augmented_epoch(resumed.pipeline, 5), fifth) and resumed._draw_block[0] == 5
    permuted = split.with_fixed_transforms(picture=lambda x: x.flip(-1).contiguous())  # a fixed per-picture transform
    permuted.set_epoch(4)
    assert torch.equal(split.pipeline.to_float(permuted._augmented_epoch(split.pipeline, 4).index_select(0, positions)),
                       torch.stack([permuted.picture(int(p)) for p in positions]))  # fmt: skip
    erasing = _split([*CIFAR, {"type": "random_erasing", "args": {"p": 0.5}}], (3, 32, 32))
    assert erasing._augmented_epoch(erasing.pipeline, 0) is None  # a float transform after: made per batch


def test_on_the_host_an_epochs_draws_are_made_once_and_give_each_sample_its_pictures(monkeypatch):
    """On the CPU a split makes every sample's crop and flip draws at the epoch's first batch (one
    vectorised seeding recurrence, not one per batch); each batch reads its rows: the pictures its
    samples' seeds give, whatever the batch, epoch by epoch."""
    import modforge.data.images.mersenne as mersenne

    made = []
    real = mersenne.first_outputs
    monkeypatch.setattr(mersenne, "first_outputs", lambda seeds, count: made.append(len(seeds)) or real(seeds, count))
    split, by_batch = _split(CIFAR, (3, 32, 32)), _split(CIFAR, (3, 32, 32))
    monkeypatch.setattr(by_batch, "_host_draws", lambda *args: None)  # the draws made batch by batch instead
    for epoch in (0, 1):
        split.set_epoch(epoch)
        by_batch.set_epoch(epoch)
        for positions in ([5, 0, 39], [17, 2, 2, 30], list(range(39, 0, -1))):
            assert torch.equal(split.__getitems__(positions)["input"], by_batch.__getitems__(positions)["input"])
    assert made.count(40) == 2 and split._host_table[0] == (1, 3)  # the whole split once an epoch: 3 draws each
    erasing = _split([*CIFAR, {"type": "random_erasing", "args": {"p": 0.5}}], (3, 32, 32))
    assert erasing._host_draws(erasing.pipeline, erasing.source.pictures[:2], torch.tensor([0, 1]), 0) is None


def test_data_on_one_device_and_the_model_on_another_is_one_error_naming_both_keys(write):
    from modforge.core.config import load_config
    from modforge.experiment.runner import Experiment
    from modforge.experiment.schema import validate_config

    cfg = write("d.yaml", """
        data: {type: digits, device: cpu}
        model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear,
                losses: [cross_entropy]}
        train: {max_epochs: 1}
    """)  # fmt: skip
    exp = Experiment.build(validate_config(load_config(cfg)))
    exp._check_data_device(torch.device("cpu"))  # the same device: fine
    with pytest.raises(ConfigError, match=r"made on cpu \(data\.device: cpu\) but the model trains on cuda:0") as err:
        exp._check_data_device(torch.device("cuda", 0))
    assert err.value.path == "data.device" and "d.yaml" in str(err.value)
