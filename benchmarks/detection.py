"""Detection results table: detector configs trained from scratch on the synthetic shapes set,
scored on its test split by COCO AP (pycocotools), with training time. Writes
``benchmarks/detection.md``.

Every system is one ``configs/detection/*.yaml`` trained by the real command line
(``python -m modforge train CONFIG ...`` in a fresh process, same seed, same data, 2 CPU
threads), one after another in this invocation so their times compare; the figures are its
``summary.json`` test figures, exactly what ``modforge test`` reports. The reference config
(``shapes_fcos``) is held to the targets of the detection world: mAP@0.5 ≥ 0.90 and
mAP ≥ 0.65 on the test split, trained in at most 15 minutes on two cores.

    python benchmarks/detection.py [--data corpora/shapes] [--images 5000] [--seed 0]
                                   [--systems shapes_fcos shapes_fcos_r18_w025 ...]
                                   [--report-only] [--write]

Each system's figures are kept in ``benchmarks/detection.json`` (with the date and machine they
were measured on), so one system can be trained again — or a new one added — without the others:
the table holds every system of the JSON file. ``--report-only`` rebuilds the table from it.
``--write`` keeps whatever follows the notes marker line of the existing ``detection.md`` (as
``modforge sweep-report --write-to`` does): the hand-written reading of the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("shapes_fcos", "shapes_fcos_r18_w025", "shapes_retinanet")
"""Default systems (and the table's order): the reference config, the same with a quarter-width
backbone, and the same with the retinanet head."""
REFERENCE = "shapes_fcos"
TARGETS = {"map_50": 0.90, "map": 0.65, "train_seconds": 15 * 60}
"""The reference config's targets (the seconds: an upper bound)."""
BENCH = ROOT / "benchmarks" / "detection.md"
RESULTS = ROOT / "benchmarks" / "detection.json"
RUNS = ROOT / "runs" / "detection-benchmark"


def ensure_data(path: Path, images: int, seed: int) -> float:
    """Make the shapes set unless it exists; the seconds it took (0 when it existed)."""
    if (path / "meta.json").exists():
        return 0.0
    from modforge.data.detection.shapes import make_shapes

    start = time.perf_counter()
    make_shapes(path, images=images, seed=seed, workers=2)
    return time.perf_counter() - start


def config_of(system: str) -> Path:
    return ROOT / "configs" / "detection" / f"{system}.yaml"


def train(system: str, data: Path, run_dir: Path) -> tuple[dict, float]:
    """Train one config in a fresh process; its summary and the command's wall seconds
    (start-up, every validation and the final test included)."""
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    cmd = [sys.executable, "-m", "modforge", "train", str(config_of(system)), f"data.args.root={data}",
           "train.progress=never", "--run-dir", str(run_dir)]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    (run_dir / "wall_seconds.txt").write_text(f"{wall:.1f}\n")
    return json.loads((run_dir / "summary.json").read_text()), wall


def describe(run_dir: Path) -> str:
    """Backbone, width, neck and head of a run, from its stored config."""
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    model = cfg["model"]
    backbone, neck, head = model["backbone"], model["neck"], model["head"]
    width = backbone["args"].get("width", 1.0)
    first = 2 + int(neck["args"].get("start_level", 0))  # the ResNet's C2–C5 feed P2–P5
    last = 5 + int(neck["args"].get("extra_levels", 0))
    train = cfg["train"]
    engine = train.get("engine") or "eager"
    layout = engine.get("args", {}).get("memory_format", "contiguous") if isinstance(engine, dict) else "contiguous"
    how = ", ".join(x for x in (train.get("precision") == "bf16" and "bf16", layout != "contiguous" and layout) if x)
    return (f"{backbone['type']} ×{width:g}, {neck['type']} P{first}–P{last} {neck['args'].get('out_channels')} ch, "
            f"{head['type']} tower {head['args'].get('tower_depth')}, "
            f"{_length(train)}, {cfg['data']['args'].get('min_size')} px" + (f", {how}" if how else ""))  # fmt: skip


def _length(train: dict) -> str:
    """How long a config trains: its epochs, or its step limit when that ends training first."""
    return f"{train['max_steps']:,} steps" if train.get("max_steps") else f"{train['max_epochs']} epochs"


def _fmt(value) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"  # NaN: no object of that size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "corpora" / "shapes")
    parser.add_argument("--images", type=int, default=10000, help="set size when it has to be made")
    parser.add_argument("--seed", type=int, default=0, help="set seed when it has to be made")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    parser.add_argument("--report-only", action="store_true", help="the table from the runs of an earlier invocation")
    parser.add_argument("--write", action="store_true", help="write benchmarks/detection.md")
    ns = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    data = ns.data.resolve()
    ensure_data(data, ns.images, ns.seed)
    meta = json.loads((data / "meta.json").read_text())
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    for system in [] if ns.report_only else ns.systems:
        run_dir = RUNS / system
        summary, wall = train(system, data, run_dir)
        results[system] = {"model": describe(run_dir), "params": summary["params"], "test": summary["test"],
                           "train_seconds": summary["train_seconds"], "wall": wall,
                           "measured": f"{date.today().isoformat()}, {_machine()}"}  # fmt: skip
        test = summary["test"]
        print(f"{system}: mAP {test['map']:.3f}, mAP@0.5 {test['map_50']:.3f}, "
              f"{summary['train_seconds']:.0f} s training", flush=True)  # fmt: skip
        RESULTS.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    order = [k for k in SYSTEMS if k in results] + sorted(k for k in results if k not in SYSTEMS)
    rows = [(k, results[k]["model"], results[k], results[k]["test"], results[k]["wall"]) for k in order]
    machines = sorted({results[k]["measured"] for k in order})
    lines = [
        "# Detection results on the synthetic shapes set",
        "",
        "_Produced by `python benchmarks/detection.py --write` (figures kept in `benchmarks/detection.json`); "
        f"measured on {'; '.join(machines)}._",
        "",
        f"Data: `modforge data make-shapes` with {meta.get('images', '?')} images of "
        f"{'×'.join(str(v) for v in meta.get('image_size', ['?']))} px, "
        f"seed {meta.get('seed', '?')}; "
        f"classes {', '.join(meta.get('classes', []))}; splits {_split_sizes(meta)}. Every system: its "
        "`configs/detection/` config, trained from scratch (no pretrained weights), seed 0, 2 CPU threads, the "
        "checkpoint with the best validation mAP evaluated on the test split by pycocotools.",
        "",
        "| system | model | parameters | mAP | mAP@0.5 | mAP@0.75 | AP small | AP medium | AP large | "
        "AR@100 | training (s) | command (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system, model, summary, test, wall in rows:
        lines.append(
            f"| `{system}` | {model} | {summary['params']:,} | {_fmt(test['map'])} | {_fmt(test['map_50'])} | "
            f"{_fmt(test['map_75'])} | {_fmt(test.get('map_small'))} | {_fmt(test.get('map_medium'))} | "
            f"{_fmt(test.get('map_large'))} | {_fmt(test.get('mar_100'))} | {summary['train_seconds']:.0f} | "
            f"{wall:.0f} |"
        )
    reference = next((row for row in rows if row[0] == REFERENCE), None)
    if reference is not None:
        _, _, summary, test, _ = reference
        met = {
            "mAP@0.5 ≥ 0.90": test["map_50"] >= TARGETS["map_50"],
            "mAP ≥ 0.65": test["map"] >= TARGETS["map"],
            "training ≤ 15 min": summary["train_seconds"] <= TARGETS["train_seconds"],
        }
        lines += ["", f"Targets for `{REFERENCE}`: " + "; ".join(f"{k} {'✓' if v else '✗'}" for k, v in met.items())
                  + "."]  # fmt: skip
    names = sorted({c for *_, test, _ in rows for c in (test.get("per_class") or {})})
    lines += [
        "",
        "mAP: COCO AP averaged over IoU 0.50:0.95; sizes by COCO's area bounds (small < 32², medium < 96², large "
        "above; the 128 px shapes set has no large objects, hence –); AR@100: recall with 100 detections per "
        "image. Training (s): the trainer's own clock over every epoch with its validation pass; command (s): the "
        "whole `modforge train` process, start-up and final test included (wall time on a shared 2-core machine: "
        "compare within one table only).",
        "",
        "AP (0.50:0.95) per class:",
        "",
        "| system | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for system, _, _, test, _ in rows:
        per_class = test.get("per_class") or {}
        lines.append(f"| `{system}` | " + " | ".join(_fmt(per_class.get(n)) for n in names) + " |")
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if ns.write:
        from modforge.sweep.report import keep_notes

        BENCH.write_text(keep_notes(text, BENCH))
    return 0


def _split_sizes(meta: dict) -> str:
    counts = meta.get("counts") or {}
    return ", ".join(f"{k} {v['images']} images / {v['objects']} objects" for k, v in counts.items()) or "?"


def _machine() -> str:
    import os
    import platform

    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
