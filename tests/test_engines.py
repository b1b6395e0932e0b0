"""Engines: the contract, parity with eager over the registry, training through engines,
save/load round trips, fallbacks and a user-defined engine."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import pytest
import torch

import modforge as mf
from modforge.components.base import Backbone
from modforge.core.layouts import Layout
from modforge.data import LoaderSettings, make_loader
from modforge.data.base import collate
from modforge.engines import Capabilities, Engine, EngineError, build_engine
from modforge.engines.artifact import make_metadata
from modforge.testing.subjects import subjects_for
from modforge.train.trainer import Trainer

PARITY_ENGINES = ("torchscript", "onnx")


def model_for(backbone: str) -> tuple[Any, torch.Tensor]:
    """A full model around ``backbone`` (its first accepted layout) and a 5-sample input."""
    subject = subjects_for("backbone", backbone)[0]
    model = mf.build_model(
        {"backbone": backbone, "head": "linear", "losses": ["cross_entropy"]}, in_dim=subject.in_dim, num_classes=5
    )
    x = torch.cat([subject.example, subject.example[:1] * 0.5])  # another batch size than the example's
    return model.eval(), x


def close(got: torch.Tensor, ref: torch.Tensor) -> tuple[bool, float]:
    """Max abs difference ≤ 1e-5 relative to the output's scale."""
    diff = float((got - ref).abs().max())
    return diff <= 1e-5 * max(1.0, float(ref.abs().max())), diff


def test_the_built_in_engines_are_registered_with_their_capabilities():
    assert {"eager", "torchscript", "compile", "onnx"} <= set(mf.ENGINES.list())
    engines = {name: build_engine(name) for name in ("eager", "torchscript", "compile", "onnx")}
    assert all(isinstance(e.capabilities, Capabilities) for e in engines.values())
    assert [name for name, e in engines.items() if not e.capabilities.can_train] == ["onnx"]
    assert [name for name, e in engines.items() if not e.capabilities.multi_device] == ["torchscript", "onnx"]


@functools.lru_cache(maxsize=1)
def eager_reference(backbone: str) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """``model_for(backbone)`` and its eager logits, built once for both engines' tests (they run one after
    the other; preparing an engine reads the model and leaves it as it was)."""
    model, x = model_for(backbone)
    with torch.no_grad():
        return model, x, model(x)


@pytest.mark.parametrize("engine", PARITY_ENGINES)
@pytest.mark.parametrize("backbone", mf.BACKBONES.list())
def test_every_backbone_matches_eager_under_every_engine(backbone, engine):
    model, x, ref = eager_reference(backbone)
    example = {"input": x[:4], "label": torch.zeros(4, dtype=torch.long)}
    # ONNX Runtime on one thread: its pool of spinning threads adds CPU, not coverage (the default
    # thread count runs in test_saved_artifacts_load_and_predict_like_the_model and the spoofing export)
    spec = {"type": engine, "args": {"threads": 1} if engine == "onnx" else {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchscript says when it traces instead of scripting (tested below)
        runnable = build_engine(spec).prepare(model, example)
    with torch.no_grad():
        got = runnable({"input": x})["logits"]
    ok, diff = close(got, ref)
    assert ok, f"{backbone} under {engine}: max abs diff {diff:.3g}"


def test_torchscript_scripts_what_it_can_and_says_what_tracing_loses():
    model, x = model_for("cnn")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a scriptable model: no warning at all
        build_engine("torchscript").prepare(model, {"input": x})
    model, x = model_for("resnet18")  # documented as not scriptable (a tensor-or-list output): traced, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_engine("torchscript").prepare(model, {"input": x})
    with pytest.raises(EngineError, match="stage 'backbone' .* cannot be scripted"):
        build_engine({"type": "torchscript", "args": {"strategy": "script"}}).prepare(model, {"input": x})

    @mf.register_backbone("lambda_mlp")
    class LambdaMLP(torch.nn.Module):  # a part of one's own that TorchScript cannot compile, saying nothing
        def __init__(self, in_dim: int):
            super().__init__()
            self.lin, self.out_dim = torch.nn.Linear(in_dim, 16), 16

        def forward(self, x):
            act = lambda t: torch.relu(self.lin(t))  # noqa: E731 - the point: no lambdas in TorchScript
            return act(x)

    model = mf.build_model({"backbone": "lambda_mlp", "head": "linear", "losses": ["cross_entropy"]}, in_dim=64,
                           num_classes=10)  # fmt: skip
    with pytest.warns(UserWarning, match="traced it instead — a trace records one run"):
        build_engine("torchscript").prepare(model, {"input": torch.randn(4, 64)})


def train_losses(engine: str | dict | Engine | None, epochs: int = 2) -> tuple[list, dict]:
    """Train/val loss of each epoch of an MLP (with dropout) on the digits, and its final weights."""
    splits = mf.DATASETS.build({"type": "digits", "args": {"as_image": False}}, seed=0)
    generator = torch.Generator().manual_seed(1)
    torch.manual_seed(0)
    model = mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [32], "dropout": 0.1}}, "head": "linear",
         "losses": ["cross_entropy"]},
        in_dim=64,
        num_classes=10,
    )
    loader = make_loader(splits.train, LoaderSettings(batch_size=64), train=True, generator=generator)
    val = make_loader(splits.val, LoaderSettings(batch_size=64), train=False)
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        max_epochs=epochs,
        engine=engine if isinstance(engine, Engine) or engine is None else build_engine(engine),
        metrics={"loss": mf.METRICS.build("loss")},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(loader, val)
    return [v for row in trainer.history for v in (row["train_loss"], row["val_loss"])], model.state_dict()


def test_training_under_torchscript_follows_eager_exactly():
    ref, ref_state = train_losses("eager")
    got, state = train_losses("torchscript")
    assert got == pytest.approx(ref, abs=1e-5)
    assert all(torch.allclose(state[k], ref_state[k], atol=1e-5) for k in ref_state)


@pytest.mark.slow
def test_training_under_compile_follows_eager():
    ref, _ = train_losses("eager")
    got, _ = train_losses("compile")
    assert got == pytest.approx(ref, abs=1e-5)


@pytest.mark.slow
def test_validation_best_and_test_use_the_average_under_compile(cli, write, tmp_path):
    """tests/test_ema.py's check of the weight average under the compile engine, kept in this file so that
    it runs in the process that compiled just above (``--dist loadfile``: one file, one worker). A first
    compile pays for TorchInductor's start; with an empty compile cache, as on a fresh CI machine, this
    check took ~22 s alone and 4.5 s after the training test's compile."""
    from test_ema import check_validation_best_and_test_use_the_average

    check_validation_best_and_test_use_the_average(cli, write, tmp_path, "compile")


def test_onnx_exports_a_dynamic_time_axis_for_sequences():
    model = mf.build_model({"backbone": "attention_pool_mlp", "head": "linear"}, in_dim=12, num_classes=5).eval()
    runner = build_engine("onnx").prepare(model, {"input": torch.randn(2, 10, 12)})
    for shape in [(3, 10, 12), (1, 37, 12)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            ok, diff = close(runner({"input": x})["logits"], model(x))
        assert ok, (shape, diff)


def test_compile_falls_back_to_eager_with_a_warning():
    model, x = model_for("mlp")
    engine = build_engine({"type": "compile", "args": {"backend": "no_such_backend"}})
    with pytest.warns(UserWarning, match="compile: torch.compile .* failed .* running the model in eager mode"):
        runnable = engine.prepare(model, {"input": x})
    assert runnable is model


def test_an_inference_only_engine_is_refused_before_any_work():
    model, _ = model_for("mlp")
    with pytest.raises(EngineError, match="engine 'onnx' runs inference only and cannot train"):
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), engine=build_engine("onnx"))


@pytest.mark.parametrize("engine", ["eager", "torchscript", "onnx", "compile"])
def test_saved_artifacts_load_and_predict_like_the_model(engine, tmp_path):
    model, x = model_for("cnn")
    subject = subjects_for("backbone", "cnn")[0]
    chosen = build_engine(engine if engine != "compile" else {"type": "compile", "args": {"backend": "eager"}})
    metadata = make_metadata(
        engine=engine, model={"backbone": "cnn", "head": "linear", "losses": ["cross_entropy"]},
        build={"in_dim": subject.in_dim, "num_classes": 5}, input_shape=list(x.shape[1:]), input_layout="image",
        class_names=[str(i) for i in range(5)],
    )
    runnable = chosen.prepare(model, {"input": x})
    path = chosen.save(runnable, tmp_path / f"model{chosen.suffix}", metadata)
    loaded, meta = build_engine(engine).load(path)
    assert meta["class_names"] == metadata["class_names"] and meta["engine"] == engine
    with torch.no_grad():
        ok, diff = close(loaded({"input": x})["logits"], model(x))
    assert ok, diff
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(EngineError):
        build_engine(engine).load(path)


class Float64(Engine):
    """A user's engine: runs (and trains) the model in float64."""

    capabilities = Capabilities(can_train=True, multi_device=True, dynamic_shapes=True, needs_example_input=False)

    def prepare(self, model, example=None, *, train=False):
        model.double()  # in place: the optimizer's parameters stay the same objects
        return _CastingModule(model)

    def save(self, runnable, path, metadata):
        raise EngineError("float64_test does not save")

    def load(self, path):
        raise EngineError("float64_test does not load")


class _CastingModule(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, batch):
        batch = dict(batch, input=batch["input"].double())
        return self.model(batch)


def test_a_user_defined_engine_trains_through_the_same_trainer():
    mf.register_engine("float64_test", force=True)(Float64)
    try:
        ref, _ = train_losses("eager")
        got, state = train_losses("float64_test")
    finally:
        mf.ENGINES.remove("float64_test")
    assert all(v.dtype == torch.float64 for k, v in state.items() if v.is_floating_point())
    assert got == pytest.approx(ref, abs=1e-4)  # the same training, in higher precision


class SpectrumMagnitude(Backbone):
    """A part ONNX cannot export (an FFT): the conformance check must say so."""

    accepts = (Layout.VECTOR,)

    def __init__(self, in_dim: int = 16):
        super().__init__()
        self.out_dim = in_dim // 2 + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x).abs()


def test_the_conformance_check_fails_an_unexportable_part_unless_it_declares_it():
    from modforge.testing import check_part

    def engines_row(part):
        return next(r for r in check_part("backbone", part) if r.check == "engines")

    row = engines_row(SpectrumMagnitude)
    assert row.status == "fail" and "onnx" in row.detail and "unsupported_engines" in row.detail

    class Declared(SpectrumMagnitude):
        unsupported_engines = {"onnx": "torch.fft has no ONNX export here"}

    row = engines_row(Declared)
    assert row.status == "pass" and "onnx: declared unsupported (torch.fft has no ONNX export here)" in row.detail
    assert "torchscript ≤" in row.detail


def test_an_engine_that_cannot_use_several_devices_says_so_and_training_goes_on(monkeypatch, caplog):
    torchscript, eager = build_engine("torchscript"), build_engine("eager")
    assert "cannot use several devices (4 visible); training on one" in torchscript.single_device_note("cuda", 4, 1)
    assert torchscript.single_device_note("cuda", 1, 1) is None and torchscript.single_device_note("cpu", 1, 1) is None
    assert eager.single_device_note("cuda", 4, 2) is None
    monkeypatch.setenv("WORLD_SIZE", "2")
    model, _ = model_for("mlp")
    with caplog.at_level("WARNING", logger="modforge.train"):
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), engine=torchscript)
    assert "engine 'torchscript' cannot train across 2 processes" in caplog.text
    assert "training with the eager engine instead" in caplog.text and type(trainer.engine).__name__ == "Eager"


def test_a_loader_without_a_generator_keeps_its_order_under_every_engine():
    """The example batch an engine needs is drawn without touching the global RNG."""
    from torch.utils.data import DataLoader

    def losses(engine: str) -> list[float]:
        splits = mf.DATASETS.build({"type": "digits", "args": {"as_image": False}}, seed=0)
        torch.manual_seed(0)
        model = mf.build_model({"backbone": {"type": "mlp", "args": {"hidden_dims": [16], "dropout": 0.2}},
                                "head": "linear", "losses": ["cross_entropy"]}, in_dim=64, num_classes=10)
        loader = DataLoader(splits.train, batch_size=128, shuffle=True, collate_fn=collate)
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), max_epochs=2, engine=build_engine(engine))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(loader)
        return [row["train_loss"] for row in trainer.history]

    assert losses("torchscript") == pytest.approx(losses("eager"), abs=1e-6)


def test_resuming_mid_epoch_under_torchscript_ends_like_an_uninterrupted_run(tmp_path):
    from modforge.train.checkpoint import list_checkpoints, load_checkpoint

    def run(folder, resume=None):
        splits = mf.DATASETS.build({"type": "digits", "args": {"as_image": False}}, seed=0)
        generator = torch.Generator().manual_seed(3)
        torch.manual_seed(0)
        model = mf.build_model({"backbone": {"type": "mlp", "args": {"hidden_dims": [16], "dropout": 0.2}},
                                "head": "linear", "losses": ["cross_entropy"]}, in_dim=64, num_classes=10)
        loader = make_loader(splits.train, LoaderSettings(batch_size=64), train=True, generator=generator)
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), max_epochs=2, run_dir=folder,
                          engine=build_engine("torchscript"),
                          callbacks=[mf.CALLBACKS.build({"type": "checkpoint", "args": {"every_n_steps": 7}})])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(loader, resume=resume)
        return [row["train_loss"] for row in trainer.history], model.state_dict()

    ref_losses, ref_state = run(tmp_path / "full")
    middle = [p for p in list_checkpoints(tmp_path / "full" / "checkpoints")
              if load_checkpoint(p)["batch_in_epoch"] > 0][-1]  # the earliest mid-epoch one still kept
    losses, state = run(tmp_path / "resumed", resume=load_checkpoint(middle))
    assert losses == ref_losses and all(torch.equal(state[k], ref_state[k]) for k in ref_state)


def test_an_artifact_suffix_names_its_engine_only_when_one_engine_owns_it():
    from modforge.engines import engine_for_suffix
    from modforge.engines.base import first_sentence

    assert engine_for_suffix(".ts") == "torchscript" and engine_for_suffix(".ONNX") == "onnx"
    assert engine_for_suffix(".pt") is None  # eager and compile: the artifact's metadata says which
    assert engine_for_suffix(".nope") is None and engine_for_suffix("") is None
    noisy = RuntimeError("\x1b[1mfailed reading zip archive.\x1b[0m This is an internal error.\n If you see it, report")
    assert first_sentence(noisy) == "failed reading zip archive."
