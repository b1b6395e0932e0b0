"""Image transforms by name, per-sample seeding, batch mixing, streaming loaders."""

from __future__ import annotations

import pytest
import torch

from modforge.core.errors import ConfigError
from modforge.data.images.dataset import EpochBatch, TensorPictures
from modforge.data.images.splits import check_transforms_section, picture_splits
from modforge.data.images.transforms import make_pipeline, sample_seed
from modforge.data.loader import LoaderSettings, make_loader

AUGMENT = {
    "train": [
        {"type": "random_crop", "args": {"size": 16, "padding": 2}},
        "random_horizontal_flip",
        {"type": "rand_augment", "args": {"num_ops": 2, "magnitude": 9}},
        {"type": "random_erasing", "args": {"p": 0.5}},
    ],
    "mix": {"mixup_alpha": 0.8, "cutmix_alpha": 1.0},
}


def _splits(transforms=AUGMENT, n=120, seed=3):
    g = torch.Generator().manual_seed(0)
    pictures = torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=g)
    labels = torch.arange(n) % 4
    return picture_splits(
        train=(TensorPictures(pictures), labels), test=(TensorPictures(pictures[:20]), labels[:20]),
        class_names=["a", "b", "c", "d"], seed=seed, val_fraction=0.2, transforms=transforms, mean=[0.5] * 3,
        std=[0.25] * 3, described="random",
    )  # fmt: skip


def _epochs(splits, workers=0, persistent=False, epochs=2):
    generator = torch.Generator().manual_seed(1)
    settings = LoaderSettings(batch_size=16, num_workers=workers, persistent_workers=persistent)
    loader = make_loader(splits.train, settings, train=True, generator=generator)
    seen = []
    for epoch in range(epochs):
        splits.train.set_epoch(epoch)
        seen.append(list(loader))
    return seen


def _same(a, b) -> bool:
    return all(
        torch.equal(x[k], y[k]) for ea, eb in zip(a, b, strict=True) for x, y in zip(ea, eb, strict=True) for k in x
    )


def test_splits_record_shape_classes_and_normalisation_for_export():
    splits = _splits()
    assert splits.input_shape == (3, 16, 16) and splits.in_dim == 3 and splits.num_classes == 4
    assert (len(splits.train), len(splits.val), len(splits.test)) == (96, 24, 20)
    assert splits.image == {"height": 16, "width": 16, "channels": 3, "ink": "light", "scale": 1.0,
                            "mean": [0.5] * 3, "std": [0.25] * 3}  # fmt: skip
    assert torch.bincount(splits.val.labels).tolist() == [6, 6, 6, 6]  # stratified


def test_evaluation_batches_are_the_normalised_pictures_unchanged():
    splits = _splits(transforms={"train": ["random_horizontal_flip"]})
    batch = splits.test.__getitems__([0, 1, 2])
    raw = splits.test.source.pictures[:3].float() / 255
    assert torch.allclose(batch["input"], (raw - 0.5) / 0.25)
    assert batch["label"].dtype == torch.long  # evaluation is never mixed


def test_augmentation_is_a_function_of_seed_epoch_and_sample_only():
    splits = _splits()
    one = splits.train.picture(5, epoch=0)
    assert torch.equal(one, splits.train.picture(5, epoch=0))
    assert not torch.equal(one, splits.train.picture(5, epoch=1))
    before = torch.random.get_rng_state()
    torch.rand(3)  # the training process's own stream is left where it was
    torch.random.set_rng_state(before)
    splits.train.picture(7, epoch=2)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert sample_seed(0, 1, 2) != sample_seed(0, 2, 1) and sample_seed(-1, 0, 0) >= 0


def test_batches_are_identical_for_any_number_of_workers_persistent_or_not():
    reference = _epochs(_splits())
    assert not torch.equal(reference[0][0]["input"], reference[1][0]["input"])
    assert _same(reference, _epochs(_splits(), workers=2))
    assert _same(reference, _epochs(_splits(), workers=2, persistent=True))


def test_mixed_batches_carry_class_probabilities():
    batch = _epochs(_splits(), epochs=1)[0][0]
    assert batch["label"].shape == (16, 4) and batch["label"].dtype == torch.float32
    assert torch.allclose(batch["label"].sum(1), torch.ones(16))
    assert (batch["label"].max(1).values < 1).any()  # some rows really are mixtures


def test_a_tagged_batch_brings_its_epoch_to_a_worker_copy():
    splits = _splits()
    tagged = splits.train.__getitems__(EpochBatch([3, 4], epoch=5))
    splits.train.set_epoch(5)
    assert torch.equal(tagged["input"], splits.train.__getitems__([3, 4])["input"])


def test_normalize_named_in_the_list_replaces_the_datasets_and_is_recorded():
    splits = _splits(transforms={"train": [{"type": "normalize", "args": {"mean": [0.1] * 3, "std": [0.2] * 3}}]})
    assert splits.normalisation["mean"] == [0.1] * 3 and splits.image["std"] == [0.2] * 3
    with pytest.raises(ConfigError, match="data.transforms.eval"):
        _splits(transforms={"train": [{"type": "normalize", "args": {"mean": [0.1] * 3, "std": [0.2] * 3}}],
                            "eval": [{"type": "normalize", "args": {"mean": [0.3] * 3, "std": [0.2] * 3}}]})  # fmt: skip


@pytest.mark.parametrize(
    ("section", "where", "what"),
    [
        ({"train": ["random_flip"]}, "data.transforms.train.0", "random_horizontal_flip"),
        ({"train": [{"type": "random_crop", "args": {"sise": 3}}]}, "data.transforms.train.0", "size"),
        ({"train": [{"type": "auto_augment", "args": {"policy": "imagenett"}}]}, "policy", "imagenet"),
        ({"test": []}, "data.transforms", "train, eval, mix"),
        ({"mix": {"mixup_alpha": -1}}, "data.transforms.mix.mixup_alpha", "negative"),
        ({"mix": {"mixup_alpha": 0}}, "data.transforms.mix", "above 0"),
        ({"train": "random_crop"}, "data.transforms.train", "list"),
        ({"train": [{"type": "lambda"}]}, "data.transforms.train.0", "unknown image transform"),
    ],
)
def test_bad_transform_sections_get_one_error_naming_the_key(section, where, what):
    with pytest.raises(ConfigError) as caught:
        check_transforms_section(section)
    assert where in str(caught.value) and what in str(caught.value)


def test_the_class_name_of_a_v2_transform_works_too_and_float_transforms_come_after_normalising():
    pipeline, mean, std = make_pipeline(["RandomHorizontalFlip", "random_erasing"], "t", [0.5], [0.5])
    assert [type(t).__name__ for t in pipeline.before] == ["RandomHorizontalFlip"]
    assert [type(t).__name__ for t in pipeline.after] == ["RandomErasing"] and mean == [0.5]
