"""Resource bounds on data (issue 25: hole 8 and deliverable 8).

A dataset folder, a COCO annotation file, a generated set's ``meta.json`` and a weights file
named by ``model.init`` come from someone else. Each test plants what an attacker would — a
``file_name`` leaving the image folder, ids of 10^30, 10^5 categories, a 200,000-deep JSON
file, a PNG whose header promises a gigapixel, a forged weights file under a pin, a real COCO
set at the place ``make-shapes --overwrite`` writes — and checks the refusal: one
:class:`~modforge.core.errors.UsageError` naming the file and the entry (exit 2 and one line
for a command), while a victim file stays byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import time
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import modforge as mf
from modforge.core.errors import ConfigError, UsageError
from modforge.core.json_limits import JsonLimitError, json_depth, read_json
from modforge.core.safe_files import UnsafePathError
from modforge.data.audio.spoof_corpus import make_spoof_corpus
from modforge.data.detection import coco as coco_module
from modforge.data.detection.coco import (
    MAX_CATEGORIES,
    MAX_ID,
    AnnotationError,
    SkipReport,
    coco_dataset,
    pixel_limit,
    read_instances,
)
from modforge.data.detection.shapes import make_shapes

pytestmark = pytest.mark.hostile

VICTIM = b"\x89PNG private picture of someone else; must never be read, shown or changed\n"
CATS = [{"id": 1, "name": "dog"}, {"id": 2, "name": "cat"}]
IMAGE = {"id": 1, "file_name": "one.png", "width": 40, "height": 30}
BOX = {"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 3, 10, 8], "area": 80, "iscrowd": 0}


def png(path: Path, width: int = 40, height: int = 30) -> Path:
    Image.new("RGB", (width, height), (90, 120, 30)).save(path)
    return path


def header_only_png(width: int, height: int) -> bytes:
    """A valid PNG header announcing ``width``×``height`` RGB pixels and a tiny IDAT: a few hundred
    bytes whose decoding would take ``3 × width × height`` bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 4096)) + chunk(b"IEND", b"")


def coco_root(tmp_path: Path, images: list[dict], annotations: list[dict], categories: list[dict] = CATS) -> Path:
    """``tmp_path/set`` with ``images/train/one.png`` and ``annotations/instances_train.json``."""
    root = tmp_path / "set"
    (root / "images" / "train").mkdir(parents=True, exist_ok=True)
    (root / "annotations").mkdir(exist_ok=True)
    png(root / "images" / "train" / "one.png")
    doc = {"images": images, "annotations": annotations, "categories": categories}
    (root / "annotations" / "instances_train.json").write_text(json.dumps(doc))
    return root


def load(root: Path, **args: Any):
    return coco_dataset(str(root), val_annotations=None, test_annotations=None, min_size=None, max_size=None, **args)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the dataset with a private picture (the victim) in it."""
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "secret.png").write_bytes(VICTIM)
    return folder


def one_line(res) -> str:
    lines = res.err.strip().splitlines()
    assert res.code == 2, res
    assert len(lines) == 1, res.err
    assert "Traceback" not in res.err and "unexpected" not in res.err, res.err
    return lines[0]


# ------------------------------------------------------------------ file_name stays inside the image folder
@pytest.mark.parametrize("name", ["../../private/secret.png", "../../private/missing.png", "sub/../../../x.png",
                                  "ABSOLUTE", "link.png", "linked_dir/secret.png"])  # fmt: skip
@pytest.mark.parametrize("skip_bad", [False, True])
def test_a_file_name_leaving_the_image_folder_is_refused_naming_file_and_image(tmp_path, outside, name, skip_bad):
    if name == "ABSOLUTE":
        name = str(outside / "secret.png")
    root = coco_root(tmp_path, [IMAGE, {**IMAGE, "id": 7, "file_name": name}], [BOX])
    os.symlink(outside / "secret.png", root / "images" / "train" / "link.png")
    os.symlink(outside, root / "images" / "train" / "linked_dir")
    with pytest.raises(UnsafePathError) as info:
        load(root, skip_bad=skip_bad)  # even skip_bad does not just skip a name pointing out
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{root / 'annotations' / 'instances_train.json'}: image 7: file_name ")
    assert ("inside" in message or "leads outside" in message) and "px" not in message and "not found" not in message  # nothing about the target
    assert (outside / "secret.png").read_bytes() == VICTIM


def test_the_refusal_says_the_same_whether_the_outside_file_exists_or_not(tmp_path, outside):
    messages = []
    for name in ("../../private/secret.png", "../../private/nothing.png"):
        root = coco_root(tmp_path, [{**IMAGE, "id": 7, "file_name": name}], [])
        with pytest.raises(UnsafePathError) as info:
            load(root)
        messages.append(str(info.value).replace(name, "NAME"))
    assert messages[0] == messages[1]


def test_names_and_links_that_stay_inside_are_read(tmp_path):
    root = coco_root(tmp_path, [IMAGE, {**IMAGE, "id": 2, "file_name": "sub/two.png"},
                                {**IMAGE, "id": 3, "file_name": "alias.png"}], [BOX])  # fmt: skip
    (root / "images" / "train" / "sub").mkdir()
    png(root / "images" / "train" / "sub" / "two.png")
    os.symlink("one.png", root / "images" / "train" / "alias.png")
    data = load(root)
    assert len(data.train) == 3 and data.train[2]["input"].shape[-2:] == (30, 40)


def test_a_coco_dataset_leaving_its_folder_is_one_line_from_modforge_train(cli, tmp_path, outside):
    root = coco_root(tmp_path, [{**IMAGE, "file_name": "../../private/secret.png"}], [BOX])
    config = Path(__file__).resolve().parents[1] / "configs" / "detection" / "shapes_fcos.yaml"
    res = cli("train", str(config), f"data.args.root={root}", "data.args.val_annotations=null",
              "data.args.test_annotations=null", "--run-dir", "run")  # fmt: skip
    line = one_line(res)
    assert "instances_train.json: image 1: file_name '../../private/secret.png'" in line, line
    assert (outside / "secret.png").read_bytes() == VICTIM


# ------------------------------------------------------------------ ids and counts
@pytest.mark.parametrize(
    ("images", "annotations", "categories", "expected"),
    [
        ([IMAGE], [BOX], [{"id": 10**30, "name": "dog"}], r"category #0: id 10{30} is out of range"),
        ([IMAGE], [BOX], [{"id": -1, "name": "dog"}], r"category #0: id -1 is out of range"),
        ([{**IMAGE, "id": 10**40}], [BOX], CATS, r"image #0: id 10{36}\.\.\. is out of range"),
        ([IMAGE], [{**BOX, "id": 10**30}], CATS, r"annotation #0: id 10{30} is out of range"),
        ([IMAGE], [{**BOX, "image_id": 10**40}], CATS, r"annotation 1 \(image 10{36}\.\.\.\): image_id 10{36}\.\.\. is not"),
        ([IMAGE], [{**BOX, "category_id": 10**30}], CATS, r"annotation 1 \(image 1\): unknown category_id 10{30}"),
        ([{**IMAGE, "width": 10**30}], [BOX], CATS, r"image 1: expected positive integer 'width' and 'height'|image 1: a listed size"),
        ([{**IMAGE, "width": 20_000, "height": 20_000}], [], CATS, r"image 1: a listed size of 20000×20000 is more than"),
    ],
)  # fmt: skip
def test_ids_out_of_range_are_one_error_naming_file_and_id(tmp_path, images, annotations, categories, expected):
    root = coco_root(tmp_path, images, annotations, categories)
    with pytest.raises(AnnotationError, match=rf"^{root / 'annotations' / 'instances_train.json'}: {expected}") as info:
        load(root)
    assert "\n" not in str(info.value)


def test_with_skip_bad_an_out_of_range_id_is_left_out_and_the_rest_is_read(tmp_path):
    root = coco_root(tmp_path, [IMAGE, {**IMAGE, "id": 2**63}], [BOX, {**BOX, "id": 10**30}])
    report = SkipReport()
    images, _ = read_instances(root / "annotations" / "instances_train.json", root / "images" / "train",
                               skip_bad=True, report=report)  # fmt: skip
    assert [im.image_id for im in images] == [1] and images[0].ann_ids.tolist() == [1]
    assert (report.images, report.annotations) == (1, 1)


def test_the_largest_int64_ids_still_evaluate_with_pycocotools(tmp_path):
    big = MAX_ID
    root = coco_root(tmp_path, [{**IMAGE, "id": big}], [{**BOX, "id": big, "image_id": big, "category_id": big}],
                     [{"id": big, "name": "dog"}])  # fmt: skip
    data = load(root)
    assert data.train.image_ids.tolist() == [big] and data.normalisation["label_to_category"] == [big]
    from pycocotools.coco import COCO

    gt = COCO()
    gt.dataset = data.train.coco_ground_truth()
    gt.createIndex()
    assert gt.getAnnIds(imgIds=[big]) == [big]


def test_too_many_categories_are_refused_before_anything_is_allocated(tmp_path):
    categories = [{"id": i + 1, "name": f"c{i}"} for i in range(10**5)]
    root = coco_root(tmp_path, [IMAGE], [BOX], categories)
    began = time.perf_counter()
    with pytest.raises(AnnotationError, match=rf"instances_train.json: lists 100000 categories, more than the {MAX_CATEGORIES}"):
        load(root)
    assert time.perf_counter() - began < 10


def test_more_images_than_the_cap_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(coco_module, "MAX_IMAGES", 2)
    root = coco_root(tmp_path, [IMAGE, {**IMAGE, "id": 2}, {**IMAGE, "id": 3}], [BOX])
    with pytest.raises(AnnotationError, match="instances_train.json: lists 3 images, more than the 2 allowed"):
        load(root)


# ------------------------------------------------------------------ JSON depth and size
def test_a_200000_deep_annotation_file_is_one_error_naming_it(tmp_path):
    root = coco_root(tmp_path, [IMAGE], [BOX])
    path = root / "annotations" / "instances_train.json"
    path.write_text('{"images": [], "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(AnnotationError, match=rf"^annotation file {path} nests arrays/objects 200001 deep, more than"):
        load(root)


@pytest.mark.parametrize(
    "text",
    ['{"a": "[[[[[[", "b": [1]}', r'["\"[[[", [[2]]]', r'["\\", [[[1]]]]', r'{"k\\\"[": {"z": [[]]}}', "3", "[]"],
)
def test_brackets_inside_strings_do_not_count(text):
    def depth(value: Any) -> int:
        if isinstance(value, dict):
            return 1 + max(map(depth, value.values()), default=0)
        if isinstance(value, list):
            return 1 + max(map(depth, value), default=0)
        return 0

    assert json_depth(text.encode()) == depth(json.loads(text))


def test_json_depth_is_exact_on_random_documents():
    rng = np.random.default_rng(0)
    atoms = ["x", '"', "\\", "[{", "\\\\]", "é", 1, None]

    def make(level: int) -> tuple[Any, int]:
        kind = rng.integers(3) if level < 8 else 0
        if kind == 0:
            return atoms[rng.integers(len(atoms))], 0
        items = [make(level + 1) for _ in range(rng.integers(4))]
        inner = max((d for _, d in items), default=0) + 1
        if kind == 1:
            return [v for v, _ in items], inner
        return {f"{atoms[rng.integers(3)]}{i}": v for i, (v, _) in enumerate(items)}, inner

    for _ in range(300):
        value, expected = make(0)
        for ascii_only in (True, False):
            assert json_depth(json.dumps(value, ensure_ascii=ascii_only).encode()) == expected


def test_size_and_kind_limits_of_the_json_reader(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"x": "a" * 2000}))
    with pytest.raises(JsonLimitError, match=rf"^meta.json {path} is \d+ bytes, more than the 1000"):
        read_json(path, what="meta.json", max_bytes=1000)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(JsonLimitError, match=rf"^meta.json {fifo} is not a regular file"):
        read_json(fifo, what="meta.json")  # refused, not a read that waits for a writer forever
    assert read_json(path) == {"x": "a" * 2000}


# ------------------------------------------------------------------ decompression bombs
def bomb_root(tmp_path: Path, payload: bytes, verify: str = "header") -> Path:
    root = coco_root(tmp_path, [IMAGE], [BOX])
    (root / "images" / "train" / "one.png").write_bytes(payload)
    return root


def test_a_small_png_decoding_to_a_gigabyte_is_refused_before_decoding(tmp_path):
    payload = header_only_png(19_000, 19_000)  # 1.08 GB of RGB pixels from a few hundred bytes
    assert len(payload) < 1000
    root = bomb_root(tmp_path, payload)
    limit, filters = Image.MAX_IMAGE_PIXELS, list(warnings.filters)
    for verify in ("header", "exists"):
        with pytest.raises(AnnotationError, match=r"instances_train.json: image 1: image file .*one.png holds "
                                                  r"361000000 pixels, far more than the 40×30 .*decompression bomb"):  # fmt: skip
            data = load(root, verify=verify)
            data.train[0]  # verify: exists opens the file only here (what a DataLoader worker does)
    assert Image.MAX_IMAGE_PIXELS == limit and warnings.filters == filters  # the setting was scoped


def test_pillows_warning_range_is_an_error_too(tmp_path):
    # 50×40 = 2,000 pixels: above the limit of 40×30×1.25 = 1,500 but below twice it, where Pillow only warns
    root = bomb_root(tmp_path, b"")
    png(root / "images" / "train" / "one.png", 50, 40)
    with pytest.raises(AnnotationError, match=r"image 1: image file .*one.png holds 2000 pixels.*decompression bomb"):
        load(root)


def test_pixel_limit_restores_pillows_setting_even_on_error():
    before = Image.MAX_IMAGE_PIXELS
    with pytest.raises(RuntimeError), pixel_limit(10):
        assert Image.MAX_IMAGE_PIXELS == 10
        raise RuntimeError("inside")
    assert Image.MAX_IMAGE_PIXELS == before


def test_an_eps_file_is_not_handed_to_ghostscript(tmp_path):
    root = bomb_root(tmp_path, b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 40 30\nshowpage\n")
    with pytest.raises(AnnotationError, match=r"image 1: image file .*one.png is not a readable image \(expected one of PNG"):
        load(root)


# ------------------------------------------------------------------ model.init sha256 before parsing
def test_a_pinned_digest_is_checked_before_the_file_is_parsed(tmp_path, monkeypatch):
    import modforge.core.weight_formats as formats

    model = {"backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "head": "linear"}
    good = tmp_path / "good.pt"
    torch.save(mf.build_model(model, in_dim=4, num_classes=3).state_dict(), good)
    pinned = hashlib.sha256(good.read_bytes()).hexdigest()
    forged = tmp_path / "forged.pt"
    forged.write_bytes(b"\x80\x04\x95not a torch file, a crafted pickle")
    parsed: list[str] = []
    real = formats.read_torch_file
    monkeypatch.setattr(formats, "read_torch_file", lambda path, **kw: parsed.append(str(path)) or real(path, **kw))
    for fmt in ("modforge", "auto"):
        init = {"path": str(forged), "format": fmt, "sha256": pinned}
        with pytest.raises(ConfigError, match=rf"model.init.sha256: .*forged.pt has SHA-256 [0-9a-f]{{64}}, "
                                              rf"not the {pinned} the config pins \(nothing in it was read\)"):  # fmt: skip
            mf.build_model({**model, "init": init}, in_dim=4, num_classes=3)
    assert parsed == []  # neither torch.load nor any format looked inside
    built = mf.build_model({**model, "init": {"path": str(good), "format": "state_dict", "sha256": pinned.upper()}},
                           in_dim=4, num_classes=3)  # fmt: skip
    assert built.init_records[0]["sha256"] == pinned and parsed == [str(good)]


# ------------------------------------------------------------------ make-shapes --overwrite
def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def real_coco_set(folder: Path) -> Path:
    """A user's own COCO set: images/ and annotations/ like a shapes set, but no meta.json of modforge's."""
    (folder / "images" / "train").mkdir(parents=True)
    (folder / "annotations").mkdir()
    (folder / "images" / "train" / "000001.png").write_bytes(VICTIM)
    (folder / "annotations" / "instances_train.json").write_text('{"images": [], "annotations": []}')
    return folder


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (None, "has no meta.json saying it is a shapes set"),
        ({"generator": "labelme"}, "meta.json names generator 'labelme', not 'modforge.data.detection.shapes'"),
        ("[" * 100_000 + "]" * 100_000, "meta.json .* nests arrays/objects 100000 deep"),
    ],
)
def test_make_shapes_overwrite_refuses_a_real_coco_set(cli, tmp_path, meta, expected):
    victim = real_coco_set(tmp_path / "mycoco")
    if meta is not None:
        (victim / "meta.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    before = snapshot(victim)
    res = cli("data", "make-shapes", str(victim), "--images", "6", "--size", "48", "--overwrite")
    line = one_line(res)
    assert "mycoco" in line and "--overwrite" in line and "only a shapes set modforge made is replaced" in line, line
    assert re.search(expected, line), line
    assert snapshot(victim) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mycoco"]  # no staging folder left behind


def made_set(folder: Path) -> Path:
    make_shapes(folder, images=6, size=48, min_object=6.0, max_object=24.0)
    return folder


def test_make_shapes_overwrite_refuses_a_shapes_set_holding_a_link_or_a_foreign_file(cli, tmp_path, outside):
    shapes = made_set(tmp_path / "shapes")
    link = shapes / "images" / "train" / "000099.png"
    os.symlink(outside / "secret.png", link)
    res = cli("data", "make-shapes", str(shapes), "--images", "6", "--size", "48", "--overwrite")
    assert "images/train/000099.png, a symbolic link" in one_line(res)
    link.unlink()
    (shapes / "images" / "train" / "thesis.docx").write_bytes(VICTIM)
    res = cli("data", "make-shapes", str(shapes), "--images", "6", "--size", "48", "--overwrite")
    assert "images/train/thesis.docx, a file modforge did not write (a shapes set has none)" in one_line(res)
    assert (shapes / "images" / "train" / "thesis.docx").read_bytes() == VICTIM
    assert (outside / "secret.png").read_bytes() == VICTIM


def test_make_shapes_overwrite_refuses_an_images_folder_that_is_a_link(cli, tmp_path, outside):
    shapes = made_set(tmp_path / "shapes")
    images = shapes / "images"
    images.rename(tmp_path / "moved")
    os.symlink(outside, images)
    res = cli("data", "make-shapes", str(shapes), "--images", "6", "--size", "48", "--overwrite")
    assert "holds images, a symbolic link" in one_line(res)
    assert snapshot(outside) == {"secret.png": VICTIM}


def test_make_shapes_overwrite_replaces_its_own_set_and_keeps_the_mode(cli, tmp_path):
    shapes = made_set(tmp_path / "shapes")
    os.chmod(shapes, 0o750)
    res = cli("data", "make-shapes", str(shapes), "--images", "9", "--size", "48", "--seed", "3", "--overwrite")
    assert res.code == 0, res.err
    assert json.loads((shapes / "meta.json").read_text())["seed"] == 3
    assert (shapes.stat().st_mode & 0o777) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shapes"]  # the earlier set was removed
    fresh = made_set(tmp_path / "fresh")
    umask = os.umask(0)
    os.umask(umask)
    assert (fresh.stat().st_mode & 0o777) == 0o777 & ~umask  # a new set gets the usual mode, not 0700


def test_the_spoof_corpus_maker_refuses_a_folder_it_did_not_make(tmp_path):
    victim = tmp_path / "asvspoof"
    (victim / "wav").mkdir(parents=True)
    (victim / "protocols").mkdir()
    (victim / "wav" / "LA_T_1000137.wav").write_bytes(VICTIM)
    before = snapshot(victim)
    with pytest.raises(ValueError, match=r"asvspoof has no meta.json saying it is a spoofing corpus; refusing"):
        make_spoof_corpus(victim, utts=25, duration=0.3, speakers=3, overwrite=True)
    assert snapshot(victim) == before and sorted(p.name for p in tmp_path.iterdir()) == ["asvspoof"]


def test_refusals_are_usage_errors():
    assert issubclass(AnnotationError, UsageError) and issubclass(JsonLimitError, UsageError)


def test_json_in_utf16_cannot_hide_its_depth(tmp_path):
    """json.loads(bytes) would also read UTF-16, whose brackets a byte scan does not see."""
    deep = '["\u225b", ' + "[" * 900 + "]" * 900 + "]"  # U+225B is the bytes '[' '"' in UTF-16-LE
    path = tmp_path / "deep.json"
    path.write_bytes(deep.encode("utf-16-le"))
    assert json.loads(path.read_bytes()) and json_depth(path.read_bytes()) < 32  # what the hole was
    with pytest.raises(JsonLimitError):  # read as UTF-8 it is not JSON at all: refused, never parsed as UTF-16
        read_json(path, max_depth=32)


@pytest.mark.parametrize("name", ["../../victim", "/etc/passwd", "sub/../../x"])
def test_names_in_a_spoofing_corpus_protocol_stay_in_its_audio_folder(tmp_path, name):
    """ASVspoof protocols and In-the-Wild's meta.csv list bare file names: one that climbs out
    of the audio folder is refused with its line (a manifest, the user's own table, may name
    absolute paths)."""
    from modforge.data.audio.protocols import ProtocolError, read_asvspoof2019, read_in_the_wild

    proto = tmp_path / "train.txt"
    proto.write_text(f"LA_0079 LA_T_1 - - bonafide\nLA_0079 {name} - A01 spoof\n")
    with pytest.raises(ProtocolError, match=r"train.txt:2: file name .* is not a relative path"):
        read_asvspoof2019(proto, tmp_path / "flac")
    meta = tmp_path / "meta.csv"
    meta.write_text(f"file,speaker,label\n0.wav,A,spoof\n{name},B,bona-fide\n")
    with pytest.raises(ProtocolError, match=r"meta.csv:3: file .* is not a relative path"):
        read_in_the_wild(meta)
