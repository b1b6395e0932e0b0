"""Every folder a dataset reads from resolves inside its root (issue 39, deliverable 4).

A dataset root may be a link the user named (``data.args.root: ~/data/coco``); everything below
it — a COCO split folder and annotation file, the ``tiny-imagenet-200`` folder and its
``train/<wnid>/images`` folders, an image folder's class folders, an audio folder's sub-folders
— must resolve inside the root's real path (:func:`modforge.core.safe_files.folder_below`). Each
test plants a link out of a root to a folder of private pictures (the victim, laid out so that
following the link would read it), runs the real command (``modforge test``, ``modforge data
show``), and checks the refusal: exit 2 and one line naming the dataset, the folder and the
root; no picture is drawn; and no file in the victim's folder is opened or listed (an audit
hook sees every ``open`` and folder listing of this process). Links that stay inside the root
still work — and the audit hook does see their files read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile
from PIL import Image

from image_fixtures import (
    write_cifar_binary,
    write_cifar_python,
    write_emnist,
    write_image_folder,
    write_mnist_family,
    write_tiny_imagenet,
)
from modforge.core.safe_files import UnsafePathError, folder_below
from modforge.data.audio.audio_folder import AudioFolder
from modforge.data.detection.coco import coco_dataset
from modforge.data.detection.shapes import make_shapes

pytestmark = pytest.mark.hostile

ROOT = Path(__file__).resolve().parents[1]
DETECTION = ROOT / "configs" / "detection" / "shapes_fcos.yaml"
SMALL = ["data.args.min_size=64", "data.args.max_size=64", "model.backbone.args.width=0.25",
         "model.neck.args.out_channels=32", "train.num_threads=1", "train.progress=never"]  # fmt: skip
MAGENTA = (255, 0, 255)


# ----------------------------------------------------------------------------- what this process touches
_watch: list[tuple[Path, list[str]]] = []


def _audit(event: str, args: tuple) -> None:
    """Record every file opened and folder listed under a watched folder (through links too)."""
    if not _watch or event not in ("open", "os.listdir", "os.scandir") or not args:
        return
    name = args[0]
    if not isinstance(name, (str, bytes, os.PathLike)):
        return  # a descriptor
    real = os.path.realpath(os.fsdecode(name))
    for folder, seen in _watch:
        if real == str(folder) or real.startswith(f"{folder}{os.sep}"):
            seen.append(real)


sys.addaudithook(_audit)


@contextlib.contextmanager
def touched(folder: Path) -> Iterator[list[str]]:
    """The real paths under ``folder`` this process opens or lists inside the ``with`` block."""
    seen: list[str] = []
    entry = (folder.resolve(), seen)
    _watch.append(entry)
    try:
        yield seen
    finally:
        _watch.remove(entry)


def one_line(res) -> str:
    lines = res.err.strip().splitlines()
    assert res.code == 2, res
    assert len(lines) == 1, res.err
    assert "Traceback" not in res.err, res.err
    return lines[0]


def victim_copy(source: Path, victim: Path) -> Path:
    """``victim``: ``source``'s tree with every picture replaced by a private (magenta) one of the same
    name and size — what a link out of a dataset would make modforge read."""
    shutil.copytree(source, victim)
    for path in victim.rglob("*"):
        if path.suffix.lower() in (".png", ".jpeg", ".jpg"):
            with Image.open(path) as im:
                size, mode = im.size, im.mode
            Image.new("RGB", size, MAGENTA).convert(mode).save(path, format=im.format)
    return victim


def link_out(path: Path, victim: Path) -> None:
    """Replace ``path`` (a folder or file of a dataset) by a link to ``victim``, its private twin."""
    if path.is_dir():
        victim_copy(path, victim)
        shutil.rmtree(path)
    else:
        shutil.copy(path, victim)
        path.unlink()
    path.symlink_to(victim)


# ----------------------------------------------------------------------------- COCO
@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    root = tmp_path / "set"
    make_shapes(root, images=12, size=64, seed=0, max_object=32)
    return root


@pytest.mark.parametrize("planted", ["images/test", "annotations/instances_test.json"])
def test_modforge_test_refuses_a_coco_split_folder_or_file_linking_out_of_the_root(cli, tmp_path, shapes, planted):
    victim = tmp_path / "private" / "pictures"
    victim.parent.mkdir()
    link_out(shapes / planted, victim)
    with touched(victim.parent) as seen:
        res = cli("test", str(DETECTION), f"data.args.root={shapes}", *SMALL, "--run-dir", "ev")
    line = one_line(res)
    role = "test_images" if planted.startswith("images") else "test_annotations"
    assert f"coco: {role}: {shapes / planted} leads outside the dataset root {shapes} through a link" in line, line
    assert seen == [], f"the victim's files were looked at: {seen}"
    assert not (tmp_path / "ev" / "detections.png").exists()


def test_coco_folders_linking_inside_the_root_are_read_and_the_root_may_be_a_link(cli, tmp_path, shapes):
    store = shapes / "store"
    store.mkdir()
    shutil.move(shapes / "images" / "test", store / "test")
    (shapes / "images" / "test").symlink_to(store / "test")  # stays inside the root
    (tmp_path / "named").symlink_to(shapes)  # the root the user names may itself be a link
    with touched(store) as seen:
        res = cli("test", str(DETECTION), f"data.args.root={tmp_path / 'named'}", *SMALL, "--run-dir", "ev")
    assert res.code == 0, res.err
    assert (tmp_path / "ev" / "detections.png").stat().st_size > 0
    assert any(path.endswith(".png") for path in seen)  # the audit hook does see pictures read


@pytest.mark.parametrize("name", ["../private", "ABSOLUTE", "images/../../private"])
def test_a_coco_folder_name_leaving_the_root_is_refused(tmp_path, shapes, name):
    victim = victim_copy(shapes / "images" / "test", tmp_path / "private")
    name = str(victim) if name == "ABSOLUTE" else name
    with touched(victim) as seen, pytest.raises(UnsafePathError) as info:
        coco_dataset(str(shapes), test_images=name, min_size=None, max_size=None)
    assert str(info.value).startswith(f"coco: test_images {name!r} is not a relative path inside {shapes}")
    assert seen == []


# ----------------------------------------------------------------------------- pictures: data show
def _show(cli, tmp_path: Path, data: str, *args: str):
    (tmp_path / "show.yaml").write_text(f"data: {data}\n")
    return cli("data", "show", "show.yaml", "-n", "2", "--out", "shown.png", *args)


@pytest.mark.parametrize("planted", ["tiny-imagenet-200", "train/<wnid>/images"])
def test_data_show_refuses_a_tiny_imagenet_folder_linking_out_of_the_root(cli, tmp_path, planted):
    written = write_tiny_imagenet(tmp_path / "tin")
    path = (tmp_path / "tin" / planted) if planted == "tiny-imagenet-200" else \
        written.folder / planted.replace("<wnid>", written.wnids[0])  # fmt: skip
    victim = tmp_path / "private" / "pictures"
    victim.parent.mkdir()
    link_out(path, victim)
    with touched(victim.parent) as seen:
        res = _show(cli, tmp_path, f"{{type: tiny_imagenet, args: {{root: {tmp_path / 'tin'}}}}}")
    line = one_line(res)
    if planted == "tiny-imagenet-200":
        assert (f"tiny_imagenet: {path} leads outside the dataset root {tmp_path / 'tin'} through a link (to {victim})"
                in line), line  # fmt: skip
    else:
        assert f"Tiny-ImageNet folder {written.folder}: {path} is a symbolic link to {victim}, outside" in line, line
    assert seen == [], f"the victim's files were looked at: {seen}"
    assert not (tmp_path / "shown.png").exists()


def test_a_tiny_imagenet_folder_linking_inside_the_root_is_read(cli, tmp_path):
    write_tiny_imagenet(tmp_path / "tin" / "store")
    (tmp_path / "tin" / "tiny-imagenet-200").symlink_to(tmp_path / "tin" / "store" / "tiny-imagenet-200")
    res = _show(cli, tmp_path, f"{{type: tiny_imagenet, args: {{root: {tmp_path / 'tin'}}}}}", "--split", "test")
    assert res.code == 0, res.err
    assert (tmp_path / "shown.png").stat().st_size > 0


def test_data_show_refuses_an_image_folders_class_folder_linking_out_of_the_root(cli, tmp_path):
    write_image_folder(tmp_path / "pics", {"cat": 2, "dog": 2})
    victim = tmp_path / "private" / "pictures"
    victim.parent.mkdir()
    link_out(tmp_path / "pics" / "dog", victim)
    with touched(victim.parent) as seen:
        res = _show(cli, tmp_path, f"{{type: image_folder, args: {{root: {tmp_path / 'pics'}}}}}")
    line = one_line(res)
    assert f"{tmp_path / 'pics' / 'dog'} is a symbolic link to {victim}, outside the image folder" in line, line
    assert seen == [], f"the victim's files were looked at: {seen}"
    assert not (tmp_path / "shown.png").exists()


def test_an_image_folders_class_folder_linking_inside_the_root_is_read(cli, tmp_path):
    write_image_folder(tmp_path / "pics", {"cat": 2})
    write_image_folder(tmp_path / "pics" / "store", {"dog": 2})
    (tmp_path / "pics" / "dog").symlink_to(tmp_path / "pics" / "store" / "dog")
    with touched(tmp_path / "pics" / "store") as seen:
        res = _show(cli, tmp_path, f"{{type: image_folder, args: {{root: {tmp_path / 'pics'}, classes: [cat, dog], "
                                   "val_fraction: 0.0}}", "-n", "4")  # fmt: skip
    assert res.code == 0, res.err
    assert any(path.endswith(".png") for path in seen)


# ----------------------------------------------------------------------------- CIFAR and IDX corpora, downloads
CORPUS_KINDS = {"cifar10": "cifar10: batches folder", "cifar10-binary": "cifar10: batches folder",
                "cifar100": "cifar100: batches folder", "mnist": "mnist: MNIST/raw folder",
                "emnist-gzip": "emnist: gzip folder", "emnist-raw": "emnist: EMNIST/raw folder"}  # fmt: skip
"""Each corpus layout, and how a refusal names the dataset and the folder."""


def _corpus(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """A corpus ``kind`` written in ``tmp_path/root``: (root, the folder below it the reader looks into)."""
    root = tmp_path / "root"
    if kind.startswith("cifar"):
        writer = write_cifar_binary if kind.endswith("binary") else write_cifar_python
        return root, writer(root, kind.split("-")[0]).folder
    if kind == "mnist":
        return root, write_mnist_family(root / "MNIST" / "raw").folder
    gz = kind == "emnist-gzip"
    return root, write_emnist(root / ("gzip" if gz else "EMNIST/raw"), "balanced", gz=gz, raw=not gz).folder


def _corpus_config(kind: str, root: Path) -> str:
    corpus = kind.split("-")[0]
    return f"{{type: {corpus}, args: {{root: {root}{', split: balanced' if corpus == 'emnist' else ''}}}}}"


@pytest.mark.parametrize("kind", CORPUS_KINDS)
def test_data_show_refuses_a_corpus_folder_linking_out_of_the_root(cli, tmp_path, kind):
    """CIFAR's batches folder, torchvision's ``MNIST/raw`` and ``EMNIST/raw``, EMNIST's ``gzip``: a link out of
    the root to a private copy is refused before anything in it is read."""
    root, folder = _corpus(tmp_path, kind)
    victim = tmp_path / "private" / folder.name
    victim.parent.mkdir()
    link_out(folder, victim)
    with touched(victim.parent) as seen:
        res = _show(cli, tmp_path, _corpus_config(kind, root))
    line = one_line(res)
    assert (f"{CORPUS_KINDS[kind]}: {folder} leads outside the dataset root {root} through a link (to {victim})"
            in line), line  # fmt: skip
    assert seen == [], f"the victim's files were looked at: {seen}"
    assert not (tmp_path / "shown.png").exists()


@pytest.mark.parametrize("kind", CORPUS_KINDS)
def test_a_corpus_folder_linking_inside_the_root_is_read_and_the_root_may_be_a_link(cli, tmp_path, kind):
    root, folder = _corpus(tmp_path, kind)
    store = root / "store" / folder.name
    store.parent.mkdir()
    shutil.move(folder, store)
    folder.symlink_to(store)  # stays inside the root
    (tmp_path / "named").symlink_to(root)  # the root the user names may itself be a link
    with touched(store) as seen:
        res = _show(cli, tmp_path, _corpus_config(kind, tmp_path / "named"))
    assert res.code == 0, res.err
    assert (tmp_path / "shown.png").stat().st_size > 0
    assert seen, "the audit hook does see the corpus read"


def test_a_download_into_a_folder_linking_out_of_the_root_is_refused_before_anything_is_fetched(tmp_path, monkeypatch):
    """``corpus_folder`` and ``download_corpus``: the corpus' folder below ``--root`` (``cifar-10-batches-py``,
    EMNIST's ``gzip``) must resolve inside it — checked before a byte is fetched."""
    from modforge.data.images import catalog

    root, folder = _corpus(tmp_path, "cifar10")
    victim = tmp_path / "private" / folder.name
    victim.parent.mkdir()
    link_out(folder, victim)
    fetched: list[str] = []
    monkeypatch.setattr(catalog, "download_file", lambda url, dest, **kw: fetched.append(url))
    expected = f"cifar10: download folder: {folder} leads outside the dataset root {root} through a link (to {victim})"
    for call in (lambda: catalog.corpus_folder("cifar10", root), lambda: catalog.download_corpus("cifar10", root)):
        with touched(victim.parent) as seen, pytest.raises(UnsafePathError) as info:
            call()
        assert str(info.value).startswith(expected), str(info.value)
        assert seen == [] and fetched == []
    (root / "inside").mkdir()
    (root / "gzip").symlink_to(root / "inside")  # a link that stays inside is fine
    assert catalog.corpus_folder("emnist", root) == root / "gzip"
    assert catalog.corpus_folder("mnist", root) == root


# ----------------------------------------------------------------------------- audio folders
def _audio(folder: Path, names: list[str]) -> None:
    for k, name in enumerate(names):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        soundfile.write(folder / name, 0.1 * np.random.default_rng(k).standard_normal(1600), 16000)


def test_an_audio_folders_sub_folder_linking_out_is_refused_by_the_command(cli, tmp_path):
    from modforge.data.audio.spoof_corpus import make_spoof_corpus

    make_spoof_corpus(tmp_path / "corpus", utts=25, duration=0.3, speakers=3)
    _audio(tmp_path / "noise", ["music/a.wav"])
    _audio(tmp_path / "private", ["secret.wav"])
    (tmp_path / "noise" / "speech").symlink_to(tmp_path / "private")
    noise = f"{{type: background_noise, args: {{noise_dir: {tmp_path / 'noise'}, subfolders: [music, speech]}}}}"
    with touched(tmp_path / "private") as seen:
        res = _show(cli, tmp_path, f"{{type: spoof_corpus, args: {{root: {tmp_path / 'corpus'}, augment: [{noise}]}}}}")
    line = one_line(res)
    assert (f"noise_dir '{tmp_path / 'noise'}', sub-folder: {tmp_path / 'noise' / 'speech'} leads outside the dataset "
            f"root {tmp_path / 'noise'} through a link") in line, line  # fmt: skip
    assert seen == []


def test_an_audio_folders_sub_folder_linking_inside_is_read(tmp_path):
    _audio(tmp_path / "noise", ["music/a.wav", "store/speech/b.wav"])
    (tmp_path / "noise" / "speech").symlink_to(tmp_path / "noise" / "store" / "speech")
    folder = AudioFolder(tmp_path / "noise", 16000, ["music", "speech"], what="noise_dir")
    assert [p.name for p in folder.files] == ["a.wav", "b.wav"]
    assert folder.read(1).shape == (1600,)


@pytest.mark.parametrize("planted", ["wav", "protocols/eval.txt", "protocols/eval_channels.txt"])
def test_a_spoofing_corpus_whose_audio_or_protocol_links_out_is_refused(cli, tmp_path, planted):
    """A challenge layout (ASVspoof 2019/5, the generated corpus): its audio folders and protocol files
    are below the root; a link out among them is refused before anything in it is read."""
    from modforge.data.audio.spoof_corpus import make_spoof_corpus

    corpus = tmp_path / "corpus"
    make_spoof_corpus(corpus, utts=25, duration=0.3, speakers=3)
    (tmp_path / "private").mkdir()
    link_out(corpus / planted, tmp_path / "private" / Path(planted).name)
    with touched(tmp_path / "private") as seen:
        res = _show(cli, tmp_path, f"{{type: spoof_corpus, args: {{root: {corpus}}}}}")
    line = one_line(res)
    assert f"{corpus / planted} leads outside the dataset root {corpus} through a link" in line, line
    assert seen == []


# ----------------------------------------------------------------------------- the helper itself
def test_folder_below_takes_a_root_that_is_a_link_and_refuses_only_what_leads_out(tmp_path):
    (tmp_path / "real" / "a" / "b").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "named").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "inner").symlink_to(tmp_path / "real" / "a")
    (tmp_path / "real" / "out").symlink_to(tmp_path / "outside")
    (tmp_path / "real" / "loop").symlink_to("loop")
    named = tmp_path / "named"
    assert folder_below(named, "a/b", "x: folder") == named / "a" / "b"
    assert folder_below(named, "inner/b", "x: folder") == named / "inner" / "b"
    assert folder_below(named, "missing", "x: folder") == named / "missing"  # existence is the caller's
    with pytest.raises(UnsafePathError, match=r"^x: folder: .*/named/out leads outside the dataset root .*/named "):
        folder_below(named, "out", "x: folder")
    with pytest.raises(UnsafePathError, match="loops"):
        folder_below(named, "loop/x", "x: folder")
    for bad in ("../real", "/etc", "~/x", ""):
        with pytest.raises(UnsafePathError, match="is not a relative path"):
            folder_below(named, bad, "x: folder")
