"""``modforge data make-spoof-corpus|make-shapes OUT ...`` — data utilities.

``make-spoof-corpus`` writes modforge's synthetic spoofing corpus: wav files and
ASVspoof 2019-format protocols for train/dev/eval, with attacks in eval that training
never sees; train on it with ``data: {type: spoof_corpus, args: {root: OUT}}``.
``make-shapes`` writes the synthetic detection set as COCO files (PNGs and
``annotations/instances_{train,val,test}.json``); train on it with
``data: {type: coco, args: {root: OUT}}`` (``configs/detection/shapes_fcos.yaml``).
``download NAME --root DIR`` fetches a standard image corpus's official files (MNIST family,
CIFAR, Tiny-ImageNet): resumable, MD5-verified, unpacked safely; ``download --list`` lists them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ...core.config import display_path
from ..common import CommandParser, add_plugins_option, load_cli_plugins, positive_int
from ..output import print_table

HELP = ("data utilities: make-spoof-corpus (a synthetic audio deepfake corpus), make-shapes (a synthetic COCO "
        "detection set), download (a standard image corpus: MNIST family, CIFAR, Tiny-ImageNet), show (a grid of augmented "
        "samples)")


def _parser() -> CommandParser:
    parser = CommandParser("data", description=HELP)
    tools = parser.add_subparsers(dest="tool", metavar="TOOL", parser_class=CommandParser)
    tools.required = True
    corpus = _generator(
        tools,
        "make-spoof-corpus",
        help="write a synthetic spoofing corpus (wav + ASVspoof-format protocols)",
        description="Write bona fide speech-like audio and spoofs made by several attacks, some of them "
        "only in eval, as wav files with ASVspoof 2019 LA-format protocols for train/dev/eval.",
        count=("--utts", 2000, "utterances in all"),
    )
    corpus.add_argument("--duration", type=float, default=2.0, metavar="SEC", help="seconds per utterance (default 2)")
    corpus.add_argument("--sample-rate", type=positive_int, default=16000, metavar="HZ", help="default 16000")
    corpus.add_argument("--eval-channels", default="none,telephone,reverb,noise", metavar="A,B,...",
                        help="transmission conditions of the eval split, balanced per class "
                        "(none, telephone, reverb, noise; default all four; 'none' for a clean eval split)")
    _generator_tail(corpus, "a corpus")
    shapes = _generator(
        tools,
        "make-shapes",
        help="write a synthetic detection set as COCO files (PNGs + instances JSON)",
        description="Write pictures of filled shapes — several classes, from small to half the picture, crowded and "
        "partly occluded, on textured noisy backgrounds — with COCO instances files for train/val/test.",
        count=("--images", 2000, "pictures in all"),
    )
    shapes.add_argument("--size", type=positive_int, default=128, metavar="PX", help="picture side (default 128)")
    shapes.add_argument("--classes", type=_names, default=None, metavar="A,B,...",
                        help="shape classes (default circle,square,triangle,star,cross; also hexagon)")  # fmt: skip
    shapes.add_argument("--min-objects", type=positive_int, default=1, metavar="N", help="per picture (default 1)")
    shapes.add_argument("--max-objects", type=positive_int, default=6, metavar="N", help="per picture (default 6)")
    shapes.add_argument("--min-object", type=float, default=8.0, metavar="PX", help="smallest shape (default 8)")
    shapes.add_argument("--max-object", type=float, default=None, metavar="PX",
                        help="largest shape (default 64, at most half the picture)")  # fmt: skip
    shapes.add_argument("--max-occlusion", type=float, default=0.7, metavar="F",
                        help="largest share of a shape others may hide (default 0.7)")  # fmt: skip
    _generator_tail(shapes, "a shapes set")
    _add_download(tools)
    return parser


def _generator(tools: Any, name: str, *, help: str, description: str, count: tuple[str, int, str]) -> CommandParser:
    """The sub-command of a data generator: ``OUT``, how many items (``count``: flag, default, what they
    are) and ``--seed``; its own options follow, then :func:`_generator_tail`."""
    parser = tools.add_parser(name, help=help, description=description)
    flag, default, what = count
    parser.add_argument("out", metavar="OUT", help="folder to create (must not exist or be empty)")
    parser.add_argument(flag, type=positive_int, default=default, metavar="N", help=f"{what} (default {default})")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="generation seed (default 0)")
    return parser


def _generator_tail(parser: CommandParser, made: str) -> None:
    """The last options of a data generator: ``--workers``, ``--overwrite`` (of ``made`` earlier), ``--plugins``."""
    parser.add_argument("--workers", type=positive_int, default=1, metavar="N", help="processes (same files for any N)")
    parser.add_argument("--overwrite", action="store_true", help=f"replace {made} made earlier in OUT (only a folder "
                        "whose meta.json says modforge made it as one, holding nothing else)")  # fmt: skip
    add_plugins_option(parser)  # --plugins works on every command


def _generated(tool: str, make: Callable[..., dict], out: str, **options: Any) -> dict:
    """``make(out, **options)``'s summary; what the generator refuses (bad sizes, unknown classes, an OUT that
    is not empty...) is one usage error naming the command, in its flags' words."""
    from ...core.errors import UsageError

    try:
        return make(out, **options)
    except ValueError as exc:
        raise UsageError(f"modforge data {tool}: {str(exc).replace('overwrite=True', '--overwrite')}") from None


def _add_download(tools) -> None:
    from ...data.images.catalog import CORPORA, MIRROR_ENV

    download = tools.add_parser(
        "download",
        help="download a standard image corpus (official files, MD5-verified, resumable) into --root",
        description="Download the official files of a standard image corpus into --root, resuming a download cut "
        "short, checking each file's MD5 and unpacking archives safely; files already there and verified are not "
        f"fetched again. Corpora: {', '.join(CORPORA)}. Behind a mirror, set {MIRROR_ENV} (or --mirror) to a base "
        "URL holding the official paths.",
    )
    download.add_argument("name", nargs="?", metavar="NAME", help=f"the corpus: {', '.join(CORPORA)}")
    download.add_argument("--root", metavar="DIR", help="the folder the corpus goes into (the readers' root)")
    download.add_argument("--variant", choices=("python", "binary"), default=None,
                          help="cifar10/cifar100: the python (default) or binary archive")  # fmt: skip
    download.add_argument("--list", dest="list_corpora", action="store_true",
                          help="list the corpora, their files, sizes and URLs; download nothing")  # fmt: skip
    download.add_argument("--mirror", metavar="URL", default=None,
                          help=f"base URL replacing the official hosts (default ${MIRROR_ENV}, else the official "
                          "URLs)")  # fmt: skip
    add_plugins_option(download)
    from .data_show import HELP as SHOW_HELP

    tools.add_parser("show", help=SHOW_HELP, add_help=False,
                     description=f"{SHOW_HELP}. Usage: modforge data show CONFIG [key=value ...] [--split train|val|test] "
                     "[-n N] [--epoch E] [--out PNG]")  # fmt: skip  # parsed by data_show (a config-taking command)


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated class names, got {text!r}")
    return names


def run(argv: list[str]) -> int:
    if argv[:1] == ["show"]:  # a config-taking command: overrides and part flags as in train
        from . import data_show

        return data_show.run(argv[1:])
    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    if ns.tool == "make-shapes":
        return _make_shapes(ns)
    if ns.tool == "download":
        return _download(ns)
    from ...data.audio.spoof_corpus import make_spoof_corpus

    summary = _generated("make-spoof-corpus", make_spoof_corpus, ns.out, utts=ns.utts, seed=ns.seed,
                         duration=ns.duration, sample_rate=ns.sample_rate, eval_channels=ns.eval_channels,
                         workers=ns.workers, overwrite=ns.overwrite)  # fmt: skip
    counts = summary.get("counts", {})
    rows = [(split, attack, n) for split, by_attack in counts.items() for attack, n in sorted(by_attack.items())]
    print_table(("split", "attack", "files"), rows, title=f"spoofing corpus — {display_path(ns.out)}")
    if summary.get("channels_file"):
        print(f"eval conditions: {', '.join(summary['eval_channels'])} ({summary['channels_file']})")
    return 0


def _make_shapes(ns: argparse.Namespace) -> int:
    from ...data.detection.shapes import DEFAULT_CLASSES, make_shapes

    summary = _generated(
        "make-shapes", make_shapes, ns.out, images=ns.images, seed=ns.seed, size=ns.size,
        classes=ns.classes or DEFAULT_CLASSES, min_objects=ns.min_objects, max_objects=ns.max_objects,
        min_object=ns.min_object, max_object=ns.max_object if ns.max_object is not None else min(64.0, ns.size / 2),
        max_occlusion=ns.max_occlusion, workers=ns.workers, overwrite=ns.overwrite,
    )  # fmt: skip
    rows = [
        (split, name, count, figures.get("images", ""))
        for split, figures in summary.get("counts", {}).items()
        for name, count in figures.get("per_class", {}).items()
    ]
    print_table(("split", "class", "objects", "images"), rows, title=f"shapes set — {display_path(ns.out)}")
    return 0


def _download(ns: argparse.Namespace) -> int:
    import logging
    import os
    from pathlib import Path

    from ...core.errors import UsageError
    from ...data.download import DownloadError
    from ...data.images.catalog import download_corpus, get_corpus, offline_message

    if ns.list_corpora:
        if ns.name or ns.root or ns.variant:
            raise UsageError("modforge data download: --list takes no NAME, --root or --variant")
        return _list_corpora()
    if not ns.name:
        raise UsageError("modforge data download: name a corpus (NAME), or --list them")
    if not ns.root:
        raise UsageError(f"modforge data download {ns.name}: --root DIR is required (the folder the corpus goes into)")
    corpus = get_corpus(ns.name)
    variant = corpus.variant_name(ns.variant)
    chosen = corpus.variants[variant]
    root = Path(ns.root).expanduser()
    log = logging.getLogger("modforge.cli.data")
    log.info("%s%s: %d file(s) into %s", corpus.name, f" ({variant})" if len(corpus.variants) > 1 else "",
             len(chosen.files), display_path(root))  # fmt: skip
    try:
        with _progress_reporter(log) as report:
            folder = download_corpus(corpus.name, root, variant=ns.variant, progress=report, base_url=ns.mirror)
    except DownloadError as exc:
        log.error("%s", exc)
        for line in offline_message(corpus.name, root, variant, base_url=ns.mirror).splitlines():
            log.info("%s", line)
        return 2
    rows = []
    for file in chosen.files:
        path = root / file.filename
        size = os.lstat(path).st_size if os.path.lexists(path) else ""
        where = display_path(path) + (f" → unpacked into {display_path(root)}" if file.extract else "")
        rows.append((file.filename, file.md5, "verified", size, where))
    print_table(("file", "md5", "check", "bytes", "where"), rows,
                title=f"{corpus.name} — {display_path(folder)}")  # fmt: skip
    return 0


def _list_corpora() -> int:
    from ...data.images.catalog import CORPORA, file_urls

    rows = []
    for corpus in CORPORA.values():
        for variant_name, variant in corpus.variants.items():
            label = variant_name if len(corpus.variants) > 1 else ""
            if len(corpus.variants) > 1 and variant_name == corpus.default_variant:
                label += " (default)"
            folder = f"ROOT/{variant.folder}" if variant.folder else "ROOT"
            for i, file in enumerate(variant.files):
                first = i == 0
                rows.append((corpus.name if first else "", label if first else "", folder if first else "",
                             _megabytes(file.size), file.filename, " or ".join(file_urls(file))))  # fmt: skip
    print_table(("corpus", "variant", "lands in", "size", "file", "url"), rows,
                title="standard image corpora (modforge data download NAME --root DIR)")  # fmt: skip
    for corpus in CORPORA.values():
        print(f"{corpus.name}: {corpus.description}. {corpus.homepage} — licence: {corpus.licence}")
    return 0


def _megabytes(size: int | None) -> str:
    return "?" if size is None else f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"


class _progress_reporter:  # noqa: N801 - used as a context manager, like a function
    """``progress(file, done, total)`` for download_corpus: rich bars on a terminal (stderr), else a
    line every ~30 s per file (:class:`~modforge.core.heartbeat.Heartbeat`)."""

    def __init__(self, log):
        import sys

        self.log = log
        self.bars = None
        self.tasks: dict[str, object] = {}
        self.beats: dict[str, object] = {}
        if hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
            from rich import progress as rp

            from ..output import console

            self.bars = rp.Progress(rp.TextColumn("{task.description}"), rp.BarColumn(), rp.DownloadColumn(),
                                    rp.TransferSpeedColumn(), rp.TimeRemainingColumn(),
                                    console=console(stderr=True))  # fmt: skip

    def __enter__(self):
        if self.bars is not None:
            self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bars is not None:
            self.bars.stop()

    def __call__(self, filename: str, done: int, total: int | None) -> None:
        if self.bars is not None:
            from ...core.text_safety import terminal_text

            task = self.tasks.get(filename)
            if task is None:
                task = self.tasks[filename] = self.bars.add_task(terminal_text(filename), total=total)
            self.bars.update(task, completed=done, total=total)
            return
        from ...core.heartbeat import Heartbeat

        beat = self.beats.get(filename)
        if beat is None or (total is not None and beat.total != total):
            beat = self.beats[filename] = Heartbeat(self.log, f"downloading {filename} (bytes)", total or 0)
        beat.tick(done)
