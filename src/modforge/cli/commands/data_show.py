"""``modforge data show CONFIG [overrides] --split train -n 16 --out samples.png`` — a grid of
what the model will see: samples of a split after its configured transforms (and batch
mixing, for training), titled with their class names."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...core.config import display_path
from ..config_args import resolve_config_from_cli

HELP = "draw samples of a split as training sees them (transforms, mixing) into a PNG grid"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split", default="train", choices=("train", "val", "test"), help="which split (default train)")
    parser.add_argument("-n", "--count", type=_count, default=16, metavar="N", help="samples to draw (default 16)")
    parser.add_argument("--epoch", type=int, default=0, metavar="E", help="the epoch whose augmentation is drawn")
    parser.add_argument("--out", default="samples.png", metavar="PNG", help="the picture to write (default samples.png)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 256, got {text!r}") from None
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 256, got {value}")
    return value


def run(argv: list[str]) -> int:
    from ...experiment.data_preview import show_samples

    resolved = resolve_config_from_cli("data show", argv, description=HELP, add_arguments=add_arguments)
    ns = resolved.args
    drawn = show_samples(resolved.config, ns.split, ns.count, Path(ns.out), epoch=ns.epoch)
    print(f"{drawn['samples']} {ns.split} samples (epoch {ns.epoch}) → {display_path(ns.out)}")
    return 0
