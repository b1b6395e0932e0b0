"""Fuzzing the config a user trains from: every mutation that must be refused — a wrong
type, a value out of range, an unknown name, a null where a part belongs, a YAML tag — is
exit status 2 with exactly one ``error:`` line that names the key (or the file, for YAML it
cannot read), and leaves no run folder behind. Mutations are drawn by hypothesis, one or two
at a time, on top of random *valid* settings, so an error is never masked by the context."""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modforge.cli.main import main

BASE = {
    "seed": 0,
    "data": {"type": "synthetic_classification", "args": {"num_samples": 120, "num_features": 8, "num_classes": 3, "informative": 4},
             "batch_size": 16},
    "model": {"backbone": {"type": "mlp", "args": {"hidden_dims": [8], "dropout": 0.0}}, "head": "linear",
              "losses": ["cross_entropy"]},
    "train": {"max_epochs": 1, "optimizer": {"type": "adam", "args": {"lr": 0.01, "weight_decay": 0.0}},
              "num_threads": 1, "progress": "never", "metrics": ["accuracy", "loss"]},
}  # fmt: skip

NAN, INF = math.nan, math.inf
REFUSED: dict[str, list] = {
    # the settings schema
    "train.max_epochs": [0, -1, 1.5, "three", True, None],
    "train.max_steps": [0, -1, "x"],
    "train.accumulate": [0, -2, 0.5],
    "train.grad_clip": [-1.0, 0.0, NAN, INF, "big"],
    "train.num_threads": [0, -1],
    "train.log_every": [0, -5],
    "train.device": ["tpu", "cuda:99", 3],
    "train.monitor": ["val_nothing", 5],
    "train.precision": ["fp8", 16.5],
    "train.engine": ["warp_drive"],
    "data.batch_size": [0, -1, 2**63, "many", 1.5, None],
    "data.type": ["imagenet_on_a_floppy", None, 7],
    "seed": ["abc", 1.5, [1]],
    # optimizer and its parameter groups
    "train.optimizer.type": ["adamm", None],
    "train.optimizer.args.lr": [-1.0, 0.0, INF, NAN, 1e39, "fast"],
    "train.optimizer.args.weight_decay": [-0.5, INF],
    "train.optimizer.args.betas": [[1.5, 0.9], [0.9], "x"],
    "train.scheduler": [{"type": "nope"}, {"type": "step_lr", "args": {"step_size": 0}},
                        {"type": "step_lr", "args": {"step_size": 1, "gamma": -1}}],
    # parts: names, nulls, ranges and types from their signatures
    "model.backbone.type": ["no_such_backbone", None, 3],
    "model.backbone.args.hidden_dims": [[0], [-4], "wide", [1.5]],
    "model.backbone.args.dropout": [-0.5, 1.5, NAN, "some"],
    "model.backbone.args.no_such_argument": [1],
    "model.head": [{"type": "linear", "args": {"dropout": 2.0}}, "no_such_head",
                   {"type": "linear", "args": {"num_classes": 21}}],
    "model.losses": [[{"type": "cross_entropy", "args": {"label_smoothing": 1.5}}], ["no_such_loss"], "cross_entropy!"],
    "model.nonsense": [{"a": 1}],
    "train.nonsense": [1],
}  # fmt: skip
"""Config key → values that must each be refused naming that key."""

VALID: dict[str, list] = {
    "train.optimizer.args.lr": [0.001, 0.1],
    "data.batch_size": [8, 32, 500],
    "model.backbone.args.dropout": [0.0, 0.5],
    "train.grad_clip": [None, 1.0],
    "seed": [0, 7],
}
"""Valid variations the mutations are mixed with."""


def _set(config: dict, path: str, value) -> None:
    node = config
    *parents, last = path.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value


mutation = st.sampled_from(sorted(REFUSED)).flatmap(lambda k: st.tuples(st.just(k), st.sampled_from(REFUSED[k])))
context = st.dictionaries(st.sampled_from(sorted(VALID)), st.none(), max_size=3).flatmap(
    lambda keys: st.fixed_dictionaries({k: st.sampled_from(VALID[k]) for k in keys})
)


def run_train(config_text: str) -> tuple[int, str, bool]:
    """``modforge train`` in a fresh folder, removed afterwards; (exit status, stderr, whether a run
    folder was left behind)."""
    err = io.StringIO()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="mf-fuzz-") as name:
        folder = Path(name)
        (folder / "fuzz.yaml").write_text(config_text)
        try:
            os.chdir(folder)
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = main(["train", "fuzz.yaml", "--run-dir", "run"])
        finally:
            os.chdir(cwd)
        return code, err.getvalue(), (folder / "run").exists()


def _named(key: str, message: str) -> bool:
    """The one error line names the mutated key (or the part slot it belongs to)."""
    parts = key.split(".")
    candidates = {".".join(parts[:n]) for n in range(2, len(parts) + 1)} | {key}
    return any(candidate in message for candidate in candidates)


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(mutation, min_size=1, max_size=2, unique_by=lambda m: m[0]), valid=context)
def test_every_refused_mutation_is_one_line_naming_the_key_and_leaves_nothing(mutations, valid):
    config = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in valid.items():
        if key not in dict(mutations):
            _set(config, key, value)
    for key, value in mutations:
        _set(config, key, value)
    code, err, left_behind = run_train(yaml.safe_dump(config))
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2, f"{mutations}: exit {code}\n{err}"
    assert len(lines) == 1 and "unexpected" not in lines[0], f"{mutations}:\n{err}"
    assert any(_named(key, lines[0]) for key, _ in mutations), f"{mutations}: the error does not name the key:\n{err}"
    assert not left_behind, f"{mutations}: a run folder was left behind"


@settings(max_examples=15, deadline=None)
@given(tag=st.sampled_from(["!!python/object/apply:os.system ['true']", "!!python/name:os.system", "!custom 3",
                            "&a [*a]", "{a: 1, a: 2}"]),  # fmt: skip
       key=st.sampled_from(["seed", "train.max_epochs", "model.head"]))
def test_yaml_the_safe_loader_refuses_is_one_line_naming_the_file(tag, key):
    text = yaml.safe_dump(BASE)
    leaf = key.split(".")[-1]
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{leaf}:"))
    indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
    lines[index] = f"{indent}{leaf}: {tag}"
    code, err, left_behind = run_train("\n".join(lines) + "\n")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "fuzz.yaml" in errors[0], err
    assert not left_behind
