"""A run's life from the command line: made only once everything is built, resumed under any
engine (the documentation's own float64 example), restarted when it never reached a checkpoint,
timed over all its sessions, evaluated without losing earlier results — and trained by a
plug-in Trainer subclass (delira's closure / prepare_batch)."""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
from pathlib import Path

import pytest
import torch

from modforge.train.checkpoint import atomic_save, load_checkpoint
from run_configs import ADAM, mlp, run_config, synthetic

ROOT = Path(__file__).resolve().parents[1]

TINY = run_config(synthetic(240, batch_size=32), mlp(16), seed=1, train=dict(
    max_epochs=2, optimizer=ADAM, metrics="[accuracy, loss, confusion_matrix]", num_threads=1, progress="never"))


@pytest.fixture
def tiny(write):
    return write("tiny.yaml", TINY)


def _readme_block(marker: str) -> str:
    """The documentation's Python code block that contains ``marker``, as written there."""
    pages = "\n".join(page.read_text() for page in sorted((ROOT / "docs").rglob("*.md")))
    blocks = re.findall(r"```python\n(.*?)```", pages, flags=re.S)
    (block,) = [b for b in blocks if marker in b]
    return block


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def test_the_readme_float64_engine_resumes_exactly(cli, write, tmp_path):
    write("f64.py", _readme_block('@mf.register_engine("float64")'))
    config = write("f64.yaml", TINY.replace("num_threads: 1", "num_threads: 1\n  engine: float64"))
    assert cli("train", str(config), "--plugins", "f64.py", "--run-dir", "whole", "train.max_epochs=3").code == 0
    assert cli("train", str(config), "--plugins", "f64.py", "--run-dir", "cut").code == 0
    res = cli("train", "--resume", "cut", "train.max_epochs=3")
    assert res.code == 0, res.err
    whole, cut = _weights(tmp_path / "whole/checkpoints/last.pt"), _weights(tmp_path / "cut/checkpoints/last.pt")
    assert all(v.dtype == torch.float64 for v in cut.values() if v.is_floating_point())
    assert all(torch.equal(whole[k], cut[k]) for k in whole)


@pytest.mark.parametrize("continual", [False, True])
def test_a_model_with_nothing_to_train_on_is_refused_before_any_folder(cli, write, tmp_path, continual):
    """No losses and no stage that writes one: refused naming model.losses (a continual
    algorithm used to fail with KeyError: 'loss' at its first step)."""
    text = TINY.replace("  losses: [cross_entropy]\n", "")
    if continual:
        text = text.replace("synthetic_classification, args: {num_samples: 240, num_features: 8, num_classes: 3}",
                            "seq_digits, args: {as_image: false}") + "continual: {algorithm: der, epochs_per_task: 1}\n"
    res = cli("train", str(write("nolosses.yaml", text)), "--run-dir", "run")
    assert res.code == 2 and "model.losses: the model has no loss" in res.err and "e.g. losses: [cross_entropy]" in res.err
    assert not (tmp_path / "run").exists()


def test_the_demo_config_runs_with_one_epoch(cli, tmp_path):
    res = cli("train", str(ROOT / "configs/digits.yaml"), "--epochs", "1", "--run-dir", "one",
              "model.backbone.args.channels=[4,8]", "train.callbacks=[lr_monitor]")  # fmt: skip
    assert res.code == 0, res.err
    assert "warmup (2 epoch(s) of 40 optimizer steps) is not shorter than the run (40 optimizer steps)" in res.err
    assert res.err.count("not shorter than the run") == 1 and "shortened to 39 optimizer steps" in res.err
    assert json.loads((tmp_path / "one/summary.json").read_text())["epochs"] == 1
    (row,) = csv.DictReader((tmp_path / "one/metrics.csv").open())
    assert float(row["lr"]) == pytest.approx(3.0e-3)  # the epoch's last step trains at the full rate


def test_train_seconds_count_every_session(cli, tiny, tmp_path):
    assert cli("train", str(tiny), "--run-dir", "run", "train.max_epochs=1").code == 0
    first = load_checkpoint(tmp_path / "run/checkpoints/last.pt")["train_seconds"]
    assert first > 0
    assert cli("train", "--resume", "run", "train.max_epochs=2").code == 0
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["train_seconds"] >= round(first, 3)
    assert load_checkpoint(tmp_path / "run/checkpoints/last.pt")["train_seconds"] > first


def test_testing_a_changed_best_checkpoint_keeps_the_earlier_evaluation(cli, tiny, tmp_path):
    assert cli("train", str(tiny), "--run-dir", "run").code == 0
    assert cli("test", "run").code == 0
    evaluations = tmp_path / "run/evaluations"
    earlier = (evaluations / "best-test.json").read_text()
    best = tmp_path / "run/checkpoints/best.pt"
    payload = load_checkpoint(best)
    payload["model"] = {k: (v * 0 if v.is_floating_point() else v) for k, v in payload["model"].items()}
    best.unlink()  # best.pt may be a link to a periodic file: replace the name only
    atomic_save(payload, best)
    assert cli("test", "run").code == 0
    assert (evaluations / "best-test.json").read_text() == earlier  # not overwritten
    records = sorted(evaluations.glob("best-test*.json"))
    assert len(records) == 2
    later = json.loads(next(p for p in records if p.name != "best-test.json").read_text())
    assert later["checkpoint_sha256"] != json.loads(earlier)["checkpoint_sha256"]
    assert cli("test", "run").code == 0 and len(list(evaluations.glob("best-test*.json"))) == 2  # same weights


def test_a_run_killed_before_its_first_checkpoint_restarts_on_resume(cli, tiny, tmp_path):
    assert cli("train", str(tiny), "--run-dir", "done", "train.max_epochs=1").code == 0
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed/config.yaml").write_text((tmp_path / "done/config.yaml").read_text())
    res = cli("train", "--resume", "killed")
    assert res.code == 0, res.err
    assert "no checkpoint" in res.err and "from the start" in res.err
    assert (tmp_path / "killed/checkpoints/last.pt").exists() and (tmp_path / "killed/summary.json").exists()
    (tmp_path / "broken/checkpoints").mkdir(parents=True)  # a checkpoint that does not load is never restarted over
    (tmp_path / "broken/config.yaml").write_text((tmp_path / "done/config.yaml").read_text())
    (tmp_path / "broken/checkpoints/last.pt").write_bytes(b"not a checkpoint")
    res = cli("train", "--resume", "broken")
    assert res.code == 2 and "no usable checkpoint" in res.err
    assert (tmp_path / "broken/checkpoints/last.pt").read_bytes() == b"not a checkpoint"


def test_resuming_a_checkpoint_file_leaves_no_temporary_folder(cli, tiny, tmp_path, monkeypatch):
    assert cli("train", str(tiny), "--run-dir", "run", "train.max_epochs=1").code == 0
    loose = tmp_path / "loose.pt"
    loose.write_bytes((tmp_path / "run/checkpoints/last.pt").read_bytes())
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    res = cli("train", "--resume", str(loose), "--run-dir", "moved", "train.max_epochs=2")
    assert res.code == 0, res.err
    assert list(temp.iterdir()) == [] and (tmp_path / "moved/summary.json").exists()
    payload = load_checkpoint(loose)
    del payload["config"]
    atomic_save(payload, tmp_path / "noconfig.pt")
    res = cli("train", "--resume", "noconfig.pt", "--run-dir", "x")
    assert res.code == 2 and "holds no config" in res.err and "unexpected" not in res.err
    assert not (tmp_path / "x").exists()


def test_unusable_run_folders_are_refused_before_anything_is_made(cli, tiny, tmp_path):
    (tmp_path / "afile").write_text("")
    res = cli("train", str(tiny), "--run-dir", "afile/run")
    assert res.code == 2 and "--run-dir afile/run" in res.err and "is a file" in res.err
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "ro").mkdir(mode=0o555)
        res = cli("train", str(tiny), "--run-dir", "ro/run")
        assert res.code == 2 and "not writable" in res.err
    for folds in ("0", "100000"):
        res = cli("kfold", str(tiny), "--folds", folds, "--run-dir", "cv")
        assert res.code == 2 and "--folds" in res.err and "unexpected" not in res.err
        assert not (tmp_path / "cv").exists() and not (tmp_path / "runs").exists()


def test_checkpoints_whose_weights_do_not_fit_their_config_are_one_line(cli, tiny, tmp_path):
    assert cli("train", str(tiny), "--run-dir", "run", "train.max_epochs=1").code == 0
    last = tmp_path / "run/checkpoints/last.pt"
    payload = load_checkpoint(last)
    payload["config"]["model"]["backbone"]["args"]["hidden_dims"] = [32]
    atomic_save(payload, tmp_path / "other.pt")
    res = cli("test", "other.pt")
    assert res.code == 2 and "do not fit the model" in res.err and len(res.err.strip().splitlines()) == 1
    del payload["config"]
    atomic_save(payload, tmp_path / "bare.pt")
    res = cli("test", "bare.pt")
    assert res.code == 2 and "holds no config" in res.err
    (tmp_path / "run/config.yaml").write_text(
        (tmp_path / "run/config.yaml").read_text().replace("hidden_dims:\n      - 16", "hidden_dims:\n      - 32")
    )
    res = cli("train", "--resume", "run", "train.max_epochs=2")
    assert res.code == 2 and "do not fit the model" in res.err and "Traceback" not in res.err
    assert [line for line in res.err.splitlines() if line.startswith("error:")] == res.err.splitlines()[-1:]


TRAINER_PLUGIN = """
import torch

from modforge.train.trainer import Trainer
from modforge.train.trainers import register_trainer


@register_trainer("all_zero")
class AllZero(Trainer):
    \"\"\"Trains every batch as if its label were class 0 (delira's closure, changed).\"\"\"

    def training_step(self, batch):
        return super().training_step(dict(batch, label=torch.zeros_like(batch["label"])))


class Counting(Trainer):
    \"\"\"Counts the batches it prepares (delira's prepare_batch).\"\"\"

    prepared = 0

    def prepare_batch(self, batch):
        type(self).prepared += 1
        return super().prepare_batch(batch)
"""

DIGITS = """
plugins: [my_trainer.py]
seed: 0
data: {type: digits, args: {as_image: false}, batch_size: 64}
model: {backbone: {type: mlp, args: {hidden_dims: [16]}}, head: linear, losses: [cross_entropy]}
train:
  max_epochs: 2
  trainer: all_zero
  optimizer: {type: adam, args: {lr: 0.02}}
  metrics: [accuracy, confusion_matrix]
  num_threads: 1
  progress: never
"""


def test_a_plug_in_trainer_subclass_trains_a_digits_run(cli, write, tmp_path):
    write("my_trainer.py", TRAINER_PLUGIN)
    config = write("digits.yaml", DIGITS)
    res = cli("train", str(config), "--run-dir", "zero")
    assert res.code == 0, res.err
    matrix = torch.tensor(json.loads((tmp_path / "zero/summary.json").read_text())["test"]["confusion_matrix"])
    assert matrix[:, 1:].sum() == 0 and matrix[:, 0].sum() == matrix.sum()  # every prediction: class 0
    res = cli("train", str(config), "--run-dir", "plain", "train.trainer=null")
    assert res.code == 0, res.err
    plain = torch.tensor(json.loads((tmp_path / "plain/summary.json").read_text())["test"]["confusion_matrix"])
    assert plain[:, 1:].sum() > 0
    res = cli("train", str(config), "--run-dir", "counted", "train.trainer=my_trainer.py:Counting",
              "train.max_epochs=1")  # fmt: skip
    assert res.code == 0, res.err
    res = cli("train", str(config), "--run-dir", "bad", "train.trainer=all_zer")
    assert res.code == 2 and "did you mean 'all_zero'" in res.err and not (tmp_path / "bad").exists()


def test_a_warmup_as_long_as_the_run_is_shortened_so_the_run_reaches_the_full_rate(cli, tmp_path):
    """warmup 2 in a two-epoch run used to spend the whole run below the full rate, silently."""
    config = ROOT / "configs" / "digits.yaml"
    res = cli("train", str(config), "--epochs", "2", "train.progress=never", "--run-dir", "two")
    assert res.code == 0, res.err
    assert "not shorter than the run (80 optimizer steps); shortened to 79 optimizer steps, so the rate rises " \
        "from 0× over the first 79 and reaches the full rate only at the last" in res.err  # what the lr column shows
    rows = list(csv.DictReader((tmp_path / "two" / "metrics.csv").open()))
    assert float(rows[0]["lr"]) == pytest.approx(3e-3 * 40 / 79)  # the first epoch ends half-way up, as said
    assert float(rows[-1]["lr"]) == pytest.approx(3e-3)  # the last step at the configured rate


def test_num_threads_beyond_any_machine_and_num_classes_against_the_data_are_refused_by_config(cli):
    config = str(ROOT / "configs" / "digits.yaml")
    res = cli("config", config, "train.num_threads=100000")
    assert res.code == 2 and "train.num_threads: expected a whole number in (0," in res.err
    res = cli("config", config, "model.head.args.num_classes=21")
    assert res.code == 2 and "model.head.args.num_classes: the data has 10 classes" in res.err


def test_a_run_extended_on_resume_replans_its_schedule_instead_of_training_at_the_end_rate(cli, tmp_path):
    """--resume RUN train.max_epochs=5 after 3 epochs: the added epochs used to train at the
    cosine's end rate (0), silently."""
    config = str(ROOT / "configs" / "digits.yaml")
    assert cli("train", config, "--epochs", "3", "train.progress=never", "--run-dir", "ext").code == 0
    res = cli("train", "--resume", "ext", "train.max_epochs=5", "train.progress=never")
    assert res.code == 0, res.err
    assert "planned for 120 optimizer steps (warm-up 80, 40 per epoch) and now has 200 optimizer steps" in res.err
    rates = [float(row["lr"]) for row in csv.DictReader((tmp_path / "ext" / "metrics.csv").open())]
    assert len(rates) == 5 and rates[3] > 0 and rates[4] > 0 and rates[3] > rates[4]


def test_resuming_an_earlier_checkpoint_in_place_is_refused_and_branching_works(cli, tiny, tmp_path):
    """It used to cut the run's metrics.csv and overwrite best.pt/last.pt/summary.json silently."""
    assert cli("train", str(tiny), "--run-dir", "run", "train.max_epochs=3").code == 0
    earliest = sorted((tmp_path / "run" / "checkpoints").glob("epoch*.pt"))[0]
    before = (tmp_path / "run" / "metrics.csv").read_text()
    res = cli("train", "--resume", str(earliest))
    assert res.code == 2 and "is earlier than where" in res.err and "--run-dir NEW" in res.err
    assert (tmp_path / "run" / "metrics.csv").read_text() == before
    res = cli("train", "--resume", str(earliest), "--run-dir", "branch")
    assert res.code == 0, res.err
    assert (tmp_path / "branch" / "summary.json").exists()


def test_a_datasets_own_num_classes_argument_states_its_class_count(cli, tiny):
    """synthetic_classification's num_classes (3 in TINY) is known before generating anything."""
    res = cli("config", str(tiny), "model.head.args.num_classes=4")
    assert res.code == 2 and "model.head.args.num_classes: the data has 3 classes" in res.err
    assert cli("config", str(tiny), "model.head.args.num_classes=3").code == 0
