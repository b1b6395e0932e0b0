"""Spoofing results table: several systems trained on the synthetic corpus, scored on its
eval split — EER and minDCF over all files, over the attacks seen in training and over the
attacks training never saw — with training time. Writes ``benchmarks/spoofing.md``.

Every system is one ``configs/spoofing/*.yaml`` trained by the real command line
(``python -m modforge train CONFIG ...`` in a fresh process, same seed, same corpus, same
epochs); the figures come from its ``scores.txt``, so they are exactly what ``modforge
test`` reports. "Seen" and "unseen" subsets hold all bona fide files plus the spoofs of
those attacks (unseen attacks: the corpus's ``meta.json``).

    python benchmarks/spoofing.py [--corpus corpora/spoof] [--utts 2000] [--epochs 8]
                                  [--epochs-for raw_aasist_l=3 ...] [--systems lfcc_mlp ...]
                                  [--report-only] [--write]

A system whose config loads published weights (``model.init``, e.g. ``aasist_finetune``) also
gets a row for those weights *before* training (``modforge test CONFIG``). ``--report-only``
rebuilds the tables from the run folders of earlier runs of the script (each row's epochs come
from its run's stored config, so rows trained in separate invocations combine). ``--write``
keeps whatever follows the ``NOTES_MARKER`` line of the existing ``spoofing.md``: the
hand-written reading of the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = (
    "lfcc_mlp", "lfcc_lcnn", "log_mel_resnet18", "ssl_tiny_aasist", "raw_rawnet2", "raw_aasist_l", "aasist_finetune",
)
"""Default systems. On two CPU cores the raw-waveform AASIST family costs ~8-10 min per epoch
(``--epochs-for raw_aasist_l=3 aasist_finetune=3`` keeps the run near an hour); the rest train
in minutes."""
NOTES_MARKER = "<!-- hand-written notes below: kept by --write -->"
BENCH = ROOT / "benchmarks" / "spoofing.md"


def ensure_corpus(path: Path, utts: int, seed: int) -> float:
    """Make the corpus unless it exists; the seconds it took (0 when it existed)."""
    if (path / "meta.json").exists():
        return 0.0
    from modforge.data.audio.spoof_corpus import make_spoof_corpus

    start = time.perf_counter()
    make_spoof_corpus(path, utts=utts, seed=seed, workers=2)
    return time.perf_counter() - start


def _config(system: str) -> Path:
    return ROOT / "configs" / "spoofing" / f"{system}.yaml"


def _fresh(run_dir: Path) -> None:
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)


def train(system: str, corpus: Path, epochs: int, run_dir: Path) -> dict:
    """Train one config in a fresh process; its summary."""
    _fresh(run_dir)
    cmd = [
        sys.executable, "-m", "modforge", "train", str(_config(system)),
        f"data.args.root={corpus}", f"train.max_epochs={epochs}", "train.progress=never", "--run-dir", str(run_dir),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads((run_dir / "summary.json").read_text())


def test_initial(system: str, corpus: Path, run_dir: Path) -> dict:
    """Evaluate a config's ``model.init`` weights, untrained, in a fresh process; its summary."""
    _fresh(run_dir)
    cmd = [
        sys.executable, "-m", "modforge", "test", str(_config(system)),
        f"data.args.root={corpus}", "--run-dir", str(run_dir),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads((run_dir / "summary.json").read_text())


def has_init(system: str) -> bool:
    """Whether the system's config loads published weights (``model.init``)."""
    from modforge.core.config import load_config

    return bool(load_config(_config(system)).get("model.init", None))


def trained_epochs(summary: dict) -> int:
    """The epochs a run was trained for; 0 for an evaluation of untrained weights."""
    return int(summary.get("epochs", 0)) if "train_seconds" in summary else 0


def _epochs_for(pairs: list[str], default: int) -> dict[str, int]:
    out = {}
    for pair in pairs:
        system, sep, value = pair.partition("=")
        if not sep or not value.isdigit():
            raise SystemExit(f"--epochs-for: expected SYSTEM=EPOCHS, got {pair!r}")
        out[system] = int(value)
    return out


def subset_metrics(run_dir: Path, unseen: set[str]) -> dict[str, tuple[float, float]]:
    """(EER, minDCF) over all files, seen attacks and unseen attacks, from the run's score file."""
    from modforge.tasks.spoofing import metrics as detection
    from modforge.tasks.spoofing.scores import read_score_file

    table = read_score_file(run_dir / "scores.txt")
    attacks = np.array(table.attacks)
    bona = table.labels == 1
    groups = {
        "all": np.ones(len(table), dtype=bool),
        "seen": bona | ((table.labels == 0) & ~np.isin(attacks, list(unseen))),
        "unseen": bona | ((table.labels == 0) & np.isin(attacks, list(unseen))),
    }
    return {
        name: (
            detection.eer(table.scores[keep], table.labels[keep])[0],
            detection.min_dcf(table.scores[keep], table.labels[keep]),
        )
        for name, keep in groups.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=ROOT / "corpora" / "spoof")
    parser.add_argument("--utts", type=int, default=2000, help="corpus size when it has to be made")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed when it has to be made")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--epochs-for", nargs="+", default=[], metavar="SYSTEM=N", help="epochs of one system")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    parser.add_argument("--report-only", action="store_true", help="tables from the runs of an earlier invocation")
    parser.add_argument("--write", action="store_true", help="write benchmarks/spoofing.md")
    ns = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    corpus = ns.corpus.resolve()
    made = ensure_corpus(corpus, ns.utts, ns.seed)
    meta = json.loads((corpus / "meta.json").read_text())
    unseen = set(meta["unseen_attacks"])
    epochs_for = _epochs_for(ns.epochs_for, ns.epochs)
    rows = []
    for system in ns.systems:
        runs = [(system, ROOT / "runs" / "spoofing-benchmark" / system, False)]
        if has_init(system):
            runs.insert(0, (f"{system}, before training", ROOT / "runs" / "spoofing-benchmark" / f"{system}-init", True))
        for label, run_dir, initial in runs:
            if ns.report_only:
                summary = json.loads((run_dir / "summary.json").read_text())
            elif initial:
                summary = test_initial(system, corpus, run_dir)
            else:
                summary = train(system, corpus, epochs_for.get(system, ns.epochs), run_dir)
            figures = subset_metrics(run_dir, unseen)
            seconds = summary.get("train_seconds", 0.0)
            per_attack = summary["test_per_attack"]
            rows.append((label, summary["params"], trained_epochs(summary), figures, seconds, per_attack))
            print(f"{label}: EER {100 * figures['all'][0]:.2f}% (unseen {100 * figures['unseen'][0]:.2f}%), "
                  f"{seconds:.0f} s training", flush=True)
    counts = meta.get("counts", {})
    lines = [
        "# Spoofing results on the synthetic corpus",
        "",
        f"_Produced by `python benchmarks/spoofing.py{' --write' if ns.write else ''}` on {date.today().isoformat()}"
        f" ({_machine()})._",
        "",
        f"Corpus: `modforge data make-spoof-corpus` with {meta.get('utterances', '?')} utterances × "
        f"{meta.get('duration', '?')} s, seed {meta.get('seed', '?')}"
        + (f" (made in {made:.0f} s)" if made else "")
        + f"; eval split {sum(counts.get('eval', {}).values()) if counts else '?'} files; "
        f"attacks unseen in training: {', '.join(sorted(unseen))}. Every system: its `configs/spoofing/` "
        "config (2 s crops, Adam, best checkpoint by dev EER, seed 0, 2 CPU threads) for the epochs shown.",
        "",
        "| system | parameters | epochs | EER all (%) | minDCF all | EER seen (%) | EER unseen (%) | "
        "minDCF unseen | training (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for system, params, epochs, figures, seconds, _ in rows:
        lines.append(
            f"| `{system}` | {params:,} | {epochs} | {100 * figures['all'][0]:.2f} | {figures['all'][1]:.3f} | "
            f"{100 * figures['seen'][0]:.2f} | {100 * figures['unseen'][0]:.2f} | {figures['unseen'][1]:.3f} | "
            f"{seconds:.0f} |"
        )
    attacks = sorted({a for *_, per_attack in rows for a in per_attack})
    described = meta.get("attacks", {})
    lines += [
        "",
        "EER: equal error rate; minDCF: normalised minimum detection cost with ASVspoof 5's costs "
        "(p_spoof 0.05, C_miss 1, C_fa 10). Seen/unseen: all bona fide files against the spoofs of the "
        "attacks training saw / never saw. Training time excludes the final test (wall time on a shared "
        "2-core machine: compare it within one table only). `ssl_tiny_aasist` runs a *randomly initialised* "
        "tiny wav2vec 2.0 (no pretrained weights can be fetched here): it shows the plumbing, not what a real "
        "SSL front end achieves — give `model.frontend.args.path` a local XLS-R folder for that.",
        "",
        "EER (%) per attack (each attack's spoofs against all bona fide eval files; * = unseen in training):",
        "",
        "| system | " + " | ".join(f"{a}{'*' if a in unseen else ''}" for a in attacks) + " |",
        "|---|" + "---|" * len(attacks),
    ]
    for system, *_, per_attack in rows:
        cells = [f"{100 * per_attack[a]['eer']:.1f}" if a in per_attack else "" for a in attacks]
        lines.append(f"| `{system}` | " + " | ".join(cells) + " |")
    lines += ["", "Attacks: " + "; ".join(f"{a} {_name(described.get(a))}" for a in attacks) + ".", ""]
    text = "\n".join(lines)
    print(text)
    if ns.write:
        old = BENCH.read_text() if BENCH.exists() else ""
        notes = old[old.index(NOTES_MARKER):] if NOTES_MARKER in old else NOTES_MARKER + "\n"
        BENCH.write_text(text + "\n" + notes)
    return 0


def _name(description) -> str:
    if isinstance(description, dict):
        return str(description.get("name") or description.get("description") or "")
    return str(description or "")


def _machine() -> str:
    import os
    import platform

    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
