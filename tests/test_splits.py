"""modforge's held-out draws are scikit-learn's, index for index and in order (they replace an import
of its splitter that cost seconds at every run's start), and the digits are its bundled file; a
digits run imports no scikit-learn."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from sklearn.model_selection import train_test_split

from modforge.data.digits import digits_arrays
from modforge.data.splits import held_out_split


def _cases(count: int):
    """Random label arrays — few and many classes, equal counts (ties in the share rounding) and
    skewed ones — with fractions and seeds, negative seeds included."""
    draw = np.random.default_rng(1234)
    for case in range(count):
        classes = int(draw.integers(1, 12))
        if case % 3 == 0:  # equal class sizes: every remainder ties, the rng breaks them
            labels = np.repeat(np.arange(classes), int(draw.integers(2, 9)))
        else:
            labels = draw.integers(0, classes, size=int(draw.integers(classes * 2, 400)))
        labels = draw.permutation(labels) * (3 if case % 5 == 0 else 1)  # labels that are not 0..k-1
        yield labels, float(draw.uniform(0.02, 0.6)), int(draw.integers(-(2**33), 2**33))


def _sklearn(labels: np.ndarray, fraction: float, seed: int, stratify: bool):
    positions = np.arange(len(labels))
    return train_test_split(positions, test_size=fraction, stratify=labels if stratify else None,
                            random_state=seed % 2**32)  # fmt: skip


@pytest.mark.parametrize("stratify", [True, False], ids=["stratified", "shuffled"])
def test_held_out_split_draws_what_scikit_learn_draws(stratify):
    compared = refused = 0
    for labels, fraction, seed in _cases(1500):
        try:
            theirs = _sklearn(labels, fraction, seed, stratify)
        except ValueError:  # sklearn refuses (a class of one, a side smaller than the classes): so do we
            with pytest.raises(ValueError):
                held_out_split(labels, fraction, seed, stratify=stratify)
            refused += 1
            continue
        ours = held_out_split(labels, fraction, seed, stratify=stratify)
        assert [a.tolist() for a in ours] == [list(map(int, b)) for b in theirs], (labels.tolist(), fraction, seed)
        compared += 1
    assert compared > 1000 and (refused > 20 or not stratify)


def test_refusals_say_what_is_wrong():
    with pytest.raises(ValueError, match=r"every class twice or more; classes \[7\] have one sample"):
        held_out_split(np.array([0, 0, 1, 1, 7]), 0.4, 0, stratify=True)
    with pytest.raises(ValueError, match="held-out side of the split has 1 samples, fewer than the 2 classes"):
        held_out_split(np.array([0, 0, 0, 1, 1, 1]), 0.1, 0, stratify=True)


def test_digits_are_scikit_learns_bundled_scans():
    from sklearn.datasets import load_digits

    pixels, labels = digits_arrays()
    reference = load_digits()
    assert np.array_equal(pixels, reference.data) and np.array_equal(labels, reference.target)


def test_splitting_digits_imports_no_scikit_learn():
    """What a digits run's data costs at its start: no scikit-learn (nor SciPy) in a fresh interpreter."""
    code = ("import sys; from modforge.data.digits import digits; s = digits(seed=3); "
            "print(len(s.train), len(s.val), len(s.test), 'sklearn' in sys.modules, 'scipy' in sys.modules)")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["1257", "270", "270", "False", "False"]
