"""The official files of the standard image corpora, and fetching them into a ``--root`` folder.

Each corpus lists its files as published by its authors — name, MD5, the URL and its mirrors,
whether it is unpacked — and where it lands under the user's root; the readers look exactly
there:

============== ============================================================================
corpus         lands in
============== ============================================================================
mnist          the four official ``*-idx?-ubyte.gz`` files directly in ROOT (read as .gz)
fashion_mnist  same as mnist (the same four names)
kmnist         same as mnist
emnist         ``gzip.zip`` unpacked in ROOT → ``ROOT/gzip/emnist-*.gz``
cifar10        ``ROOT/cifar-10-batches-py`` (variant python) · ``ROOT/cifar-10-batches-bin`` (binary)
cifar100       ``ROOT/cifar-100-python`` (python) · ``ROOT/cifar-100-binary`` (binary)
tiny_imagenet  ``ROOT/tiny-imagenet-200``
============== ============================================================================

Where the figures come from: MD5s of the MNIST family, EMNIST and the CIFAR *python* archives
are torchvision 0.29's own (``torchvision/datasets/mnist.py`` and ``cifar.py``), and so are the
URLs, except that every URL here is ``https``: torchvision's MNIST mirror on
``ossci-datasets.s3.amazonaws.com`` (yann.lecun.com serves only plain http, and has answered 403
since 2024), the TLS endpoint of Fashion-MNIST's own S3 bucket (torchvision names its http-only
website endpoint) with the authors' GitHub repository as a second mirror, and the https
addresses of codh.rois.ac.jp (KMNIST) and cs231n.stanford.edu (Tiny-ImageNet). The CIFAR
*binary* archives' MD5s are those the dataset page https://www.cs.toronto.edu/~kriz/cifar.html
publishes, and Tiny-ImageNet's is the MD5 every public loader of ``tiny-imagenet-200.zip``
checks (e.g. ContinualAI avalanche); both were cross-checked against several public code bases.

Sizes are the published byte counts, shown by ``modforge data download --list``; they bound
what is accepted rather than being checked exactly (the MD5 is): a download stops at the size
plus a margin (:meth:`CorpusFile.download_limit`), and an archive may unpack to at most twice
its size plus 64 MiB, in at most :attr:`CorpusFile.members` members
(:meth:`CorpusFile.extraction_limits`) — CIFAR's pickled or raw pixels and Tiny-ImageNet's JPEGs
unpack to within 1.1 times their archive, EMNIST's zip holds ``.gz`` files.

:func:`download_corpus` fetches (resumable, verified — :mod:`modforge.data.download`) and unpacks
(:mod:`modforge.data.extract`); :func:`offline_message` is what to tell a user whose machine
cannot, or who did not ask for a download.
"""

from __future__ import annotations

import difflib
import os
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ...core.errors import UsageError
from ...core.safe_files import ensure_folder, folder_below
from ..download import DownloadError, check_url, download_file
from ..extract import DEFAULT_MAX_MEMBERS, extract_archive

__all__ = [
    "CORPORA",
    "MIRROR_ENV",
    "Corpus",
    "CorpusFile",
    "UnknownCorpusError",
    "Variant",
    "corpus_folder",
    "download_corpus",
    "file_urls",
    "get_corpus",
    "offline_message",
]

MIRROR_ENV = "MODFORGE_DATA_MIRROR"
"""Environment variable: a base URL (``https://mirror.example.org/datasets``) that replaces the host
of every official URL (the path is kept under it) — for machines behind a local mirror."""

CorpusProgress = Callable[[str, int, "int | None"], None]
"""``progress(file_name, done_bytes, total_bytes_or_None)``."""


@dataclass(frozen=True)
class CorpusFile:
    """One official file: its name, MD5 and URLs (the first tried first, then the mirrors)."""

    filename: str
    md5: str
    urls: tuple[str, ...]
    size: int | None = None
    """Published size in bytes: shown, and with a margin the most a download may bring."""
    extract: bool = False
    """Whether the archive is unpacked in ROOT (it is kept beside what it held)."""
    members: int | None = None
    """Most members (files and folders) the archive may hold: what it holds, with a margin."""

    @property
    def url(self) -> str:
        return self.urls[0]

    def download_limit(self) -> int | None:
        """Most bytes a download of this file may bring: the published size plus 1 % (at least
        1 MiB), so a mirror that sends more, or without end, is stopped there."""
        return None if self.size is None else self.size + max(self.size // 100, 1 << 20)

    def extraction_limits(self) -> dict[str, int]:
        """Keyword arguments of :func:`~modforge.data.extract.extract_archive` for this archive:
        at most twice its size plus 64 MiB in all and per member, at most :attr:`members` members."""
        limits = {"max_members": self.members or DEFAULT_MAX_MEMBERS}
        if self.size is not None:
            limits["max_total_bytes"] = limits["max_member_bytes"] = 2 * self.size + (64 << 20)
        return limits

    def entry(self) -> tuple[str, str, str, bool]:
        """(url, filename, md5, extract?)."""
        return self.url, self.filename, self.md5, self.extract


@dataclass(frozen=True)
class Variant:
    """One published form of a corpus: its files and the folder under ROOT where it lies
    (``""``: ROOT itself)."""

    files: tuple[CorpusFile, ...]
    folder: str = ""

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[misc]


@dataclass(frozen=True)
class Corpus:
    """A standard corpus: its variants (``python``/``binary`` for CIFAR; ``default`` otherwise)."""

    name: str
    description: str
    homepage: str
    licence: str
    variants: Mapping[str, Variant] = field(hash=False)
    default_variant: str = "default"

    def variant(self, name: str | None = None) -> Variant:
        return self.variants[self.variant_name(name)]

    def variant_name(self, name: str | None = None) -> str:
        """The variant ``name`` (the default for ``None``); a :class:`UsageError` for one this corpus lacks."""
        if name is None:
            return self.default_variant
        if name not in self.variants:
            if len(self.variants) == 1:
                raise UsageError(f"corpus {self.name} has one form only; --variant {name} does not apply "
                                 "(variants python|binary are for cifar10 and cifar100)")  # fmt: skip
            raise UsageError(f"corpus {self.name} has no variant {name!r}; choose one of: {', '.join(self.variants)}")
        return name

    def entries(self, variant: str | None = None) -> list[tuple[str, str, str, bool]]:
        """The files of ``variant`` as (url, filename, md5, extract?)."""
        return [f.entry() for f in self.variant(variant).files]


class UnknownCorpusError(UsageError, LookupError):
    """A corpus name the catalog does not hold; the message lists close matches and all names."""


# ----------------------------------------------------------------------------- the catalog
def _idx_family(urls: tuple[str, ...], md5s: tuple[str, str, str, str], sizes: tuple[int, ...]) -> Variant:
    names = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
             "t10k-labels-idx1-ubyte.gz")  # fmt: skip
    files = zip(names, md5s, sizes, strict=True)
    return Variant(tuple(CorpusFile(n, m, tuple(u + n for u in urls), s) for n, m, s in files))


_TORONTO = "https://www.cs.toronto.edu/~kriz/"


def _cifar_corpus(name: str, description: str, *, python: tuple[str, int, str], binary: tuple[str, int, str]) -> Corpus:
    """A CIFAR corpus: two published forms, each one archive on the Toronto page unpacked into its folder —
    ``cifar-<classes>-python.tar.gz`` (pickled batches, the default) and ``cifar-<classes>-binary.tar.gz``,
    each given as (MD5, size, folder)."""
    variants = {}
    for kind, (md5, size, folder) in (("python", python), ("binary", binary)):
        filename = f"{name.replace('cifar', 'cifar-')}-{kind}.tar.gz"
        archive = CorpusFile(filename, md5, (_TORONTO + filename,), size, extract=True, members=1_000)
        variants[kind] = Variant((archive,), folder=folder)
    return Corpus(name, description, _TORONTO + "cifar.html",
                  "none stated; cite Krizhevsky 2009, 'Learning Multiple Layers of Features from Tiny Images'",
                  variants, default_variant="python")  # fmt: skip


CORPORA: dict[str, Corpus] = {
    "mnist": Corpus(
        "mnist",
        "handwritten digits, 28x28 grey, 10 classes (60k train / 10k test)",
        "http://yann.lecun.com/exdb/mnist/",
        "none stated on the homepage; commonly cited as CC BY-SA 3.0",
        {"default": _idx_family(  # torchvision.datasets.MNIST.mirrors / .resources
            ("https://ossci-datasets.s3.amazonaws.com/mnist/",),
            ("f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
             "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"),
            (9912422, 28881, 1648877, 4542))},  # fmt: skip
    ),
    "fashion_mnist": Corpus(
        "fashion_mnist",
        "Zalando article pictures, 28x28 grey, 10 classes (60k train / 10k test)",
        "https://github.com/zalandoresearch/fashion-mnist",
        "MIT",
        {"default": _idx_family(  # torchvision.datasets.FashionMNIST's MD5s; its bucket over TLS, then GitHub
            ("https://fashion-mnist.s3.eu-central-1.amazonaws.com/",
             "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"),
            ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
             "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"),
            (26421880, 29515, 4422102, 5148))},  # fmt: skip
    ),
    "kmnist": Corpus(
        "kmnist",
        "Kuzushiji-MNIST: cursive Japanese characters, 28x28 grey, 10 classes (60k train / 10k test)",
        "https://github.com/rois-codh/kmnist",
        "CC BY-SA 4.0",
        {"default": _idx_family(  # torchvision.datasets.KMNIST
            ("https://codh.rois.ac.jp/kmnist/dataset/kmnist/",),
            ("bdb82020997e1d708af4cf47b453dcf7", "e144d726b3acfaa3e44228e80efcd344",
             "5c965bf0a639b31b8f53240b1b52f4d7", "7320c461ea6c1c855c0b718fb2a4b134"),
            (18165135, 29497, 3041136, 5120))},  # fmt: skip
    ),
    "emnist": Corpus(
        "emnist",
        "extended MNIST: letters and digits, 28x28 grey, six splits "
        "(byclass, bymerge, balanced, letters, digits, mnist)",
        "https://www.nist.gov/itl/products-and-services/emnist-dataset",
        "NIST data, see the homepage; cite Cohen et al. 2017",
        {"default": Variant(  # torchvision.datasets.EMNIST.url / .md5
            (CorpusFile("gzip.zip", "58c8d27c78d21e728a6bc7b3cc06412e",
                        ("https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",), 561753746, extract=True,
                        members=1_000),),  # the gzip/ folder, 24 .gz files and 6 mappings
            folder="gzip")},  # fmt: skip
    ),
    # python archives: torchvision.datasets.CIFAR10/CIFAR100.url / .tgz_md5; binary ones: the table on the CIFAR page
    "cifar10": _cifar_corpus("cifar10", "32x32 colour pictures, 10 classes (50k train / 10k test)",
                             python=("c58f30108f718f92721af3b95e74349a", 170498071, "cifar-10-batches-py"),
                             binary=("c32a1d4ab5d03f1284b67883e8d87530", 170052171, "cifar-10-batches-bin")),
    "cifar100": _cifar_corpus("cifar100", "32x32 colour pictures, 100 classes in 20 superclasses (50k train / 10k test)",
                              python=("eb9058c3a382ffc7106e4002c42a8d85", 169001437, "cifar-100-python"),
                              binary=("03b5dce01913d631647c71ecec9e9cb8", 168513733, "cifar-100-binary")),
    "tiny_imagenet": Corpus(
        "tiny_imagenet",
        "Tiny-ImageNet-200: 64x64 colour pictures, 200 classes (100k train / 10k val / 10k unlabelled test)",
        "https://cs231n.stanford.edu/",
        "pictures from ImageNet: non-commercial research and teaching, under ImageNet's terms of access",
        {"default": Variant(  # the MD5 public loaders check (avalanche, many course repositories)
            (CorpusFile("tiny-imagenet-200.zip", "90528d7ca1a48142e341f4ef8d21d0de",
                        ("https://cs231n.stanford.edu/tiny-imagenet-200.zip",), 248100043, extract=True,
                        members=150_000),),  # ~120 600: 120 000 JPEGs, 200 boxes lists, ~600 folders
            folder="tiny-imagenet-200")},  # fmt: skip
    ),
}
"""Corpus name → its official files and landing folder."""


# ----------------------------------------------------------------------------- look-ups
def get_corpus(name: str) -> Corpus:
    """The corpus ``name`` (``fashion-mnist`` and ``FASHION_MNIST`` mean ``fashion_mnist``)."""
    key = str(name).strip().lower().replace("-", "_")
    if key in CORPORA:
        return CORPORA[key]
    close = difflib.get_close_matches(key, list(CORPORA), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownCorpusError(f"unknown corpus {name!r}; {hint}(known: {', '.join(CORPORA)})")


def corpus_folder(name: str, root: str | os.PathLike, variant: str | None = None) -> Path:
    """Where corpus ``name`` lies under ``root`` once downloaded (ROOT itself for the MNIST family).

    The folder below ``root`` must resolve inside ``root``'s real path
    (:func:`~modforge.core.safe_files.folder_below`; ``root`` itself may be a link the user named).

    Raises:
        UnsafePathError: the folder below ``root`` leads out of it through a link.
    """
    corpus = get_corpus(name)
    folder = corpus.variant(variant).folder
    return folder_below(root, folder, f"{corpus.name}: download folder") if folder else Path(root)


def _mirror(base_url: str | None) -> str | None:
    if base_url is not None:
        return check_url(base_url, "base URL") if base_url else None
    env = os.environ.get(MIRROR_ENV, "").strip()
    return check_url(env, MIRROR_ENV) if env else None


def _rehost(url: str, base: str) -> str:
    """``url`` with scheme and host taken from ``base``, its path under ``base``'s path."""
    src, dst = urllib.parse.urlsplit(url), urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit((dst.scheme, dst.netloc, dst.path.rstrip("/") + src.path, src.query, ""))


def file_urls(file: CorpusFile, base_url: str | None = None) -> list[str]:
    """The URLs tried for ``file``, in order: the official ones, or (``base_url``, else
    ``$MODFORGE_DATA_MIRROR``) the same paths on that host."""
    base = _mirror(base_url)
    urls = [_rehost(u, base) for u in file.urls] if base else list(file.urls)
    return list(dict.fromkeys(urls))


# ----------------------------------------------------------------------------- fetching
def download_corpus(
    name: str,
    root: str | os.PathLike,
    *,
    variant: str | None = None,
    progress: CorpusProgress | None = None,
    base_url: str | None = None,
) -> Path:
    """Download corpus ``name`` into ``root`` (verified, resumable, unpacked); return its folder.

    Files already in ``root`` with the right MD5 are not fetched again, and an archive already
    unpacked (every file it wrote still as written) is not unpacked again. Each file's URLs are
    tried in order (official, then mirrors); a download stops at the file's size plus a margin,
    an archive is unpacked within the bounds of :meth:`CorpusFile.extraction_limits`.

    Args:
        name: a key of :data:`CORPORA`.
        root: the folder the user named (``--root``); created.
        variant: ``python`` (default) or ``binary`` for cifar10/cifar100.
        progress: ``progress(file_name, done_bytes, total_bytes_or_None)``.
        base_url: replaces the host of every URL (default ``$MODFORGE_DATA_MIRROR``; official hosts).

    Raises:
        DownloadError: a file no URL delivered (network, HTTP error, wrong checksum, too many bytes).
        UnsafeArchiveError: an archive holding a link, device or FIFO, a name leading out of
            ``root``, or more bytes or members than its bounds; nothing of it was put in place.
        UnknownCorpusError, UsageError: a wrong name or variant; an archive that did not hold the folder.
        UnsafePathError: the corpus' folder below ``root`` leads out of it through a link (:func:`corpus_folder`;
            checked before anything is fetched, and again once unpacked).
    """
    corpus = get_corpus(name)
    chosen = corpus.variant(variant)
    root = ensure_folder(Path(root).expanduser(), named=True)
    corpus_folder(corpus.name, root, variant)  # a folder leading out is refused before anything is fetched
    for file in chosen.files:
        dest = root / file.filename
        report = None if progress is None else _for_file(progress, file.filename)
        failures: list[DownloadError] = []
        for url in file_urls(file, base_url):
            try:
                download_file(url, dest, md5=file.md5, max_bytes=file.download_limit(), progress=report)
                break
            except DownloadError as exc:
                failures.append(exc)
        else:
            if len(failures) == 1:
                raise failures[0]
            raise DownloadError(f"cannot download {file.filename} from any of its {len(failures)} URLs: "
                                + "; ".join(str(e) for e in failures),
                                url=failures[0].url, network=all(e.network for e in failures))  # fmt: skip
        if file.extract:
            extract_archive(dest, root, **file.extraction_limits())
    folder = corpus_folder(corpus.name, root, variant)
    if not folder.is_dir():
        raise UsageError(f"{corpus.name}: the downloaded files did not make {folder}; remove "
                         f"{', '.join(f.filename for f in chosen.files)} from {root} and download again")  # fmt: skip
    return folder


def _for_file(progress: CorpusProgress, filename: str) -> Callable[[int, int | None], None]:
    return lambda done, total: progress(filename, done, total)


def offline_message(name: str, root: str | os.PathLike, variant: str | None = None, *,
                    base_url: str | None = None) -> str:  # fmt: skip
    """What to do when corpus ``name`` is not in ``root`` and will not be downloaded now: the
    files (name, MD5, URL — on ``base_url`` / ``$MODFORGE_DATA_MIRROR`` when given), the folder
    they go into and where the corpus then lies."""
    corpus = get_corpus(name)
    chosen_name = corpus.variant_name(variant)
    chosen = corpus.variants[chosen_name]
    root_text = os.fspath(root)
    flag = f" --variant {chosen_name}" if len(corpus.variants) > 1 else ""
    try:
        urls = [file_urls(f, base_url) for f in chosen.files]
    except DownloadError:  # an unusable mirror setting: the official URLs
        urls = [list(f.urls) for f in chosen.files]
    lines = [
        f"{corpus.name}{f' ({chosen_name})' if flag else ''} is not in {root_text}. Run "
        f"'modforge data download {corpus.name} --root {root_text}{flag}' on a machine with internet access, "
        f"or put these files into {root_text} yourself, then run that command there (it checks them, "
        "fetches nothing and unpacks what needs it):",
    ]
    for file, file_url in zip(chosen.files, urls, strict=True):
        mirrors = f" (or {', '.join(file_url[1:])})" if len(file_url) > 1 else ""
        lines.append(f"  {file.filename}  md5 {file.md5}  from {file_url[0]}{mirrors}")
    where = Path(root_text) / chosen.folder if chosen.folder else Path(root_text)
    lines.append(f"The corpus then lies in {where}.")
    return "\n".join(lines)
