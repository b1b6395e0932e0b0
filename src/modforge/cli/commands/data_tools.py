"""``modforge data make-spoof-corpus|make-shapes OUT ...`` — data utilities.

``make-spoof-corpus`` writes modforge's synthetic spoofing corpus: wav files and
ASVspoof 2019-format protocols for train/dev/eval, with attacks in eval that training
never sees; train on it with ``data: {type: spoof_corpus, args: {root: OUT}}``.
``make-shapes`` writes the synthetic detection set as COCO files (PNGs and
``annotations/instances_{train,val,test}.json``); train on it with
``data: {type: coco, args: {root: OUT}}`` (``configs/detection/shapes_fcos.yaml``).
"""

from __future__ import annotations

import argparse

from ...core.config import display_path
from ..common import CommandParser, add_plugins_option, load_cli_plugins
from ..output import print_table

HELP = "data utilities: make-spoof-corpus (a synthetic audio deepfake corpus), make-shapes (a synthetic COCO detection set)"


def _parser() -> CommandParser:
    parser = CommandParser("data", description=HELP)
    tools = parser.add_subparsers(dest="tool", metavar="TOOL", parser_class=CommandParser)
    tools.required = True
    corpus = tools.add_parser(
        "make-spoof-corpus",
        help="write a synthetic spoofing corpus (wav + ASVspoof-format protocols)",
        description="Write bona fide speech-like audio and spoofs made by several attacks, some of them "
        "only in eval, as wav files with ASVspoof 2019 LA-format protocols for train/dev/eval.",
    )
    corpus.add_argument("out", metavar="OUT", help="folder to create (must not exist or be empty)")
    corpus.add_argument("--utts", type=_positive, default=2000, metavar="N", help="utterances in all (default 2000)")
    corpus.add_argument("--seed", type=int, default=0, metavar="S", help="generation seed (default 0)")
    corpus.add_argument("--duration", type=float, default=2.0, metavar="SEC", help="seconds per utterance (default 2)")
    corpus.add_argument("--sample-rate", type=_positive, default=16000, metavar="HZ", help="default 16000")
    corpus.add_argument("--workers", type=_positive, default=1, metavar="N", help="processes (same files for any N)")
    corpus.add_argument("--overwrite", action="store_true", help="replace a corpus made earlier in OUT (only a folder whose meta.json says modforge made it as one, holding nothing else)")
    add_plugins_option(corpus)  # --plugins works on every command
    shapes = tools.add_parser(
        "make-shapes",
        help="write a synthetic detection set as COCO files (PNGs + instances JSON)",
        description="Write pictures of filled shapes — several classes, from small to half the picture, crowded and "
        "partly occluded, on textured noisy backgrounds — with COCO instances files for train/val/test.",
    )
    shapes.add_argument("out", metavar="OUT", help="folder to create (must not exist or be empty)")
    shapes.add_argument("--images", type=_positive, default=2000, metavar="N", help="pictures in all (default 2000)")
    shapes.add_argument("--seed", type=int, default=0, metavar="S", help="generation seed (default 0)")
    shapes.add_argument("--size", type=_positive, default=128, metavar="PX", help="picture side (default 128)")
    shapes.add_argument("--classes", type=_names, default=None, metavar="A,B,...",
                        help="shape classes (default circle,square,triangle,star,cross; also hexagon)")  # fmt: skip
    shapes.add_argument("--min-objects", type=_positive, default=1, metavar="N", help="per picture (default 1)")
    shapes.add_argument("--max-objects", type=_positive, default=6, metavar="N", help="per picture (default 6)")
    shapes.add_argument("--min-object", type=float, default=8.0, metavar="PX", help="smallest shape (default 8)")
    shapes.add_argument("--max-object", type=float, default=None, metavar="PX",
                        help="largest shape (default 64, at most half the picture)")  # fmt: skip
    shapes.add_argument("--max-occlusion", type=float, default=0.7, metavar="F",
                        help="largest share of a shape others may hide (default 0.7)")  # fmt: skip
    shapes.add_argument("--workers", type=_positive, default=1, metavar="N", help="processes (same files for any N)")
    shapes.add_argument("--overwrite", action="store_true", help="replace a shapes set made earlier in OUT (only a folder whose meta.json says modforge made it as one, holding nothing else)")
    add_plugins_option(shapes)
    return parser


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated class names, got {text!r}")
    return names


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def run(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    if ns.tool == "make-shapes":
        return _make_shapes(ns)
    from ...core.errors import UsageError
    from ...data.audio.spoof_corpus import make_spoof_corpus

    try:
        summary = make_spoof_corpus(
            ns.out,
            utts=ns.utts,
            seed=ns.seed,
            duration=ns.duration,
            sample_rate=ns.sample_rate,
            workers=ns.workers,
            overwrite=ns.overwrite,
        )
    except ValueError as exc:  # what the generator refuses: bad sizes, an OUT that is not empty...
        raise UsageError(f"modforge data make-spoof-corpus: {str(exc).replace('overwrite=True', '--overwrite')}") from None
    counts = summary.get("counts", {})
    rows = [(split, attack, n) for split, by_attack in counts.items() for attack, n in sorted(by_attack.items())]
    print_table(("split", "attack", "files"), rows, title=f"spoofing corpus — {display_path(ns.out)}")
    return 0


def _make_shapes(ns: argparse.Namespace) -> int:
    from ...core.errors import UsageError
    from ...data.detection.shapes import DEFAULT_CLASSES, make_shapes

    try:
        summary = make_shapes(
            ns.out, images=ns.images, seed=ns.seed, size=ns.size, classes=ns.classes or DEFAULT_CLASSES,
            min_objects=ns.min_objects, max_objects=ns.max_objects, min_object=ns.min_object,
            max_object=ns.max_object if ns.max_object is not None else min(64.0, ns.size / 2), max_occlusion=ns.max_occlusion, workers=ns.workers, overwrite=ns.overwrite,
        )  # fmt: skip
    except ValueError as exc:  # what the generator refuses: bad sizes, unknown classes, an OUT that is not empty...
        raise UsageError(f"modforge data make-shapes: {str(exc).replace('overwrite=True', '--overwrite')}") from None
    rows = [
        (split, name, count, figures.get("images", ""))
        for split, figures in summary.get("counts", {}).items()
        for name, count in figures.get("per_class", {}).items()
    ]
    print_table(("split", "class", "objects", "images"), rows, title=f"shapes set — {display_path(ns.out)}")
    return 0
