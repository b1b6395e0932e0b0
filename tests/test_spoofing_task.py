"""The spoofing task end to end: a tiny synthetic corpus, train + test from the CLI, score files,
per-attack metrics, DET plots, windowed scoring, cross-dataset evaluation, export and predict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

import modforge as mf
from modforge.data.audio.spoof_corpus import make_spoof_corpus
from modforge.tasks.spoofing import metrics as detection
from modforge.tasks.spoofing.scores import ScoreTable, read_score_file

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "spoof"
    make_spoof_corpus(out, utts=60, seed=0, duration=0.5)
    return out


def _overrides(corpus: Path, epochs: int = 2) -> list[str]:
    return [f"data.args.root={corpus}", f"train.max_epochs={epochs}", "data.args.audio.seconds=0.5",
            "data.batch_size=16", "train.num_threads=1"]


def _eval_files(corpus: Path) -> list[list[str]]:
    return [line.split() for line in (corpus / "protocols" / "eval.txt").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def one_epoch(corpus, tmp_path_factory) -> Path:
    """``lfcc_mlp.yaml`` trained for one epoch on the corpus, once for the tests that only test, export and
    predict from such a run: each gets a copy of its own (:func:`_one_epoch_run`)."""
    from modforge.cli.main import main
    from registry_state import registries_restored

    run = tmp_path_factory.mktemp("one-epoch") / "run"
    with registries_restored():
        code = main(["train", str(ROOT / "configs" / "spoofing" / "lfcc_mlp.yaml"), *_overrides(corpus, epochs=1),
                     "--run-dir", str(run)])  # fmt: skip
    assert code == 0
    return run


def _one_epoch_run(one_epoch: Path, tmp_path: Path) -> None:
    """The module's one-epoch run copied to ``tmp_path / "run"`` (the test's cwd): what
    ``modforge train lfcc_mlp.yaml ... train.max_epochs=1 --run-dir run`` leaves there."""
    import shutil

    shutil.copytree(one_epoch, tmp_path / "run", symlinks=True)


def test_train_and_test_a_small_system(cli, corpus, tmp_path):
    config = str(ROOT / "configs" / "spoofing" / "lfcc_mlp.yaml")
    res = cli("train", config, *_overrides(corpus), "--run-dir", "run")
    assert res.code == 0, res.err
    run = tmp_path / "run"
    for name in ("scores.txt", "det.png", "summary.json", "metrics.csv", "checkpoints/best.pt"):
        assert (run / name).exists(), name
    summary = json.loads((run / "summary.json").read_text())
    assert summary["monitor"] == "val_eer" and "val_eer" in summary["best"]
    protocol = _eval_files(corpus)
    table = read_score_file(run / "scores.txt")
    assert table.utt_ids == [fields[1] for fields in protocol]  # one line per eval file, in protocol order
    assert table.attacks == [fields[3] for fields in protocol]
    eer, _ = detection.eer(table.scores, table.labels)
    assert summary["test"]["eer"] == pytest.approx(eer, abs=1e-6) and 0.0 <= eer <= 1.0
    assert summary["test"]["files"] == len(protocol)
    unseen = set(json.loads((corpus / "meta.json").read_text())["unseen_attacks"])
    assert unseen and unseen <= set(summary["test_per_attack"])  # attacks never seen in training are scored

    train_protocol = [line.split() for line in (corpus / "protocols" / "train.txt").read_text().splitlines() if line]
    trained_attacks = {fields[3] for fields in train_protocol if fields[4] == "spoof"}
    bona = table.labels == 1
    for name, chosen in (("seen", trained_attacks), ("unseen", unseen)):
        keep = bona | np.isin(table.attacks, sorted(chosen))
        expected = detection.eer(table.scores[keep], table.labels[keep])[0]
        assert summary[f"test_{name}"]["eer"] == pytest.approx(expected, abs=1e-9), name
        assert summary[f"test_{name}"]["spoofed_files"] == int((~bona & keep).sum()) > 0

    res = cli("test", str(run))
    assert res.code == 0, res.err
    assert "eer" in res.out and "per attack" in res.out and sorted(unseen)[0] in res.out and "unseen" in res.out
    evaluations = run / "evaluations"
    for name in ("best-test.json", "best-test-scores.txt", "best-test-det.png"):
        assert (evaluations / name).exists(), name
    record = json.loads((evaluations / "best-test.json").read_text())
    assert record["unseen"]["eer"] == pytest.approx(summary["test_unseen"]["eer"])
    assert record["eer"] == pytest.approx(summary["test"]["eer"]) and set(record["per_attack"]) == set(
        summary["test_per_attack"]
    )


def test_windowed_scoring_averages_windows_per_file(cli, corpus, tmp_path):
    config = str(ROOT / "configs" / "spoofing" / "lfcc_mlp.yaml")
    overrides = [*_overrides(corpus, epochs=1), "data.args.audio.seconds=0.2", "data.args.audio.eval_mode=windows"]
    res = cli("train", config, *overrides, "--run-dir", "run")
    assert res.code == 0, res.err
    table = read_score_file(tmp_path / "run" / "scores.txt")
    assert len(table) == len(_eval_files(corpus))  # 0.5 s files in 0.2 s windows: 3 windows each, one score


def test_cross_dataset_evaluation_with_overrides(cli, corpus, one_epoch, tmp_path):
    _one_epoch_run(one_epoch, tmp_path)
    meta = tmp_path / "itw" / "meta.csv"
    meta.parent.mkdir()
    rows = ["file,speaker,label"]
    for i, (speaker, utt, _, _, key) in enumerate(_eval_files(corpus)[:10]):
        wave, rate = sf.read(corpus / "wav" / f"{utt}.wav", dtype="float32")
        sf.write(meta.parent / f"{i}.flac", wave, rate)
        rows.append(f"{i}.flac,{speaker},{'bona-fide' if key == 'bonafide' else 'spoof'}")
    meta.write_text("\n".join(rows) + "\n")
    assert cli("test", "run").code == 0
    own = (tmp_path / "run" / "evaluations" / "best-test-scores.txt").read_text()
    res = cli("test", "run", "data.type=in_the_wild", f"data.args.meta={meta}")  # the stored root is dropped
    assert res.code == 0, res.err
    (record_path,) = (tmp_path / "run" / "evaluations").glob("best-test-*.json")  # beside best-test.json
    record = json.loads(record_path.read_text())
    assert record["files"] == 10 and record["overrides"][0] == "data.type=in_the_wild"
    assert (tmp_path / "run" / "evaluations" / "best-test-scores.txt").read_text() == own  # nothing replaced
    assert len(list((tmp_path / "run" / "evaluations").glob("best-test-*-scores.txt"))) == 1


def test_margin_loss_without_head_scores_and_trains(corpus):
    from modforge.experiment.runner import Experiment
    from modforge.experiment.schema import validate_config

    cfg = mf.load_config(
        {
            "task": "spoofing",
            "data": {"type": "spoof_corpus", "args": {"root": str(corpus), "audio": {"seconds": 0.5}}, "batch_size": 8},
            "model": {"frontend": "lfcc", "backbone": {"type": "mlp", "args": {"hidden_dims": [16]}},
                      "losses": ["oc_softmax"]},
        }
    )
    exp = Experiment.build(validate_config(cfg))
    batch = next(iter(exp.loaders()[1]))
    out = exp.model(batch)
    assert out["score"].shape == (len(batch["label"]),) and out["logits"].shape == (len(batch["label"]), 2)
    assert torch.equal(out["score"], exp.model.loss_fns["loss_oc_softmax"].score(out["embedding"]))
    out["loss"].backward()


def test_unknown_task_is_a_located_error(cli, corpus):
    config = str(ROOT / "configs" / "spoofing" / "lfcc_mlp.yaml")
    res = cli("train", config, *_overrides(corpus), "task=spoofng")
    assert res.code == 2 and "task: unknown task 'spoofng'; did you mean 'spoofing'?" in res.err


def test_score_table_averages_rows_of_a_file():
    from modforge.data.audio.protocols import Utterance

    utts = [Utterance(f"u{i}", Path(f"u{i}.wav"), i % 2, "-" if i % 2 else "A01") for i in range(3)]
    outputs = {"index": torch.tensor([2, 0, 2, 1]), "score": torch.tensor([1.0, 5.0, 3.0, -1.0])}
    table = ScoreTable.from_outputs(outputs, utts)
    assert table.utt_ids == ["u0", "u1", "u2"] and table.scores.tolist() == [5.0, -1.0, 2.0]
    assert table.labels.tolist() == [0, 1, 0]


@pytest.mark.slow
def test_export_to_onnx_and_predict_an_audio_file(cli, corpus, one_epoch, tmp_path):
    _one_epoch_run(one_epoch, tmp_path)
    res = cli("export", "run", "--engine", "onnx")
    assert res.code == 0, res.err
    artifact = next((tmp_path / "run" / "exports").glob("*.onnx"))
    wav = corpus / "wav" / f"{_eval_files(corpus)[0][1]}.wav"
    res = cli("predict", str(artifact), str(wav))
    assert res.code == 0, res.err
    assert wav.name in res.out and ("bonafide" in res.out or "spoof" in res.out) and "bona fide log-odds" in res.out
    (tmp_path / "broken.wav").write_bytes(b"RIFF....")
    res = cli("predict", str(artifact), str(tmp_path / "broken.wav"))
    assert res.code == 2 and "broken.wav" in res.err


def test_kfold_on_audio_pools_train_and_dev(cli, corpus, tmp_path):
    config = str(ROOT / "configs" / "spoofing" / "lfcc_mlp.yaml")
    res = cli("kfold", config, "--folds", "2", "--run-dir", "cv", *_overrides(corpus, epochs=1))
    assert res.code == 0, res.err
    result = json.loads((tmp_path / "cv" / "kfold.json").read_text())
    assert len(result["folds"]) == 2 and "test_eer" in result["mean"] and "val_eer" in result["mean"]
    for fold in result["folds"]:  # every fold trained on one half of train+dev, validated on the other
        assert fold["train_size"] + fold["val_size"] == 30 + 12
        assert (tmp_path / "cv" / f"fold{fold['fold']}" / "scores.txt").exists()


def _augmented(corpus: Path, epochs: int) -> list[str]:
    augment = "[{type: gain, args: {min_db: -6, max_db: 6}, p: 0.5}, {type: rawboost, args: {algo: 3}, p: 0.5}]"
    return [*_overrides(corpus, epochs), f"data.args.augment={augment}", "data.args.audio.seconds=0.3"]


def test_audio_runs_with_crops_and_augmentation_resume_exactly(cli, corpus, tmp_path):
    config = str(ROOT / "configs" / "spoofing" / "lfcc_mlp.yaml")
    assert cli("train", config, *_augmented(corpus, 3), "--run-dir", "whole").code == 0
    assert cli("train", config, *_augmented(corpus, 1), "--run-dir", "parts").code == 0
    res = cli("train", "--resume", "parts", "train.max_epochs=3")
    assert res.code == 0, res.err
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert (whole / "metrics.csv").read_text() == (parts / "metrics.csv").read_text()
    a = torch.load(whole / "checkpoints" / "last.pt", weights_only=True)["model"]
    b = torch.load(parts / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (whole / "scores.txt").read_text() == (parts / "scores.txt").read_text()


def test_a_test_split_of_one_class_still_writes_scores_and_summary(cli, corpus, one_epoch, tmp_path):
    spoof_only = tmp_path / "spoof_only.csv"
    rows = [f"{corpus}/wav/{f[1]}.wav,spoof,{f[1]},{f[3]}" for f in _eval_files(corpus) if f[4] == "spoof"]
    spoof_only.write_text("path,label,id,attack\n" + "\n".join(rows) + "\n")
    _one_epoch_run(one_epoch, tmp_path)
    res = cli("test", "run", "data.type=audio_manifest", "data.args.train=null", f"data.args.test={spoof_only}")
    assert res.code == 0, res.err
    (record_path,) = (tmp_path / "run" / "evaluations").glob("best-test-*.json")
    record = json.loads(record_path.read_text())
    assert record["files"] == len(rows) and record["bonafide_files"] == 0 and record["eer"] is None  # NaN → null
    assert len(read_score_file(next((tmp_path / "run" / "evaluations").glob("best-test-*-scores.txt")))) == len(rows)


def test_windowed_file_score_is_the_mean_of_its_windows(corpus):
    from modforge.experiment.runner import Experiment
    from modforge.experiment.schema import validate_config
    from modforge.tasks.spoofing.task import SpoofingTask
    from modforge.train.trainer import Trainer

    cfg = validate_config(
        mf.load_config(
            ROOT / "configs" / "spoofing" / "lfcc_mlp.yaml",
            overrides=[*_overrides(corpus, 1), "data.args.audio.seconds=0.2", "data.args.audio.eval_mode=windows"],
        )
    )
    exp = Experiment.build(cfg)
    trainer = Trainer(exp.model, torch.optim.SGD(exp.model.parameters(), lr=0.0), metrics={})
    test = exp.splits.test
    result = SpoofingTask().test(trainer, exp.loaders()[2], test, split="test", out_dir=None, stem="")
    assert result["test"]["files"] == len(test)
    rows = test.__getitems__([0])  # file 0's windows
    assert len(rows["index"]) == 3  # 0.5 s in 0.2 s windows: 0-0.2, 0.2-0.4, 0.3-0.5
    exp.model.eval()
    with torch.no_grad():
        expected = exp.model(rows)["score"].double().mean()
    table = ScoreTable.from_outputs(trainer.collect(exp.loaders()[2], ("score", "index")), test.utterances)
    assert table.scores[0] == pytest.approx(float(expected), abs=1e-6)


def test_make_spoof_corpus_command(cli, tmp_path):
    res = cli("data", "make-spoof-corpus", "c", "--utts", "30", "--duration", "0.3", "--seed", "3")
    assert res.code == 0, res.err
    assert "A05" in res.out and (tmp_path / "c" / "meta.json").exists()
    before = (tmp_path / "c" / "protocols" / "eval.txt").read_text()
    res = cli("data", "make-spoof-corpus", "c", "--utts", "30", "--duration", "0.3")
    assert res.code == 2 and "not empty" in res.err and "--overwrite" in res.err
    assert (tmp_path / "c" / "protocols" / "eval.txt").read_text() == before  # nothing lost
    res = cli("data", "make-spoof-corpus", "d", "--duration", "0.1")
    assert res.code == 2 and "duration" in res.err and not (tmp_path / "d").exists()


def test_frontends_run_in_float32_under_mixed_precision():
    model = mf.build_model(
        {"frontend": "log_mel", "backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "head": "linear"},
        in_dim=1, num_classes=2, layout="waveform", input_shape=(8000,), sample_rate=16000,
    )
    x = torch.randn(2, 8000)
    x[0], x[1] = 0.0, x[1] * 30  # silence (log floor) and a loud file (power beyond float16's range)
    with torch.autocast("cpu", dtype=torch.float16):
        out = model({"input": x})
    assert out["frontend"].dtype == torch.float32 and torch.isfinite(out["frontend"]).all()


def test_negative_seed_works_for_audio(cli, corpus):
    config = str(ROOT / "configs" / "spoofing" / "lfcc_mlp.yaml")
    res = cli("train", config, *_augmented(corpus, 1), "seed=-3", "--run-dir", "run")
    assert res.code == 0, res.err
