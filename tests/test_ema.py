"""``train.ema``: the exponential moving average of the weights — its arithmetic (decay, warm-up,
period, integer buffers), validation and ``best.pt`` with the average under every training engine,
``modforge test`` of the average, bitwise resume, and clear errors. Under several processes:
tests/test_distributed_runs.py (its runs keep an average)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from modforge.model.formats import inference_weights
from modforge.train.ema import EmaSettings, WeightAverage

RUN = """
seed: 0
data: {type: digits, args: {as_image: false}, batch_size: 32}
model:
  backbone: {type: mlp, args: {hidden_dims: [32], norm: batch}}
  head: linear
  losses: [cross_entropy]
train:
  max_epochs: 3
  optimizer: {type: sgd, args: {lr: 0.1, momentum: 0.9}}
  ema: {decay: 0.8, warmup_steps: 5}
  checkpoint: {keep_last: 10}
  num_threads: 1
  progress: never
"""


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def _nudge(net: nn.Module, amount: float) -> None:
    with torch.no_grad():
        for p in net.parameters():
            p.add_(amount)
        net[1].running_mean.add_(amount)
        net[1].num_batches_tracked.add_(1)


def test_the_average_follows_during_warmup_then_decays_every_nth_step():
    net = _net()
    average = WeightAverage(net, EmaSettings(decay=0.75, warmup_steps=1, every=2, ramp=False))
    start = {k: v.clone() for k, v in net.state_dict().items()}
    _nudge(net, 1.0)
    average.step()  # step 1: not a multiple of every → untouched
    torch.testing.assert_close(average.average["0.weight"], start["0.weight"])
    _nudge(net, 1.0)
    average.step()  # step 2: past the warm-up → 0.75 · old + 0.25 · now
    torch.testing.assert_close(average.average["0.weight"], start["0.weight"] + 0.25 * 2.0)
    torch.testing.assert_close(average.average["1.running_mean"], start["1.running_mean"] + 2.0)  # copied
    assert int(average.average["1.num_batches_tracked"]) == 2  # integer buffers are copied, not averaged
    timm_like = WeightAverage(_net(), EmaSettings(decay=0.75, average_buffers=True, ramp=False))
    initial = timm_like.average["1.running_mean"].clone()
    _nudge(timm_like.model, 2.0)
    timm_like.step()
    torch.testing.assert_close(timm_like.average["1.running_mean"], initial + 0.25 * 2.0)  # averaged on request
    warm = WeightAverage(_net(), EmaSettings(decay=0.75, warmup_steps=4))
    _nudge(warm.model, 3.0)
    warm.step()  # within the warm-up: the weights themselves
    torch.testing.assert_close(warm.average["2.bias"], warm.model.state_dict()["2.bias"])


def test_the_average_is_swapped_in_for_evaluation_and_the_weights_come_back_exactly():
    net = _net()
    average = WeightAverage(net, EmaSettings(decay=0.5))
    _nudge(net, 1.0)
    average.step()
    trained = {k: v.clone() for k, v in net.state_dict().items()}
    with average.applied():
        for name, value in net.state_dict().items():
            assert torch.equal(value, average.average[name])
    for name, value in net.state_dict().items():
        assert torch.equal(value, trained[name]), name
    copy = WeightAverage(_net(), EmaSettings(decay=0.5))
    copy.load_state_dict(average.state_dict())
    assert copy.updates == 1 and all(torch.equal(copy.average[k], v) for k, v in average.average.items())
    with pytest.raises(ValueError, match="does not fit this model"):
        WeightAverage(nn.Linear(3, 2), EmaSettings()).load_state_dict(average.state_dict())


@pytest.mark.parametrize(("section", "message"), [
    ("{decay: 1.0}", "decay must lie strictly between 0 and 1, got 1.0"),
    ("{every: 0}", "every must be at least 1"),
    ("{decai: 0.9}", "decai"),
])  # fmt: skip
def test_a_bad_ema_section_is_one_error_naming_it(cli, write, section, message):
    config = write("run.yaml", RUN.replace("ema: {decay: 0.8, warmup_steps: 5}", f"ema: {section}"))
    res = cli("train", str(config), "--run-dir", "run")
    assert res.code == 2 and "train.ema" in res.err and message in res.err, res.err
    assert "Traceback" not in res.err


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["eager", "torchscript"])  # compile: tests/test_engines.py, beside its compiles
def test_validation_best_and_test_use_the_average_under_every_training_engine(cli, write, tmp_path, engine):
    check_validation_best_and_test_use_the_average(cli, write, tmp_path, engine)


def check_validation_best_and_test_use_the_average(cli, write, tmp_path, engine: str) -> None:
    """A one-epoch run with an average under ``engine``: ``best.pt`` holds the average, validated
    with it, and ``modforge test`` of it gives the validation row again."""
    config = write("run.yaml", RUN.replace("max_epochs: 3", "max_epochs: 1") + f"  engine: {engine}\n")
    res = cli("train", str(config), "--run-dir", "run")
    assert res.code == 0, res.err
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)
    assert best["ema"]["updates"] == best["global_step"] and best["ema"]["evaluate"] is True
    assert inference_weights(best) is best["ema"]["average"]
    assert any(not torch.equal(value, best["model"][name]) for name, value in best["ema"]["average"].items())
    # the epoch's validation row is the average's: re-evaluating the average (eagerly) gives it again
    test = cli("test", "run", "--split", "val")
    assert test.code == 0, test.err
    record = json.loads((tmp_path / "run" / "evaluations" / "best-val.json").read_text())
    row = next(r for r in best["history"] if r["epoch"] == best["epoch"])
    assert record["accuracy"] == pytest.approx(row["val_accuracy"], abs=1e-9)
    assert record["loss"] == pytest.approx(row["val_loss"], rel=1e-5)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["evaluated"] == "checkpoints/best.pt"


@pytest.mark.slow
def test_a_resumed_run_continues_the_average_bitwise_and_evaluate_false_keeps_it_aside(cli, write, tmp_path):
    config = write("run.yaml", RUN.replace("keep_last: 10}", "keep_last: 10, every_n_steps: 25}"))
    assert cli("train", str(config), "--run-dir", "whole").code == 0
    middle = tmp_path / "whole" / "checkpoints" / "epoch0000-step0000025.pt"  # 25 of the first epoch's 40 steps
    assert middle.exists(), sorted(p.name for p in (tmp_path / "whole" / "checkpoints").iterdir())
    res = cli("train", "--resume", str(middle), "--run-dir", "resumed")
    assert res.code == 0, res.err
    whole, resumed = (torch.load(tmp_path / run / "checkpoints" / "last.pt", weights_only=True)
                      for run in ("whole", "resumed"))  # fmt: skip
    assert resumed["ema"]["updates"] == whole["ema"]["updates"] == 3 * 40
    for name, value in whole["ema"]["average"].items():
        assert torch.equal(resumed["ema"]["average"][name], value), name

    aside = write("aside.yaml", RUN.replace("warmup_steps: 5}", "warmup_steps: 5, evaluate: false}"))
    assert cli("train", str(aside), "--run-dir", "aside").code == 0
    kept = torch.load(tmp_path / "aside" / "checkpoints" / "best.pt", weights_only=True)
    assert kept["ema"]["evaluate"] is False and inference_weights(kept) is kept["model"]


def test_a_continual_method_that_changes_weights_outside_its_steps_refuses_an_evaluated_average(cli, write):
    from pathlib import Path

    base = Path(__file__).parents[1] / "configs" / "continual" / "base.yaml"
    config = write("gdumb.yaml", f"""
        _base_: {base}
        train: {{ema: {{decay: 0.9}}}}
        continual: {{algorithm: gdumb, epochs_per_task: 1}}
    """)
    res = cli("train", str(config), "--run-dir", "gdumb")
    assert res.code == 2 and "algorithm 'gdumb' cannot be evaluated with train.ema's weights (their average)" in res.err, res.err
    assert "retrains the model from scratch" in res.err and "train.ema.evaluate: false" in res.err


def test_the_decay_ramps_with_the_updates_as_tensorflows_num_updates_rule():
    net = _net()
    average = WeightAverage(net, EmaSettings(decay=0.9, warmup_steps=2))
    start = net.state_dict()["0.weight"].clone()
    decays = []
    for _ in range(200):
        average.step()
        decays.append(average.decay_now())
    assert decays[:2] == pytest.approx([0.1, 0.1])  # warm-up: no averaging update yet
    assert decays[2] == pytest.approx(2 / 11) and decays[-1] == pytest.approx(0.9)  # (1 + n) / (10 + n), capped
    _nudge(net, 1.0)
    fresh = WeightAverage(net, EmaSettings(decay=0.999))
    _nudge(net, 1.0)
    fresh.step()  # first update: decay (1 + 1) / 11 → mostly the weights now, not the initial ones
    torch.testing.assert_close(fresh.average["0.weight"], start + 1.0 + (9 / 11) * 1.0)
    fixed = WeightAverage(_net(), EmaSettings(decay=0.999, ramp=False))
    fixed.step()
    assert fixed.decay_now() == 0.999


def test_a_young_average_is_said_once_at_its_first_evaluation_and_at_the_end(cli, write, tmp_path):
    cfg = write("young.yaml", RUN.replace("ema: {decay: 0.8, warmup_steps: 5}", "ema: {decay: 0.999}"))
    res = cli("train", str(cfg), "--run-dir", "run", "train.max_epochs=2")
    assert res.code == 0, res.err
    assert res.err.count("the weight average (train.ema) is young: 40 averaging update(s), fewer than the ~1000") == 1
    assert res.err.count("train.ema.decay to about 0.96") == 2  # a horizon of a third of the run's 80 updates
    assert res.err.count("is young") == 2 and "it is what is tested and exported" in res.err
    old = cli("train", str(cfg), "--run-dir", "old", "train.max_epochs=1", "train.ema.ramp=false")
    assert "without the ramp (train.ema.ramp=false) 96% of it is still the initial weights" in old.err
    settled = cli("train", str(cfg), "--run-dir", "settled", "train.max_epochs=1", "train.ema.decay=0.9")
    assert settled.code == 0 and "is young" not in settled.err
