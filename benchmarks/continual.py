"""Continual-learning results table: every algorithm on Seq-Digits (5 tasks × 2 classes), buffer
200 for the rehearsal methods, several seeds; class-IL and task-IL average accuracy (mean ±
std over seeds), forgetting, and run time. Writes ``benchmarks/continual.md``.

Each run is the real command line (``python -m modforge train configs/continual/...``) in
a fresh process; the seed changes the data split, the class order, the initial weights and
the buffer's draws.

    python benchmarks/continual.py [--seeds 0 1 2] [--epochs 5] [--write]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = {  # name: the --algorithm flags (hyper-parameters), buffer 200 where there is one
    "sgd": [],
    "ewc_online": ["--e-lambda", "50", "--gamma", "1.0"],
    "lwf": ["--alpha", "1.0", "--temperature", "2.0"],
    "er": ["--buffer-size", "200"],
    "der": ["--buffer-size", "200", "--alpha", "3.0"],
    "derpp": ["--buffer-size", "200", "--alpha", "0.1", "--beta", "0.5"],
    "icarl": ["--buffer-size", "200"],
    "layer_distill": ["--buffer-size", "200", "--alpha", "0.3"],
    "joint": [],
}


def run(algorithm: str, seed: int, epochs: int) -> tuple[dict, float]:
    run_dir = ROOT / "runs" / "continual-benchmark" / f"{algorithm}-seed{seed}"
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    cmd = [
        sys.executable, "-m", "modforge", "train", str(ROOT / "configs" / "continual" / "base.yaml"),
        "--algorithm", algorithm, *ALGORITHMS[algorithm], "--seed", str(seed),
        f"continual.epochs_per_task={epochs}", "train.progress=never", "--run-dir", str(run_dir),
    ]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads((run_dir / "summary.json").read_text()), time.perf_counter() - started


def _mean_std(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):.1f} ± {100 * std:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=5, help="epochs per task")
    parser.add_argument("--write", action="store_true", help="write benchmarks/continual.md")
    ns = parser.parse_args()
    rows = []
    for algorithm in ALGORITHMS:
        results = [run(algorithm, seed, ns.epochs) for seed in ns.seeds]
        summaries = [s for s, _ in results]
        rows.append((
            algorithm,
            _mean_std([s["class_il"]["average_accuracy"] for s in summaries]),
            _mean_std([s["task_il"]["average_accuracy"] for s in summaries]),
            _mean_std([s["class_il"]["learning_accuracy"] for s in summaries]),
            _mean_std([s["class_il"]["forgetting"] for s in summaries]),
            statistics.median(t for _, t in results),
        ))  # fmt: skip
        print(f"{algorithm}: class-IL {rows[-1][1]}, task-IL {rows[-1][2]}", flush=True)
    lines = [
        "# Continual-learning results on Seq-Digits",
        "",
        f"_Produced by `python benchmarks/continual.py{' --write' if ns.write else ''}` on {date.today().isoformat()}"
        f" ({_machine()})._",
        "",
        f"scikit-learn's digits as 5 tasks × 2 classes (`seq_digits`, class order from the seed), an MLP "
        f"(100-100) trained with SGD (lr 0.05, batch 10 as Mammoth's Seq-MNIST), {ns.epochs} epochs per task, seeds "
        f"{', '.join(map(str, ns.seeds))}; rehearsal methods keep 200 samples. Accuracy is on every task's test "
        "set after the last task (mean ± std over seeds, %).",
        "",
        "| algorithm | class-IL | task-IL | class-IL learning accuracy | class-IL forgetting | run time (s, median) |",
        "|---|---|---|---|---|---|",
        *[f"| `{a}` | {c} | {t} | {la} | {f} | {s:.1f} |" for a, c, t, la, f, s in rows],
        "",
        "Learning accuracy is each task's accuracy right after it was trained (the mean of the accuracy matrix's "
        "diagonal): how well a method still learns new tasks, the other side of forgetting.",
        "",
        "Hyper-parameters (flags): "
        + "; ".join(f"`{a}` {' '.join(flags) or '—'}" for a, flags in ALGORITHMS.items())
        + ". Two values were picked on seed 0 and kept for every seed: DER's α among 0.3 / 1 / 3 (67 / 77 / 79 % "
        "class-IL) and online EWC's λ among 10 / 50 (87.0 / 88.6 % task-IL) — 100 gave 89.7 on seed 0 but diverges on "
        "seed 1 (below); the rest are defaults. "
        "Run time includes the process start and the evaluation after every task.",
        "",
        "**Why iCaRL trails ER here.** It forgets least of the rehearsal methods, but learns each new task "
        "least well: sigmoid outputs with the old classes' targets taken from the previous model, and the "
        "exemplars' own labels never used directly (they are distilled), hold the features close to the old "
        "ones, and nearest-mean classification on a 100-unit MLP's features separates new classes from old ones "
        "less sharply than a trained head. Its learning accuracy is the lowest of the rehearsal methods while its "
        "forgetting is the lowest; a larger learning rate (0.1, 0.2 on seed 0: 64 / 71 % class-IL) does not help. "
        "Its network outputs alone would give 19–20 % class-IL on the same checkpoints: "
        "the sigmoid head favours the newest classes, which is why iCaRL classifies by exemplar means. "
        "Mammoth's Seq-CIFAR-10 table, with a ResNet-18 whose features are far richer, has iCaRL above ER "
        "(49.0 vs 44.8).",
        "",
        "**Why online EWC does not beat SGD here.** Plain SGD can only bear a quadratic penalty whose stiffest "
        "direction satisfies lr·λ·max F < 1; beyond it those weights oscillate and the loss diverges "
        "(`ewc_online` warns when the bound is crossed). The accumulated Fisher's largest entry reaches 0.17–0.24 "
        "after four tasks, so at lr 0.05 λ must stay below ≈ 80 (λ = 100 diverges on seed 1, λ = 300 on seed "
        "0) — while the Fisher concentrates on a few hundred of the MLP's 17,610 weights (mean F ≈ 0.001), "
        "leaving the rest almost free. Within the bound the penalty does its job — on seed 0 task-IL forgetting "
        "falls from 8.3 (λ = 0) to 5.2 (λ = 50) and 2.4 points (λ = 100) — but the accuracy gained is within the "
        "spread over seeds. In class-IL no regulariser without replay helps (SGD, oEWC and LwF all near "
        "1/5 of JOINT, as in Mammoth's tables).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if ns.write:
        (ROOT / "benchmarks" / "continual.md").write_text(text)
    return 0


def _machine() -> str:
    import os
    import platform

    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
