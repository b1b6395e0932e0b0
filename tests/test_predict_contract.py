"""``modforge predict`` knows its input contract (issue 41, deliverable 2): an export records what
the training pictures looked like and which checkpoint it came from; predict warns, one line per
kind, when a picture is inverted, coloured, resized more than ×4, stretched or constant; its
``--help`` documents every argument and the inputs; ``predict RUN`` re-exports a stale export."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from modforge.cli.main import main

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"
# a small, quick run whose validation loss still falls from one epoch to the next
TINY = ["train.progress=never", "train.num_threads=1", "model.backbone.args.channels=[8]", "train.metrics=[accuracy,loss]",
        "train.monitor=val_loss", "train.scheduler=null", "train.optimizer.args.lr=0.01", "data.batch_size=64",
        "train.callbacks=[]"]  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("contract") / "run"
    assert main(["train", str(CONFIG), "train.max_epochs=1", *TINY, "--run-dir", str(folder)]) == 0
    assert main(["export", str(folder), "--engine", "onnx"]) == 0
    return folder


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    """A digit as a scan (dark ink on white, 8×8, like the artifact expects) and altered copies."""
    from PIL import Image
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("pictures")
    paper = (255 - load_digits().images[0] / 16 * 255).astype("uint8")
    Image.fromarray(paper).save(folder / "scan.png")
    Image.fromarray(255 - paper).save(folder / "inverted.png")  # light strokes on dark, as sklearn stores it
    Image.fromarray(paper).resize((32, 32), Image.Resampling.BILINEAR).save(folder / "scan32.png")  # ×4: ordinary
    Image.fromarray(paper).resize((48, 48), Image.Resampling.BILINEAR).save(folder / "large.png")
    tinted = np.stack([paper, paper, paper], axis=-1).astype(np.int16)
    tinted[..., 0] += 60  # a warm paper: a colour picture
    tinted[..., 2] -= 60
    colour = Image.fromarray(np.clip(tinted, 0, 255).astype("uint8")).resize((48, 64), Image.Resampling.BILINEAR)
    colour.save(folder / "photo.png")
    Image.fromarray(np.full((8, 8), 230, dtype="uint8")).save(folder / "blank.png")
    return folder


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def test_the_export_records_the_training_pictures_and_its_checkpoint(run_dir):
    from modforge.cli.commands.predict_files import load_artifact
    from modforge.engines.artifact_source import file_digest

    _, metadata = load_artifact(run_dir)
    contract = metadata["input"]["image"]["contract"]
    assert contract["channels"] == 1 and contract["size"] == [8, 8]
    assert contract["polarity"] == "light-on-dark"  # sklearn's digits: bright strokes (16) on a 0 ground
    assert contract["range"] == [0.0, 1.0] and 0.0 < contract["mean"] < 0.5
    assert metadata["source"]["checkpoint"] == "best.pt"
    assert metadata["source"]["sha256"] == file_digest(run_dir / "checkpoints" / "best.pt")


def test_each_difference_gets_one_warning_naming_its_fix(run_dir, pictures, cli):
    scan = cli("predict", str(run_dir), str(pictures / "scan.png"), str(pictures / "scan32.png"))
    assert scan.code == 0 and _warnings(scan.err) == [], scan.err

    inverted = cli("predict", str(run_dir), str(pictures / "inverted.png"))
    (line,) = _warnings(inverted.err)
    assert "inverted.png: looks inverted — light strokes on a dark ground" in line and "pass --invert" in line
    assert _warnings(cli("predict", str(run_dir), str(pictures / "inverted.png"), "--invert").err) == []
    flipped = cli("predict", str(run_dir), str(pictures / "scan.png"), "--invert")
    (line,) = _warnings(flipped.err)
    assert "looks inverted" in line and "leave out --invert" in line

    photo = cli("predict", str(run_dir), str(pictures / "photo.png"))
    colour, size = _warnings(photo.err)
    assert "photo.png: a colour picture" in colour and "converted to grey" in colour
    assert "48×64 pixels, shrunk about 8×" in size and "stretched from 3:4 to 1:1" in size
    assert "trained on 8×8 pictures" in size

    (line,) = _warnings(cli("predict", str(run_dir), str(pictures / "large.png")).err)
    assert "large.png: 48×48 pixels, shrunk about 6×" in line and "stretched" not in line

    (line,) = _warnings(cli("predict", str(run_dir), str(pictures / "blank.png")).err)
    assert "blank.png: every pixel reads as the same grey level (230 of 255)" in line


def test_an_artifact_without_a_contract_still_gets_the_checks_its_picture_entry_allows(pictures):
    from PIL import Image

    from modforge.engines.picture_contract import differences, inspect_picture

    image = {"height": 8, "width": 8, "channels": 1, "ink": "dark", "scale": 1.0}  # as exported before contracts
    with Image.open(pictures / "photo.png") as picture:
        found = inspect_picture(picture)
    values = np.zeros((1, 8, 8))
    assert [d.kind for d in differences("photo.png", found, values, image, inverted=True)] == ["channels", "size"]
    with Image.open(pictures / "inverted.png") as picture:
        found = inspect_picture(picture)
    assert differences("inverted.png", found, 1 - values, image, inverted=True) == []  # no contract: no polarity


def test_polarity_is_recorded_only_where_the_training_pictures_agree_on_one():
    from modforge.engines.picture_contract import PictureFile, describe_pictures, differences

    rng = np.random.default_rng(0)
    ground = np.zeros((64, 1, 16, 16))
    ground[:, :, 5:11, 5:11] = 1.0  # a light square on a dark ground, in every picture
    assert describe_pictures(ground)["polarity"] == "light-on-dark"
    contract = describe_pictures(1 - ground)
    assert contract["polarity"] == "dark-on-light" and contract["polarity_share"] == 1.0
    image = {"height": 16, "width": 16, "channels": 1, "ink": "light", "contract": contract}
    plain = PictureFile(16, 16, colour=False, transparent=False, constant=None)
    (found,) = differences("x.png", plain, ground[0], image, inverted=False)
    assert found.kind == "polarity" and "light strokes on a dark ground, where this model takes dark" in found.message
    assert differences("x.png", plain, 1 - ground[0], image, inverted=False) == []
    photographs = rng.uniform(0, 1, (64, 3, 16, 16))  # no consistent ground: no polarity, never a polarity warning
    assert describe_pictures(photographs)["polarity"] == "mixed"


def test_help_documents_every_argument_and_what_the_artifact_takes(run_dir, cli):
    generic = cli("predict", "--help")
    assert generic.code == 0
    for text in ("ARTIFACT  ", "INPUT  ", "--invert", "INPUT files:", ".npy", "picture", "audio"):
        assert text in generic.out, text
    assert "an exported model" in generic.out and "the files to predict" in generic.out
    specific = cli("predict", str(run_dir), "--help")
    assert f"{run_dir} takes:" in specific.out and "grey (1 channel), made 8×8 pixels" in specific.out
    assert "dark strokes on a light ground, inverted for the model" in specific.out


def test_predict_run_exports_again_when_its_checkpoint_has_changed(run_dir, pictures, cli, tmp_path):
    from modforge.cli.commands.predict_checks import fresh_artifact
    from modforge.cli.commands.predict_files import load_artifact
    from modforge.engines.artifact_source import file_digest
    from modforge.engines.base import EngineError

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    artifact = run / "exports" / "best-onnx.onnx"
    exported = artifact.read_bytes()
    assert main(["train", "--resume", str(run), "train.max_epochs=2"]) == 0
    _, metadata = load_artifact(artifact)
    assert metadata["source"]["sha256"] != file_digest(run / "checkpoints" / "best.pt"), "epoch 2 did not improve"

    named = cli("predict", str(artifact), str(pictures / "scan.png"))  # the file itself: used as asked, with a word
    assert "was exported from an earlier" in named.err and "exports the run again first" in named.err
    assert artifact.read_bytes() == exported
    with pytest.raises(EngineError, match=r"--quantize int8 --force"):  # a quantized export is not redone silently
        fresh_artifact(run, artifact, {**metadata, "quantization": {"mode": "int8"}})

    res = cli("predict", str(run), str(pictures / "scan.png"))
    assert res.code == 0 and "exporting it again from the run's current weights" in res.err
    _, metadata = load_artifact(artifact)
    assert metadata["source"]["sha256"] == file_digest(run / "checkpoints" / "best.pt")
    again = cli("predict", str(run), str(pictures / "scan.png"))
    assert "exporting" not in again.err and again.out == res.out


def test_an_export_without_a_source_record_is_judged_by_its_checkpoint_time(tmp_path):
    from modforge.engines.artifact_source import stale_export

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "exports").mkdir()
    checkpoint, artifact = tmp_path / "checkpoints" / "best.pt", tmp_path / "exports" / "best-onnx-int8.onnx"
    checkpoint.write_bytes(b"weights")
    artifact.write_bytes(b"graph")
    os.utime(checkpoint, ns=(1_000_000_000, 1_000_000_000))
    os.utime(artifact, ns=(2_000_000_000, 2_000_000_000))
    assert stale_export(artifact, {"engine": "onnx"}, tmp_path) is None
    os.utime(checkpoint, ns=(3_000_000_000, 3_000_000_000))  # best.pt rewritten after the export
    stale = stale_export(artifact, {"engine": "onnx"}, tmp_path)
    assert stale is not None and stale.checkpoint == checkpoint and "records no source digest" in stale.why


def test_invert_is_refused_for_a_model_that_takes_no_pictures(cli, tmp_path):
    import torch

    import modforge as mf
    from modforge.engines import build_engine
    from modforge.engines.artifact import make_metadata

    spec = {"backbone": "mlp", "head": "linear"}
    model = mf.build_model(spec, in_dim=4, num_classes=2, layout="vector", input_shape=(4,)).eval()
    metadata = make_metadata(engine="eager", model=spec, build={"in_dim": 4, "num_classes": 2}, input_shape=[4],
                             input_layout="vector")  # fmt: skip
    eager = build_engine("eager")
    artifact = eager.save(eager.prepare(model, {"input": torch.zeros(2, 4)}), tmp_path / "vector.pt", metadata)
    np.save(tmp_path / "x.npy", np.zeros((1, 4), dtype=np.float32))
    assert cli("predict", str(artifact), "x.npy").code == 0
    res = cli("predict", str(artifact), "x.npy", "--invert")
    assert res.code == 2 and "--invert turns a picture classifier's pictures over" in res.err
    assert "not a model of pictures" in res.err
