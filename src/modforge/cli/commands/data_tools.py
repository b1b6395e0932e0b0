"""``modforge data make-spoof-corpus OUT [--utts N] [--seed S] ...`` — data utilities.

``make-spoof-corpus`` writes modforge's synthetic spoofing corpus: wav files and
ASVspoof 2019-format protocols for train/dev/eval, with attacks in eval that training
never sees; train on it with ``data: {type: spoof_corpus, args: {root: OUT}}``.
"""

from __future__ import annotations

import argparse

from ...core.config import display_path
from ..common import CommandParser, add_plugins_option, load_cli_plugins
from ..output import print_table

HELP = "data utilities: make-spoof-corpus (a synthetic audio deepfake corpus)"


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
    corpus.add_argument("--overwrite", action="store_true", help="replace an existing corpus in OUT")
    add_plugins_option(corpus)  # --plugins works on every command
    return parser


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
