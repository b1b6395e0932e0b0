"""Input pipeline: modforge's image loaders vs torchvision's datasets + a plain DataLoader.

Two cases, each with the same files, the same v2 transforms and the same number of workers:

* **CIFAR-shaped tensors** — 10,000 32×32 RGB pictures written as CIFAR-10 python batches;
  training transforms: 4-pixel padded random crop, horizontal flip, normalise. Reference:
  ``torchvision.datasets.CIFAR10`` (its checksum check of the official files skipped: these
  are generated files) with ``v2.Compose([ToImage, RandomCrop, RandomHorizontalFlip,
  ToDtype, Normalize])``.
* **A 64×64 folder set** — 2,000 JPEGs in 20 class folders; transforms: random resized crop
  to 56, horizontal flip, normalise. Reference: ``torchvision.datasets.ImageFolder``.

Each measurement is one fresh process reading two epochs (the first is a warm-up); the
processes alternate (ours, reference, ours, …) and the medians of images/s are compared.
Peak RSS is the measuring process's plus its workers' largest.

    python benchmarks/image_input.py [--runs 5] [--workers 2] [--write]
"""

from __future__ import annotations

import json
import pickle
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _report import median, paired_run_arguments, publish  # noqa: E402
from _timing import child_result  # noqa: E402

TARGET = 1.00
BATCH = 128
MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)


def write_cifar(root: Path, n: int = 10_000) -> None:
    """CIFAR-10 python batches (five of n/5 training pictures, one test batch, the meta file)."""
    import numpy as np

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    per = n // 5
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"batch_label": name, "labels": rng.integers(0, 10, per).tolist(),
                 "data": rng.integers(0, 256, (per, 3072), dtype=np.uint8), "filenames": [f"{i}.png" for i in range(per)]}  # fmt: skip
        (folder / name).write_bytes(pickle.dumps(batch, protocol=4))
    meta = {"label_names": [f"c{i}" for i in range(10)], "num_cases_per_batch": per, "num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=4))


def write_folder(root: Path, classes: int = 20, per_class: int = 100) -> None:
    """64×64 JPEG pictures, one folder per class."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root / f"class_{c:02d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            base = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            picture = Image.fromarray(base).resize((64, 64), Image.Resampling.BILINEAR)
            picture.save(folder / f"{i:04d}.jpg", quality=90)


def _ours(case: str, root: Path, workers: int):
    import torch

    from modforge.data.images.corpora import cifar10, image_folder
    from modforge.data.loader import LoaderSettings, make_loader

    norm = {"type": "normalize", "args": {"mean": list(MEAN), "std": list(STD)}}
    if case == "cifar":
        train = [{"type": "random_crop", "args": {"size": 32, "padding": 4}}, "random_horizontal_flip", norm]
        splits = cifar10(str(root), val_fraction=0.0, transforms={"train": train})
    else:
        train = [{"type": "random_resized_crop", "args": {"size": 56, "antialias": True}}, "random_horizontal_flip", norm]
        evaluation = [{"type": "center_crop", "args": {"size": 56}}]
        splits = image_folder(str(root), val_fraction=0.0, transforms={"train": train, "eval": evaluation})
    settings = LoaderSettings(batch_size=BATCH, num_workers=workers, persistent_workers=workers > 0)
    loader = make_loader(splits.train, settings, train=True, generator=torch.Generator().manual_seed(0))

    def epoch(e: int) -> int:
        splits.train.set_epoch(e)
        return sum(len(batch["label"]) for batch in loader)

    return epoch


def _reference(case: str, root: Path, workers: int):
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision.transforms import v2

    tail = [v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    if case == "cifar":
        torchvision.datasets.cifar.check_integrity = lambda *_a, **_k: True  # generated files: no official MD5s
        dataset = torchvision.datasets.CIFAR10(str(root), train=True, transform=v2.Compose([v2.ToImage(), v2.RandomCrop(32, padding=4), *tail]))
    else:
        transform = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(56, antialias=True), *tail])
        dataset = torchvision.datasets.ImageFolder(str(root), transform=transform)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers, persistent_workers=workers > 0,
                        generator=torch.Generator().manual_seed(0))  # fmt: skip

    def epoch(_e: int) -> int:
        return sum(len(labels) for _, labels in loader)

    return epoch


def child(spec: str) -> None:
    """One measurement: build the loader, read a warm-up epoch, time the next; print JSON."""
    import torch

    torch.set_num_threads(1)
    which, case, root, workers = spec.split(",")
    epoch = (_ours if which == "modforge" else _reference)(case, Path(root), int(workers))
    epoch(0)
    start = time.perf_counter()
    images = epoch(1)
    seconds = time.perf_counter() - start
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(json.dumps({"images_per_s": images / seconds, "peak_rss_mb": peak / 1024}))


def measure(which: str, case: str, root: Path, workers: int) -> dict:
    return child_result(__file__, "--child", f"{which},{case},{root},{workers}")


def main() -> int:
    ns = paired_run_arguments(__doc__, "measurements per loader and case (interleaved)")
    if ns.child:
        child(ns.child)
        return 0
    workers = 2
    rows, verdicts = [], []
    with tempfile.TemporaryDirectory(prefix="modforge-bench-") as tmp:
        roots = {"cifar": Path(tmp, "cifar"), "folder": Path(tmp, "folder")}
        write_cifar(roots["cifar"])
        write_folder(roots["folder"])
        for case, label in (("cifar", "CIFAR-shaped tensors (10,000 × 3×32×32)"), ("folder", "64×64 JPEG folder (2,000)")):
            results: dict[str, list[dict]] = {"modforge": [], "torchvision": []}
            for _ in range(ns.runs):
                for which in results:
                    results[which].append(measure(which, case, roots[case], workers))
            ours = median([r["images_per_s"] for r in results["modforge"]])
            ref = median([r["images_per_s"] for r in results["torchvision"]])
            ratio = ours / ref
            verdicts.append(ratio >= TARGET)
            rss = {k: max(r["peak_rss_mb"] for r in v) for k, v in results.items()}
            rows.append(f"| {label} | {ours:,.0f} | {ref:,.0f} | **{ratio:.2f}×** | {rss['modforge']:.0f} | "
                        f"{rss['torchvision']:.0f} |")  # fmt: skip
    table = (
        f"Training epochs, batch {BATCH}, {workers} workers (persistent), 1 thread per process; medians of "
        f"{ns.runs} interleaved fresh processes.\n\n"
        "| case | modforge images/s | torchvision images/s | ratio | modforge peak RSS (MB) | torchvision peak RSS (MB) |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        + f"Target ≥ {TARGET:.2f}× on both: {'met' if all(verdicts) else 'missed'}.\n"
    )
    return publish("image_input", table, ns.write)


if __name__ == "__main__":
    sys.exit(main())
