"""Datasets, splits and the resumable sampler."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

import modforge as mf
from modforge.data import ArrayDataset, LoaderSettings, make_loader


def test_digits_splits_are_stratified_disjoint_and_seeded():
    splits = mf.DATASETS.build("digits", seed=0)
    sizes = [len(s) for s in (splits.train, splits.val, splits.test)]
    assert sum(sizes) == 1797 and sizes[2] == 270 and sizes[1] == 270
    ids = [set(s.ids.tolist()) for s in (splits.train, splits.val, splits.test)]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    for split in (splits.val, splits.test):  # every class present in proportion
        counts = torch.bincount(split.labels, minlength=10)
        assert counts.min() >= 25 and counts.max() <= 29
    assert splits.layout.value == "image" and splits.input_shape == (1, 8, 8) and splits.in_dim == 1
    assert float(splits.train.inputs.max()) <= 1.0
    again = mf.DATASETS.build("digits", seed=0)
    assert torch.equal(again.test.ids, splits.test.ids)
    other = mf.DATASETS.build("digits", seed=1)
    assert not torch.equal(other.test.ids, splits.test.ids)
    vectors = mf.DATASETS.build({"type": "digits", "args": {"as_image": False}}, seed=0)
    assert vectors.in_dim == 64 and vectors.train.inputs.shape[1:] == (64,)


def test_synthetic_classification_and_bad_fractions():
    splits = mf.DATASETS.build({"type": "synthetic_classification", "args": {"num_samples": 200, "num_classes": 4}}, seed=3)
    assert splits.num_classes == 4 and sum(len(s) for s in (splits.train, splits.val, splits.test)) == 200
    with pytest.raises(mf.BuildError, match="val_fraction \\+ test_fraction must leave training data"):
        mf.DATASETS.build({"type": "digits", "args": {"val_fraction": 0.5, "test_fraction": 0.5}}, seed=0)
    with pytest.raises(mf.BuildError, match="informative"):
        mf.DATASETS.build({"type": "synthetic_classification", "args": {"informative": 40}}, seed=0)


def test_batches_are_dicts_fetched_in_one_go():
    data = ArrayDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
    item = data[3]
    assert set(item) == {"input", "label", "index"} and int(item["label"]) == 3 and torch.equal(item["input"], data.inputs[3])
    batch = data.__getitems__([1, 4])
    assert torch.equal(batch["label"], torch.tensor([1, 4])) and batch["input"].shape == (2, 2)
    loader = make_loader(data, LoaderSettings(batch_size=4), train=False)
    assert [b["index"].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_batch_size_beyond_the_split_is_one_batch_not_a_huge_allocation():
    """torch's BatchSampler pre-allocates batch_size entries: 2**62 would exhaust memory."""
    data = ArrayDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
    for train in (True, False):
        loader = make_loader(data, LoaderSettings(batch_size=2**62), train=train, generator=torch.Generator())
        assert [len(b["index"]) for b in loader] == [10]


def test_sampler_order_matches_torch_random_sampler_exactly():
    """Same generator draws as DataLoader(shuffle=True, generator=g), epoch after epoch."""
    inputs, labels = torch.randn(50, 3), torch.arange(50)
    plain = DataLoader(TensorDataset(inputs, labels), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(7))
    ours = make_loader(ArrayDataset(inputs, labels), LoaderSettings(batch_size=8), train=True,
                       generator=torch.Generator().manual_seed(7))
    for _ in range(3):
        assert [y.tolist() for _, y in plain] == [b["label"].tolist() for b in ours]
    assert isinstance(plain.sampler, RandomSampler)


def test_sampler_skips_consumed_batches_without_loading_them():
    data = ArrayDataset(torch.randn(30, 2), torch.arange(30))
    gen = torch.Generator().manual_seed(1)
    loader = make_loader(data, LoaderSettings(batch_size=4), train=True, generator=gen)
    start = gen.get_state()
    full = [b["label"].tolist() for b in loader]
    gen.set_state(start)
    loader.batch_sampler.sampler.skip_next(3 * 4)
    fetched = []
    original = data.__getitems__
    data.__getitems__ = lambda idx: fetched.append(list(idx)) or original(idx)
    rest = [b["label"].tolist() for b in loader]
    assert rest == full[3:] and len(fetched) == len(full) - 3  # the first three batches were never read
    assert [b["label"].tolist() for b in loader] != full  # the skip applies to one epoch only


def test_negative_seeds_split_the_bundled_data_too():
    """scikit-learn refuses a negative random_state; modforge seeds may be any int."""
    splits = mf.DATASETS.build("digits", seed=-1)
    again = mf.DATASETS.build("digits", seed=-1)
    assert torch.equal(splits.test.ids, again.test.ids) and len(splits.train) > 0
    synthetic = mf.DATASETS.build({"type": "synthetic_classification", "args": {"num_samples": 100}}, seed=-7)
    assert len(synthetic.train) > 0


def test_digits_at_a_larger_size_are_the_scans_interpolated():
    from modforge.data.digits import digits

    small, large = digits(seed=0), digits(seed=0, size=32)
    assert large.input_shape == (1, 32, 32) and large.image["height"] == 32
    first_small, first_large = small.train[0], large.train[0]
    x8 = first_small["input"] if isinstance(first_small, dict) else first_small[0]
    x32 = first_large["input"] if isinstance(first_large, dict) else first_large[0]
    assert x32.shape == (1, 32, 32)
    # the same samples in the same split, each scan interpolated bilinearly (torch's, unaligned corners)
    expected = torch.nn.functional.interpolate(x8[None], size=(32, 32), mode="bilinear", align_corners=False)[0]
    assert torch.allclose(x32, expected) and float(x32.min()) >= 0.0 and float(x32.max()) <= 1.0
    assert [int(small.train[i]["label"]) for i in range(20)] == [int(large.train[i]["label"]) for i in range(20)]
    with pytest.raises(ValueError, match="needs as_image: true"):
        digits(as_image=False, size=16)
