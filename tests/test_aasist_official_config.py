"""Acceptance: ``modforge test configs/spoofing/aasist_official.yaml data.args.root=PATH`` evaluates
the authors' AASIST on an ASVspoof-2019-layout folder and scores each file as their code does.

The folder holds the two inputs of ``aasist_reference_outputs.json`` (the authors' code's logits
with their weights) as float WAV files, so the score file can be compared with those logits
directly: the score is the bona fide logit (their score files' convention)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import soundfile as sf
import torch

from modforge.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = ROOT.parent / "shared" / "weights"
CONFIG = ROOT / "configs" / "spoofing" / "aasist_official.yaml"
SAMPLES = 64_600
pytestmark = pytest.mark.skipif(
    not (WEIGHTS / "AASIST.pth").is_file(),
    reason=f"the authors' AASIST weights are not there: {WEIGHTS} (../shared/weights beside the project) is absent",
)


def reference_inputs() -> dict[str, torch.Tensor]:
    """The inputs as aasist_reference_outputs.json describes them: name → [n, 64600]."""
    t = torch.arange(SAMPLES) / 16000
    noise = torch.randn(SAMPLES, generator=torch.Generator().manual_seed(1))
    tone = 0.3 * torch.sin(2 * math.pi * 150 * t) * (1 + 0.5 * torch.sin(2 * math.pi * 3 * t)) + 0.05 * noise
    return {"randn": torch.randn(2, SAMPLES, generator=torch.Generator().manual_seed(0)), "tone": tone[None]}


def asvspoof_folder(root: Path) -> dict[str, tuple[str, int]]:
    """An ASVspoof 2019 LA eval layout (protocol + audio) holding the reference inputs;
    returns utterance → (input name, row)."""
    audio = root / "ASVspoof2019_LA_eval" / "wav"
    audio.mkdir(parents=True)
    protocols = root / "ASVspoof2019_LA_cm_protocols"
    protocols.mkdir()
    lines, where = [], {}
    for name, batch in reference_inputs().items():
        for row, wave in enumerate(batch):
            utt = f"LA_E_{name}{row}"
            sf.write(audio / f"{utt}.wav", wave.numpy(), 16000, subtype="FLOAT")
            key = "bonafide" if len(lines) % 2 == 0 else "spoof"
            lines.append(f"LA_0001 {utt} - {'-' if key == 'bonafide' else 'A07'} {key}")
            where[utt] = (name, row)
    (protocols / "ASVspoof2019.LA.cm.eval.trl.txt").write_text("\n".join(lines) + "\n")
    return where


@pytest.mark.slow
def test_the_shipped_config_scores_files_as_the_authors_code_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    where = asvspoof_folder(tmp_path / "LA")
    code = main(["test", str(CONFIG), f"data.args.root={tmp_path / 'LA'}", "data.args.eval_audio=ASVspoof2019_LA_eval/wav",
                 "data.args.ext=wav", f"model.init.path={WEIGHTS / 'AASIST.pth'}", "--run-dir", "official"])  # fmt: skip
    assert code == 0
    recorded = json.loads((WEIGHTS / "aasist_reference_outputs.json").read_text())["models"]["AASIST"]
    scores = {}
    for line in (tmp_path / "official" / "scores.txt").read_text().splitlines():
        utt, score, *_ = line.split()
        if utt in where:
            scores[utt] = float(score)
    assert set(scores) == set(where)
    for utt, (name, row) in where.items():
        assert scores[utt] == pytest.approx(recorded["logits"][name][row][1], abs=1e-4), utt
    config = (tmp_path / "official" / "config.yaml").read_text()
    assert recorded["sha256"] in config  # the run records exactly which weights it evaluated
    summary = json.loads((tmp_path / "official" / "summary.json").read_text())
    assert summary["evaluated"] == "model.init" and "eer" in summary["test"]
