"""The Trainer: parity with a plain loop, steps, precision, NaN guard, schedulers, groups."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import modforge as mf
from modforge.data import LoaderSettings, make_loader
from modforge.train.callbacks import Callback, improved
from modforge.train.checkpoint import load_checkpoint
from modforge.train.optim_builder import build_optimizer
from modforge.train.trainer import NonFiniteLossError, Trainer

MLP = {"backbone": {"type": "mlp", "args": {"hidden_dims": [32, 32]}}, "head": "linear", "losses": ["cross_entropy"]}


@pytest.fixture(scope="module")
def digits():
    return mf.DATASETS.build({"type": "digits", "args": {"as_image": False}}, seed=0)


class StepLosses(Callback):
    def __init__(self):
        self.losses = []

    def on_step_end(self, trainer):
        self.losses.append(trainer.last_loss.item())


def test_trainer_matches_a_hand_written_loop_bitwise(digits):
    train = digits.train
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(train.inputs, train.labels), batch_size=16, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    plain_losses = []
    for _ in range(2):
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(plain(x), y)
            loss.backward()
            opt.step()
            plain_losses.append(loss.item())
    torch.manual_seed(0)
    model = mf.build_model(MLP, in_dim=64, num_classes=10)
    recorder = StepLosses()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), callbacks=[recorder], max_epochs=2)
    trainer.fit(make_loader(train, LoaderSettings(batch_size=16), train=True, generator=torch.Generator().manual_seed(0)))
    assert recorder.losses == plain_losses  # every loss, bitwise
    ours = [p.detach() for p in model.parameters()]
    theirs = [p.detach() for p in plain.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_history_rows_and_evaluation(digits):
    torch.manual_seed(0)
    model = mf.build_model(MLP, in_dim=64, num_classes=10)
    metrics = {"accuracy": mf.METRICS.build("accuracy"), "loss": mf.METRICS.build("loss"),
               "confusion_matrix": mf.METRICS.build("confusion_matrix", num_classes=10)}
    trainer = Trainer(model, torch.optim.Adam(model.parameters(), lr=3e-3), metrics=metrics, max_epochs=3)
    loader = make_loader(digits.train, LoaderSettings(batch_size=64), train=True, generator=torch.Generator().manual_seed(0))
    val = make_loader(digits.val, LoaderSettings(batch_size=64), train=False)
    history = trainer.fit(loader, val)
    assert [row["epoch"] for row in history] == [1, 2, 3]
    assert set(history[-1]) == {"epoch", "step", "train_loss", "val_accuracy", "val_loss"}
    assert history[-1]["val_accuracy"] > 0.8 and history[0]["train_loss"] > history[-1]["train_loss"]
    assert sum(map(sum, trainer.extra_results["val_confusion_matrix"])) == len(digits.val)
    assert trainer.predict(val).shape == (len(digits.val), 10)


def test_gradient_accumulation_equals_the_large_batch(digits):
    x, y = digits.train.inputs[:64], digits.train.labels[:64]
    data = mf.data.ArrayDataset(x, y)
    results = []
    for batch, accumulate in ((32, 1), (16, 2)):
        torch.manual_seed(0)
        model = mf.build_model(MLP, in_dim=64, num_classes=10)
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5), max_epochs=1, accumulate=accumulate)
        loader = make_loader(data, LoaderSettings(batch_size=batch), train=False)
        trainer.fit(loader)
        results.append((trainer.global_step, [p.detach().clone() for p in model.parameters()]))
    assert results[0][0] == results[1][0] == 2
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(results[0][1], results[1][1], strict=True))


def test_gradient_clipping_bounds_the_update():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer = Trainer(model, opt, grad_clip=0.1)
    before = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    (model(torch.randn(8, 4) * 100).pow(2).mean()).backward()
    trainer.optimizer_step()
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert float((after - before).norm()) <= 0.1 + 1e-5
    assert all(p.grad is None for p in model.parameters())


def test_bf16_autocast_trains_on_cpu(digits):
    torch.manual_seed(0)
    model = mf.build_model(MLP, in_dim=64, num_classes=10)
    trainer = Trainer(model, torch.optim.Adam(model.parameters(), lr=1e-3), max_epochs=1, precision="bf16")
    history = trainer.fit(make_loader(digits.train, LoaderSettings(batch_size=64), train=True,
                                      generator=torch.Generator().manual_seed(0)))
    assert math.isfinite(history[0]["train_loss"]) and next(model.parameters()).dtype == torch.float32
    with pytest.raises(ValueError, match="precision must be one of"):
        Trainer(model, torch.optim.Adam(model.parameters()), precision="8")


class NaNAfter(nn.Module):
    """A loss that becomes NaN from its ``after``-th call on."""

    def __init__(self, after: int = 6):
        super().__init__()
        self.after, self.calls = after, 0

    def forward(self, logits, target):
        self.calls += 1
        loss = F.cross_entropy(logits, target)
        return loss * float("nan") if self.calls > self.after and self.training else loss


def test_nan_guard_stops_keeps_the_last_good_checkpoint_and_never_marks_nan_best(digits, tmp_path):
    mf.register_loss("nan_after")(NaNAfter)
    torch.manual_seed(0)
    cfg = {**MLP, "losses": [{"type": "nan_after", "args": {"after": 9}}]}
    model = mf.build_model(cfg, in_dim=64, num_classes=10)
    callbacks = [mf.CALLBACKS.build("nan_guard"),
                 mf.CALLBACKS.build({"type": "checkpoint", "args": {"every_n_steps": 4, "monitor": "train_loss"}})]
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), callbacks=callbacks, max_epochs=5, log_every=2,
                      run_dir=tmp_path)
    loader = make_loader(digits.train, LoaderSettings(batch_size=64), train=True, generator=torch.Generator().manual_seed(0))
    with pytest.raises(NonFiniteLossError, match="non-finite in epoch 1 .*the last good checkpoint is"):
        trainer.fit(loader)
    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert last["global_step"] == 8  # saved before the first NaN step (the 10th)
    assert all(torch.isfinite(t).all() for t in last["model"].values())
    assert not (tmp_path / "checkpoints" / "best.pt").exists()


def test_a_nan_in_an_epochs_last_step_is_caught_before_the_epochs_checkpoint(digits, tmp_path):
    mf.register_loss("nan_after")(NaNAfter)
    torch.manual_seed(0)
    loader = make_loader(digits.train, LoaderSettings(batch_size=64), train=True, generator=torch.Generator().manual_seed(0))
    steps = len(loader)
    cfg = {**MLP, "losses": [{"type": "nan_after", "args": {"after": 2 * steps - 1}}]}  # the last step of epoch 2
    model = mf.build_model(cfg, in_dim=64, num_classes=10)
    callbacks = [mf.CALLBACKS.build({"type": "nan_guard", "args": {"check_every": 1000}}),
                 mf.CALLBACKS.build({"type": "checkpoint", "args": {"every_n_epochs": 1}})]
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), callbacks=callbacks, max_epochs=3,
                      run_dir=tmp_path)
    with pytest.raises(NonFiniteLossError, match="non-finite in epoch 2"):
        trainer.fit(loader)
    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert last["global_step"] == steps and all(torch.isfinite(t).all() for t in last["model"].values())


class EndsProcessAtEpochEnd(Callback):
    def __init__(self, process):
        self.process = process

    def on_epoch_end(self, trainer, row):
        self.process.kill()
        self.process.wait()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="process liveness via signal 0 (POSIX)")
def test_a_temp_file_whose_owner_ends_during_the_run_is_gone_when_fit_returns(digits, tmp_path):
    """A killed trainer's commit helper may still run when the resumed run's first save sweeps the
    folder (the sweep keeps its temp file then); the sweep after the last checkpoint removes it."""
    import subprocess
    import sys

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        temp = tmp_path / "checkpoints" / f".epoch0002-step0000010.pt.tmp-12345678+{owner.pid}-4"
        temp.parent.mkdir()
        temp.write_bytes(b"x")
        torch.manual_seed(0)
        model = mf.build_model(MLP, in_dim=64, num_classes=10)
        callbacks = [mf.CALLBACKS.build({"type": "checkpoint", "args": {"every_n_steps": 2}}), EndsProcessAtEpochEnd(owner)]
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), callbacks=callbacks, max_epochs=1,
                          max_steps=4, run_dir=tmp_path)
        trainer.fit(make_loader(digits.train, LoaderSettings(batch_size=64), train=True,
                                generator=torch.Generator().manual_seed(0)))
        assert (tmp_path / "checkpoints" / "last.pt").exists()
        assert not [p.name for p in temp.parent.iterdir() if p.name.startswith(".")]
    finally:
        owner.kill()
        owner.wait()


def test_max_steps_and_step_scheduler(digits):
    torch.manual_seed(0)
    model = mf.build_model(MLP, in_dim=64, num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = mf.SCHEDULERS.build({"type": "warmup_cosine", "args": {"warmup": 4}}, optimizer=opt, total_steps=10)
    trainer = Trainer(model, opt, scheduler=scheduler, scheduler_interval="step", max_epochs=10, max_steps=7)
    trainer.fit(make_loader(digits.train, LoaderSettings(batch_size=64), train=True, generator=torch.Generator().manual_seed(0)))
    assert trainer.global_step == 7 and len(trainer.history) == 1
    assert opt.param_groups[0]["lr"] == pytest.approx(scheduler.factor(7))


def test_warmup_cosine_shape():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = mf.SCHEDULERS.build({"type": "warmup_cosine", "args": {"warmup": 2, "min_factor": 0.1}}, optimizer=opt, total_steps=6)
    rates = [opt.param_groups[0]["lr"]]
    for _ in range(7):
        opt.step()
        sched.step()
        rates.append(opt.param_groups[0]["lr"])
    assert rates[:3] == pytest.approx([1.0, 2.0, 2.0])  # the first step already learns
    assert rates[6] == pytest.approx(0.2) and rates[7] == pytest.approx(0.2)
    assert all(a >= b for a, b in zip(rates[2:], rates[3:], strict=False))


def test_param_groups_no_decay_on_bias_and_norm_and_by_name():
    model = mf.build_model({"backbone": {"type": "mlp", "args": {"hidden_dims": [8], "norm": "layer"}}, "head": "linear"},
                           in_dim=4, num_classes=2)
    spec = {"type": "adamw", "args": {"lr": 1e-3, "weight_decay": 0.1},
            "param_groups": [{"select": ["bias", "norm"], "args": {"weight_decay": 0.0}},
                             {"select": "parts.head.*", "args": {"lr": 1e-4}}]}
    opt = build_optimizer(spec, model)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = [sorted(names[id(p)] for p in g["params"]) for g in opt.param_groups]
    assert groups[0] == ["parts.backbone.layer1.0.bias", "parts.backbone.layer1.1.bias", "parts.backbone.layer1.1.weight",
                         "parts.head.fc.bias"]
    assert groups[1] == ["parts.head.fc.weight"] and groups[2] == ["parts.backbone.layer1.0.weight"]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 0.1, 0.1]
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 1e-4, 1e-3]
    with pytest.raises(mf.ConfigError, match=r"train.optimizer.param_groups.0.args.wieght_decay: unknown argument"):
        build_optimizer({**spec, "param_groups": [{"select": ["bias"], "args": {"wieght_decay": 0}}]}, model)


class FakeTrainer:
    def __init__(self):
        self.stopped = None

    def direction(self, monitor):
        return "min" if monitor.endswith("loss") else "max"

    def request_stop(self, reason):
        self.stopped = reason


@pytest.mark.parametrize(
    ("values", "patience", "min_delta", "stop_epoch"),
    [
        ([0.5, 0.6, 0.6, 0.6, 0.6], 3, 0.0, 5),          # three consecutive bad evaluations
        ([0.5, 0.4, 0.6, 0.5, 0.7, 0.6], 2, 0.0, None),  # improvements reset the count
        ([0.5, 0.505, 0.509, 0.6], 2, 0.01, 3),          # gains within min_delta do not count
        ([0.5, float("nan"), float("nan")], 2, 0.0, 3),  # NaN is never an improvement
        ([0.5, 0.4], 0, 0.0, 2),                         # patience 0 stops at the first bad one
    ],
)
def test_early_stopping_edge_cases(values, patience, min_delta, stop_epoch):
    cb = mf.CALLBACKS.build({"type": "early_stopping", "args": {"patience": patience, "min_delta": min_delta}},
                            monitor="val_accuracy")
    trainer = FakeTrainer()
    stopped_at = None
    for epoch, value in enumerate(values, 1):
        cb.on_epoch_end(trainer, {"epoch": epoch, "val_accuracy": value})
        if trainer.stopped and stopped_at is None:
            stopped_at = epoch
    assert stopped_at == stop_epoch


def test_early_stopping_minimises_losses_and_resumes_its_count():
    cb = mf.CALLBACKS.build({"type": "early_stopping", "args": {"patience": 2}}, monitor="val_loss")
    trainer = FakeTrainer()
    for epoch, value in enumerate([-1.0, -2.0, -1.5], 1):  # negative losses: lower is still better
        cb.on_epoch_end(trainer, {"epoch": epoch, "val_loss": value})
    assert cb.best == -2.0 and cb.bad_evaluations == 1 and trainer.stopped is None
    fresh = mf.CALLBACKS.build({"type": "early_stopping", "args": {"patience": 2}}, monitor="val_loss")
    fresh.load_state_dict(cb.state_dict())
    fresh.on_epoch_end(trainer, {"epoch": 4, "val_loss": -1.9})
    assert trainer.stopped is not None
    typo = mf.CALLBACKS.build({"type": "early_stopping"}, monitor="val_los")
    with pytest.raises(mf.ConfigError, match="early_stopping monitors 'val_los', but the logged metrics are: val_loss"):
        typo.on_epoch_end(trainer, {"epoch": 5, "val_loss": 0.0})
    with pytest.raises(mf.BuildError, match="needs a metric to monitor"):
        mf.CALLBACKS.build("early_stopping")


@pytest.mark.parametrize(
    ("value", "best", "mode", "expected"),
    [(-0.5, -1.0, "max", True), (-1.5, -1.0, "max", False), (-1.5, -1.0, "min", True), (0.0, None, "min", True),
     (float("nan"), None, "max", False), (float("nan"), 1.0, "min", False), (1.0, 1.0, "max", False)],
)
def test_improvement_rule_handles_negatives_and_nan(value, best, mode, expected):
    assert improved(value, best, mode) is expected


class Counter(Callback):
    """Counts epochs across a resume (its state is the count)."""

    order = 10

    def __init__(self):
        self.count = 0

    def on_epoch_end(self, trainer, row):
        self.count += 1

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class Extra(Callback):
    order = 5  # sorts before Counter: it would shift a key made of the place among all callbacks


def test_a_callback_added_on_resume_does_not_take_another_callbacks_saved_state(digits):
    def trainer(callbacks):
        model = mf.build_model(MLP, in_dim=64, num_classes=10)
        return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), max_epochs=1, callbacks=callbacks)

    first = trainer([Counter(), Counter()])
    first.callbacks[0].count, first.callbacks[1].count = 3, 7
    states = {first._callback_key(cb): cb.state_dict() for cb in first.callbacks}
    assert set(states) == {"Counter.0", "Counter.1"}
    resumed = trainer([Extra(), Counter(), Counter()])
    for cb in resumed.callbacks:
        state = resumed._saved_callback_state(states, cb)
        if state is not None:
            cb.load_state_dict(state)
    assert [cb.count for cb in resumed.callbacks if isinstance(cb, Counter)] == [3, 7]
    # a checkpoint written before: keyed by the place among all callbacks
    older = trainer([Extra(), Counter()])
    assert older._saved_callback_state({"Extra.0": {}, "Counter.1": {"count": 5}}, older.callbacks[1]) == {"count": 5}
    two = trainer([Extra(), Counter(), Counter()])  # the older numbering: Counter.1 and Counter.3 (Extra at 2)
    saved = {"Counter.1": {"count": 1}, "Extra.2": {}, "Counter.3": {"count": 3}}
    assert [two._saved_callback_state(saved, cb) for cb in two.callbacks[1:]] == [{"count": 1}, {"count": 3}]


def test_a_later_fit_keeps_the_prepared_runnable_until_a_part_of_the_model_is_replaced(digits):
    from modforge.engines import build_engine

    torch.manual_seed(0)
    model = mf.build_model(MLP, in_dim=64, num_classes=10)
    engine = build_engine({"type": "compile", "args": {"backend": "eager"}})
    prepared = []
    prepare = engine.prepare
    engine.prepare = lambda m, example=None, *, train=False: prepared.append(example) or prepare(m, example, train=train)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), engine=engine, max_epochs=1)
    loader = make_loader(digits.train, LoaderSettings(batch_size=64), train=True, generator=torch.Generator().manual_seed(0))
    trainer.fit(loader)
    first = trainer.runnable
    trainer.max_epochs = 2
    trainer.fit(loader)  # training continued: no second compilation, warm-up or example batch
    assert len(prepared) == 1 and trainer.runnable is first and trainer.epoch == 2
    parent, name = next((m, n) for m in model.modules() for n, c in m.named_children() if isinstance(c, nn.Linear))
    setattr(parent, name, nn.Linear(getattr(parent, name).in_features, getattr(parent, name).out_features))
    trainer.max_epochs = 3
    trainer.fit(loader)  # a replaced layer: the runnable is made again, of the model as it is now
    assert len(prepared) == 2 and trainer.runnable is not first


def test_a_compiled_model_under_mixed_precision_is_compiled_once_for_training_and_once_for_evaluation(digits):
    import torch._dynamo
    from torch._dynamo.utils import counters

    from modforge.engines import build_engine

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = mf.build_model(MLP, in_dim=64, num_classes=10)
    engine = build_engine({"type": "compile", "args": {"backend": "eager"}})
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), engine=engine, precision="bf16", max_epochs=1)
    loader = make_loader(digits.train, LoaderSettings(batch_size=256, drop_last=True), train=True,
                         generator=torch.Generator().manual_seed(0))  # fmt: skip
    trainer.fit(loader, loader)  # evaluated on batches of the training batches' shape: no shape to recompile for
    # the engine's warm-up ran under the run's autocast: its graphs are the ones the steps and evaluation use
    assert counters["stats"]["unique_graphs"] == 2
