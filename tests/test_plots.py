"""``curves.png`` (modforge.experiment.plots): what a reader of a run's curves sees."""

from __future__ import annotations

import pytest

from modforge.experiment import plots


def test_curves_tick_only_whole_epochs(tmp_path, monkeypatch):
    """Epochs are counted in whole numbers: a three-epoch run's axes are labelled 1, 2, 3 — not
    1.25, 1.5, … (matplotlib's default locator on the getting-started page's picture)."""
    pytest.importorskip("matplotlib")
    drawn = []
    real_save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, **kw: drawn.append(fig) or real_save(fig, path, **kw))
    history = [
        {"epoch": e, "train_loss": 2.0 / e, "val_loss": 1.8 / e, "val_accuracy": 0.3 * e, "lr": 0.1} for e in (1, 2, 3)
    ]

    assert plots.plot_curves(history, tmp_path / "curves.png", title="digits") == tmp_path / "curves.png"
    assert (tmp_path / "curves.png").stat().st_size > 0
    (figure,) = drawn
    for ax in figure.axes:
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_ylabel(), ticks)
        assert {1.0, 2.0, 3.0} <= set(ticks), (ax.get_ylabel(), ticks)
