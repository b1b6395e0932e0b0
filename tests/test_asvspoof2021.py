"""ASVspoof 2021 LA/DF: the key reader, the dataset, and the per-condition report equal to
the organisers' eval-package.

``fixtures/asvspoof2021_reference.json`` holds fabricated LA and DF keys (600 trials each, all
three subsets, every codec, tied scores), LA ASV trials and scores, and the numbers and text
tables asvspoof-challenge/2021 ``eval-package`` (``main.evaluation_API``) computed on them —
recorded by ``fixtures/record_asvspoof2021.py`` in a scratch environment. No network and no
package are needed here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch

from modforge.core.errors import UsageError
from modforge.data.audio.asvspoof2021 import asvspoof2021, read_asv_trials_2021, read_asvspoof2021
from modforge.data.audio.protocols import ProtocolError, Utterance
from modforge.tasks.spoofing.conditions import condition_report, format_report, text_table
from modforge.tasks.spoofing.scores import ScoreTable
from modforge.tasks.spoofing.task import SpoofingTask

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "asvspoof2021_reference.json").read_text())


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _report(tmp_path: Path, track: str) -> dict:
    """modforge's report on the fixture's trials, read from key files in the official layout."""
    low = track.lower()
    keys = _write(tmp_path / "keys" / track / "CM" / "trial_metadata.txt", REFERENCE[f"{low}_keys"])
    trials = read_asvspoof2021(keys, [tmp_path / "audio"], track)
    by_trial = {line.split()[0]: float(line.split()[1]) for line in REFERENCE[f"{low}_scores"]}
    table = ScoreTable([t.utt_id for t in trials], np.array([by_trial[t.utt_id] for t in trials]),
                       np.array([t.label for t in trials]), [t.attack for t in trials],
                       {k: [t.conditions[k] for t in trials] for k in trials[0].conditions})
    asv = None
    if track == "LA":
        asv = read_asv_trials_2021(_write(tmp_path / "keys/LA/ASV/trial_metadata.txt", REFERENCE["asv_keys"]),
                                   _write(tmp_path / "keys/LA/ASV/score.txt", REFERENCE["asv_scores"]))
    return condition_report(table.scores, table.labels, table.conditions, track, asv=asv)


def _matrix(values: dict) -> list[list[float | None]]:
    return [[None if math.isnan(v) else v for v in row.values()] for row in values.values()]


@pytest.mark.parametrize("track", ["LA", "DF"])
def test_every_number_equals_the_eval_package(tmp_path, track):
    report = _report(tmp_path, track)
    assert list(report["subsets"]) == ["eval", "progress", "hidden"]
    for subset, expected in REFERENCE["results"][track].items():
        table = report["subsets"][subset]
        assert _matrix(table["eer"]) == expected["eer"]  # to the last bit, NaN cells included
        assert text_table(table["eer"], 100.0, "1.2f") == expected["printed"]["eer"]
        if track == "LA":
            assert _matrix(table["min_tdcf"]) == expected["min_tdcf"]
            assert text_table(table["min_tdcf"], 1.0, "1.4f") == expected["printed"]["min_tdcf"]
        else:
            assert "min_tdcf" not in table


def test_fixture_exercises_ties_empty_cells_and_every_subset():
    scores = [float(line.split()[1]) for line in REFERENCE["la_scores"]]
    assert len(set(scores)) < len(scores) / 3  # many tied scores
    for track in ("LA", "DF"):
        for expected in REFERENCE["results"][track].values():
            cells = [v for row in expected["eer"] for v in row]
            assert None in cells and sum(v is not None for v in cells) > len(cells) / 2
    tdcf = [v for row in REFERENCE["results"]["LA"]["eval"]["min_tdcf"] for v in row if v is not None]
    assert len(tdcf) > 20


def test_reader_keeps_every_key_column(tmp_path):
    keys = _write(tmp_path / "k.txt", ["LA_0023 DF_E_2000011 nocodec asvspoof A14 spoof notrim progress "
                                       "traditional_vocoder - - - -",
                                       "LA_0024 DF_E_2000012 low_mp3 vcc2018 bonafide bonafide trim hidden bonafide"])
    first, second = read_asvspoof2021(keys, [tmp_path], "df")
    assert (first.utt_id, first.label, first.attack, first.speaker) == ("DF_E_2000011", 0, "A14", "LA_0023")
    assert first.conditions == {"codec": "nocodec", "source": "asvspoof", "attack": "A14", "trim": "notrim",
                                "subset": "progress", "vocoder": "traditional_vocoder", "task": "-", "team": "-",
                                "gender_pair": "-", "language": "-"}
    assert (second.label, second.attack, second.conditions["subset"]) == (1, "-", "hidden")
    assert first.path == tmp_path / "DF_E_2000011.flac"
    assert [t.utt_id for t in read_asvspoof2021(keys, [tmp_path], "df", subset="hidden")] == ["DF_E_2000012"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("LA_0009 LA_E_1 alaw ita_tx A07 spoof notrim", "expected 8 fields"),
        ("LA_0009 LA_E_1 alaw ita_tx A07 spoofed notrim eval", "unknown label"),
        ("LA_0009 LA_E_1 alaw ita_tx A07 spoof notrim final", "subset 'final'"),
        ("LA_0009 ../../etc/passwd alaw ita_tx A07 spoof notrim eval", "not a relative path"),
    ],
)
def test_a_malformed_key_line_is_one_error_naming_file_and_line(tmp_path, line, message):
    keys = _write(tmp_path / "trial_metadata.txt", ["LA_0009 LA_E_0 none loc_tx bonafide bonafide notrim eval", line])
    with pytest.raises(ProtocolError, match=message) as info:
        read_asvspoof2021(keys, [tmp_path], "la")
    assert f"{keys}:2" in str(info.value) and isinstance(info.value, UsageError)


def test_asv_scores_must_pair_with_the_asv_keys(tmp_path):
    meta = _write(tmp_path / "m.txt", ["LA_0001 LA_E_1 none loc_tx bonafide target notrim eval",
                                       "LA_0001 LA_E_2 none loc_tx A07 spoof notrim eval"])
    good = read_asv_trials_2021(meta, _write(tmp_path / "s.txt", ["LA_0001 LA_E_1 1.5", "LA_0001 LA_E_2 -2"]))
    assert good.labels == ["target", "spoof"] and good.scores.tolist() == [1.5, -2.0]
    assert good.columns["codec"] == ["none", "none"] and good.columns["attack"] == ["bonafide", "A07"]
    with pytest.raises(ProtocolError, match=r"s2.txt:2: expected 'speaker LA_E_2 score'"):
        read_asv_trials_2021(meta, _write(tmp_path / "s2.txt", ["LA_0001 LA_E_1 1.5", "LA_0001 LA_E_3 -2"]))
    with pytest.raises(ProtocolError, match="1 ASV scores for the 2 trials"):
        read_asv_trials_2021(meta, _write(tmp_path / "s3.txt", ["LA_0001 LA_E_1 1.5"]))


def _flac(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.random.default_rng(seed).uniform(-0.3, 0.3, 1600).astype(np.float32), 16000)


def _df_release(tmp_path: Path) -> Path:
    """A DF release whose audio is kept in the four part folders."""
    lines = []
    for i in range(12):
        bona = i % 3 == 0
        subset = ("eval", "progress", "hidden")[i % 3 if i % 2 else 0]
        vocoder = "bonafide" if bona else ("traditional_vocoder", "unknown")[i % 2]
        lines.append(f"LA_00{i:02d} DF_E_{i} {('nocodec', 'low_mp3')[i % 2]} asvspoof "
                     f"{'bonafide' if bona else 'A0' + str(7 + i % 3)} {'bonafide' if bona else 'spoof'} "
                     f"notrim {subset} {vocoder} - - - -")
        _flac(tmp_path / f"ASVspoof2021_DF_eval_part0{i % 4}/ASVspoof2021_DF_eval/flac/DF_E_{i}.flac", i)
    _write(tmp_path / "keys/DF/CM/trial_metadata.txt", lines)
    return tmp_path


def test_df_dataset_finds_audio_in_the_part_folders_and_trains_on_2019(tmp_path):
    root = _df_release(tmp_path / "2021")
    la19 = tmp_path / "LA"
    protocols = la19 / "ASVspoof2019_LA_cm_protocols"
    for split, tag, files in (("train", "trn", ["LA_T_1 - A01 spoof", "LA_T_2 - - bonafide"]),
                              ("dev", "trl", ["LA_D_1 - A02 spoof", "LA_D_2 - - bonafide"])):
        _write(protocols / f"ASVspoof2019.LA.cm.{split}.{tag}.txt", [f"LA_0079 {f}" for f in files])
        for n, f in enumerate(files):
            _flac(la19 / f"ASVspoof2019_LA_{split}/flac/{f.split()[0]}.flac", n)
    splits = asvspoof2021(str(root), track="df", train_root=str(la19))
    assert (len(splits.train), len(splits.val), len(splits.test)) == (2, 2, 12)
    test = splits.test
    assert test.condition_track == "DF" and test.asv_trials is None
    assert test.seen_attacks == frozenset({"A01"})
    assert test.utterances[5].path.parent.parent.parent.name == "ASVspoof2021_DF_eval_part01"
    only = asvspoof2021(str(root), track="df", subset="hidden")
    assert len(only.train) == 0 and only.val is None
    assert {u.conditions["subset"] for u in only.test.utterances} == {"hidden"}


def test_missing_audio_names_the_key_line(tmp_path):
    root = _df_release(tmp_path)
    (root / "ASVspoof2021_DF_eval_part03/ASVspoof2021_DF_eval/flac/DF_E_3.flac").unlink()
    with pytest.raises(UsageError, match=r"trial_metadata.txt:4: audio file not found"):
        asvspoof2021(str(root), track="df")
    assert len(asvspoof2021(str(root), track="df", skip_bad=True).test) == 11


def test_the_test_report_carries_the_condition_tables(tmp_path):
    root = _df_release(tmp_path / "release")
    test = asvspoof2021(str(root), track="df").test
    scores = torch.tensor([0.9, -0.2, 0.1, 0.8, 0.3, -0.5, 0.7, 0.2, 0.2, 0.95, -0.1, 0.0], dtype=torch.float64)
    trainer = SimpleNamespace(collect=lambda loader, keys: {"score": scores, "index": torch.arange(12)})
    out = tmp_path / "run"
    out.mkdir()
    results = SpoofingTask().test(trainer, None, test, split="test", out_dir=out, stem="")
    conditions = results["test_conditions"]
    assert conditions["track"] == "DF" and conditions["columns"] == "codec" and conditions["rows"] == "vocoder"
    eval_table = conditions["subsets"]["eval"]
    assert eval_table["trials"] == sum(u.conditions["subset"] == "eval" for u in test.utterances)
    assert set(eval_table["eer"]) == {"Traditional", "Wav.Concat.", "Neural AR", "Neural non-AR", "Unknown", "Pooled"}
    assert list(eval_table["eer"]["Pooled"]) == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "Pooled"]
    assert (out / "conditions.txt").read_text() == format_report(conditions)
    assert (out / "scores.txt").read_text().splitlines()[0].split() == ["DF_E_0", "0.9", "bonafide", "-"]
    assert results["test"]["files"] == 12


def test_score_tables_without_conditions_are_unchanged():
    utts = [Utterance("a", Path("a.flac"), 1), Utterance("b", Path("b.flac"), 0, "A01")]
    table = ScoreTable.from_outputs({"score": torch.tensor([0.5, 0.1]), "index": torch.tensor([0, 1])}, utts)
    assert table.conditions is None
    assert ScoreTable(["a"], np.array([0.1]), np.array([1]), ["-"]).conditions is None


def test_a_2019_run_tested_on_2021_from_the_command_line(cli, tmp_path):
    from modforge.data.audio.spoof_corpus import make_spoof_corpus

    corpus = tmp_path / "corpus"
    make_spoof_corpus(corpus, utts=40, seed=0, duration=0.5)
    config = str(Path(__file__).resolve().parents[1] / "configs" / "spoofing" / "lfcc_mlp.yaml")
    train = cli("train", config, f"data.args.root={corpus}", "train.max_epochs=1", "data.args.audio.seconds=0.5",
                "data.batch_size=16", "train.num_threads=1", "--run-dir", "run")
    assert train.code == 0, train.err
    root = _df_release(tmp_path / "df2021")
    res = cli("test", "run", "data.type=asvspoof2021", f"data.args.root={root}", "data.args.track=df")
    assert res.code == 0, res.err
    evaluations = tmp_path / "run" / "evaluations"
    (record_path,) = evaluations.glob("best-test-*.json")
    record = json.loads(record_path.read_text())
    tables = next(v for k, v in record.items() if k.endswith("conditions"))
    assert set(tables["subsets"]) == {"eval", "progress", "hidden"} and tables["track"] == "DF"
    (text,) = evaluations.glob("best-test-*conditions.txt")
    assert "== DF eval: EER %" in text.read_text()


def test_la_dataset_reads_the_asv_trials_for_min_tdcf(tmp_path, caplog):
    lines = [f"LA_0001 LA_E_{i} {('none', 'alaw')[i % 2]} loc_tx {'bonafide' if i < 2 else 'A07'} "
             f"{'bonafide' if i < 2 else 'spoof'} notrim eval" for i in range(4)]
    _write(tmp_path / "keys/LA/CM/trial_metadata.txt", lines)
    for i in range(4):
        _flac(tmp_path / f"ASVspoof2021_LA_eval/flac/LA_E_{i}.flac", i)
    assert asvspoof2021(str(tmp_path)).test.asv_trials is None  # the release's ASV files absent: no t-DCF
    assert "min t-DCF is not reported" in caplog.text
    with pytest.raises(UsageError, match="ASV file not found"):
        asvspoof2021(str(tmp_path), asv_scores="mine.txt")
    _write(tmp_path / "keys/LA/ASV/trial_metadata.txt", ["LA_0001 LA_E_9 none loc_tx bonafide target notrim eval"])
    _write(tmp_path / "keys/LA/ASV/ASVTorch_Kaldi/score.txt", ["LA_0001 LA_E_9 3.5"])
    test = asvspoof2021(str(tmp_path), track="LA").test
    assert test.condition_track == "LA" and test.asv_trials.scores.tolist() == [3.5]
    assert [u.conditions["codec"] for u in test.utterances] == ["none", "alaw", "none", "alaw"]
    with pytest.raises(UsageError, match="track must be la or df"):
        asvspoof2021(str(tmp_path), track="pa")


@pytest.mark.parametrize("planted", ["keys", "ASVspoof2021_DF_eval_part02"])
def test_a_key_or_audio_folder_linking_out_of_the_root_is_refused(tmp_path, planted):
    """A shared release whose keys or audio part folder is a link out of the root (issue 39): refused
    before anything in it is read; the root itself may be a link."""
    from modforge.core.safe_files import UnsafePathError

    root = _df_release(tmp_path / "2021")
    (root / planted).rename(tmp_path / "private")
    (root / planted).symlink_to(tmp_path / "private")
    with pytest.raises(UnsafePathError, match=f"{planted}[^ ]* leads outside the dataset root"):
        asvspoof2021(str(root), track="df")
    (root / planted).unlink()
    (tmp_path / "private").rename(root / planted)
    (tmp_path / "named").symlink_to(root)
    assert len(asvspoof2021(str(tmp_path / "named"), track="df").test) == 12
