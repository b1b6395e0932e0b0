"""Exporting and predicting a detector (issue 18): ``modforge export RUN --engine onnx|torchscript|
eager`` writes a graph from the padded image batch to decoded per-location outputs, and
``modforge predict`` post-processes them (threshold, top-k, NMS) into the eager model's
detections — same boxes within 1e-4 px in the picture's own pixels, same labels, same order —
prints them as JSON lines and draws them."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from modforge.cli.main import main
from modforge.data.detection.shapes import make_shapes
from torchless import predict_without_torch

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.(script|trace|save|load).* is deprecated:DeprecationWarning")

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "detection" / "shapes_fcos.yaml"
SMALL = [
    "data.args.min_size=64", "data.args.max_size=64", "data.batch_size=8", "train.max_epochs=2",
    "model.backbone.args.width=0.25", "model.neck.args.out_channels=32", "train.progress=never", "train.num_threads=1",
    "train.scheduler.args.warmup=2",  # steps: the shipped config's 300 would outlast these few-step runs
]  # fmt: skip  (tests/test_detection_run.py's tiny detector)
BOX_TOLERANCE = 1e-4  # px, the bar


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("detector")
    make_shapes(folder / "set", images=40, size=64, seed=0, max_object=32)
    run = folder / "run"
    code = main(["train", str(CONFIG), f"data.args.root={folder / 'set'}", *SMALL,
                 "model.head.args.nms_threshold=0.5", "train.optimizer.args.lr=3e-3",  # confident boxes in 2 epochs
                 "--run-dir", str(run)])  # fmt: skip
    assert code == 0
    return run


@pytest.fixture(scope="module")
def retinanet_run(run_dir) -> Path:
    """The same tiny detector with the ``retinanet`` head, on the same pictures."""
    run = run_dir.parent / "retinanet"
    code = main(["train", str(CONFIG.with_name("shapes_retinanet.yaml")), f"data.args.root={run_dir.parent / 'set'}",
                 *SMALL, "train.optimizer.args.lr=3e-3", "--run-dir", str(run)])  # fmt: skip
    assert code == 0
    return run


@pytest.fixture(scope="module")
def pictures(run_dir) -> list[Path]:
    """A test picture as it is (64 px: scale 1) and another stretched to 128×64 (resized to
    64×32 for the model: scale 0.5, another padded shape — a free height in the graph)."""
    from PIL import Image

    images = run_dir.parent / "set" / "images" / "test"
    first, second = sorted(images.glob("*.png"))[:2]
    wide = run_dir.parent / "wide.png"
    with Image.open(second) as picture:
        picture.convert("RGB").resize((128, 64), Image.BILINEAR).save(wide)
    return [first, wide]


def eager_detections(run_dir: Path, path: Path) -> tuple[np.ndarray, float]:
    """The trained model's ``dt_bboxes`` on ``path`` as the dataset prepares a picture in evaluation,
    and the resize scale."""
    from PIL import Image

    from modforge.data.detection.batching import collate_detection
    from modforge.experiment.runner import load_trained

    exp, _ = load_trained(run_dir, "best")
    dataset = exp.splits.test
    with Image.open(path) as picture:
        out = dataset.transforms.apply(picture.convert("RGB"), np.zeros((0, 4)), train=False)
    sample = {"input": out.input, "target": {}, "image_id": 0, "orig_size": (1, 1), "scale": out.scale, "index": 0}
    batch = collate_detection([sample], dataset.size_divisor)
    model = exp.model.eval()
    with torch.no_grad():
        rows = model({"input": batch["input"], "image_sizes": batch["image_sizes"]})["dt_bboxes"]
    return rows.numpy(), out.scale


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["onnx", "torchscript", "eager"])
def test_an_exported_detector_predicts_the_eager_detections_in_original_pixels(run_dir, pictures, engine, capsys,
                                                                               tmp_path):  # fmt: skip
    post = check_predictions(run_dir, pictures, engine, capsys, tmp_path)
    assert post["type"] == "fcos" and post["nms_threshold"] == 0.5  # the run's own head settings


@pytest.mark.slow
def test_an_exported_retinanet_predicts_the_eager_detections(retinanet_run, pictures, capsys, tmp_path):
    post = check_predictions(retinanet_run, pictures, "onnx", capsys, tmp_path)
    assert post["type"] == "retinanet" and post["score"] == "probability" and post["nms_threshold"] == 0.5


def check_predictions(run_dir: Path, pictures: list[Path], engine: str, capsys, tmp_path: Path) -> dict:
    """Export ``run_dir`` with ``engine``, predict ``pictures`` with the artifact and check every
    detection against the eager model's; the artifact's post-processing settings."""
    from PIL import Image

    from modforge.experiment.export import export_run

    result = export_run(run_dir, engine, tmp_path / f"detector-{engine}")
    metadata = result.metadata
    assert metadata["task"] == "detection"
    assert metadata["class_names"] == ["circle", "square", "triangle", "star", "cross"]
    norm = metadata["input"]["normalisation"]
    assert (norm["min_size"], norm["max_size"], norm["size_divisor"]) == (64, 64, 32)
    assert len(norm["mean"]) == len(norm["std"]) == 3
    post = metadata["postprocess"]
    assert (post["score_threshold"], post["pre_nms_topk"], post["max_detections"]) == (0.05, 1000, 100)
    assert post["strides"] == [4, 8, 16, 32]  # the shipped config's P2–P5
    assert result.task_report is not None and result.task_report.equal and result.task_report.eager > 0

    drawn = tmp_path / "drawn"
    assert main(["predict", str(result.path), *map(str, pictures), "--out", str(drawn)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [line["file"] for line in lines] == [str(p) for p in pictures]
    names = metadata["class_names"]
    for line, path in zip(lines, pictures, strict=True):
        rows, scale = eager_detections(run_dir, path)
        found = line["detections"]
        assert len(rows) > 0 and len(found) == len(rows), (path.name, len(found), len(rows))
        assert [d["class"] for d in found] == [names[int(label)] for label in rows[:, 6]]
        boxes = np.array([d["box"] for d in found])
        assert np.abs(boxes - rows[:, 1:5].astype(np.float64) / scale).max() <= BOX_TOLERANCE
        assert np.abs(np.array([d["score"] for d in found]) - rows[:, 5]).max() <= 1e-5
        assert [d["score"] for d in found] == sorted((d["score"] for d in found), reverse=True)
        with Image.open(path) as original, Image.open(drawn / f"{path.stem}.png") as picture:
            assert picture.size == original.size  # drawn on the original picture
            assert np.asarray(picture.convert("RGB")).tolist() != np.asarray(original.convert("RGB")).tolist()
    wide = np.array([d["box"] for d in lines[1]["detections"]])
    assert wide[:, 2].max() > 64 and wide[:, [0, 2]].max() <= 128 + BOX_TOLERANCE  # back in the 128-px picture
    return post


def test_the_predictor_prepares_a_picture_exactly_as_the_dataset_does(tmp_path):
    from PIL import Image

    from modforge.data.detection.batching import collate_detection
    from modforge.data.detection.transforms import BoxTransforms
    from modforge.tasks.detection.predict import prepare_picture

    rng = np.random.default_rng(0)
    for (width, height), (low, high), divisor in [((64, 64), (64, 64), 32), ((128, 64), (64, 64), 32),
                                                   ((37, 50), (80, 100), 16), ((300, 90), (None, 200), 8)]:  # fmt: skip
        path = tmp_path / f"p{width}x{height}.png"
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
        transforms = BoxTransforms(min_size=low, max_size=high, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
        with Image.open(path) as picture:
            out = transforms.apply(picture.convert("RGB"), np.zeros((0, 4)), train=False)
        sample = {"input": out.input, "target": {}, "image_id": 0, "orig_size": (1, 1), "scale": out.scale, "index": 0}
        batch = collate_detection([sample], divisor)
        normalisation = {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3], "min_size": low, "max_size": high,
                         "size_divisor": divisor}  # fmt: skip
        prepared = prepare_picture(path, normalisation)
        assert np.array_equal(prepared.input, batch["input"].numpy()), (width, height)
        assert prepared.image_size == tuple(batch["image_sizes"][0].tolist()) and prepared.scale == out.scale


@pytest.mark.parametrize(
    ("threshold", "topk", "nms", "most"), [(0.05, 1000, 0.6, 100), (0.3, 7, 0.3, 5), (0.0, 50, 0.9, 30)]
)
def test_numpy_postprocessing_is_fcos_postprocess(threshold, topk, nms, most):
    """On the same raw maps, the predictor's numpy post-processing of the exported outputs gives
    ``fcos_postprocess``'s rows: the same boxes, labels, images and order, bit for bit, and the
    same scores to the last unit of float32."""
    from modforge.components.heads.fcos import fcos_outputs, fcos_postprocess
    from modforge.tasks.detection.predict import fcos_detections

    generator = torch.Generator().manual_seed(1)
    classes, strides = 4, [8, 16, 32]
    raw = []
    for i, stride in enumerate(strides):
        size = (6 // 2**i + 1, 9 // 2**i + 1)
        level = torch.randn(3, classes + 5, *size, generator=generator)
        level[:, classes : classes + 4] = level[:, classes : classes + 4].abs() * stride * 2  # distances in pixels
        raw.append(level)
    sizes = torch.tensor([[48, 72], [40, 60], [48, 33]])
    expected = fcos_postprocess(raw, strides, classes, sizes, threshold, topk, nms, most).numpy()
    settings = {"num_classes": classes, "strides": strides, "score_threshold": threshold, "pre_nms_topk": topk,
                "nms_threshold": nms, "max_detections": most}  # fmt: skip
    got = fcos_detections(fcos_outputs(raw, strides, classes).numpy(), sizes.numpy(), settings)
    assert len(expected) > 0 and got.shape == expected.shape
    same = [0, 1, 2, 3, 4, 6]  # image, box, label: bit for bit, in the same order
    assert np.array_equal(got[:, same], expected[:, same])
    # scores: torch's vectorised float32 square root is not correctly rounded on every CPU
    # (AVX-512 gives one unit in the last place off), numpy's is
    assert np.allclose(got[:, 5], expected[:, 5], rtol=3e-7, atol=0)


@pytest.fixture(scope="module")
def onnx_export(run_dir) -> tuple[Path, str]:
    """``modforge export RUN --engine onnx --out d.onnx`` of the detector, once for the two tests below
    (one reads the report, both predict with the artifact, which neither changes): the artifact and
    what the command printed."""
    artifact = run_dir.parent / "d.onnx"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # the report's table is printed to sys.stdout as it is then
        code = main(["export", str(run_dir), "--engine", "onnx", "--out", str(artifact)])
    assert code == 0
    return artifact, printed.getvalue()


@pytest.mark.slow
def test_export_reports_the_detections_and_onnx_prediction_needs_no_torch(onnx_export, pictures, tmp_path):
    artifact, report = onnx_export
    assert "equal to eager's" in report and "NMS" in report
    proc = predict_without_torch(str(artifact), str(pictures[0]), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["file"] == str(pictures[0]) and line["detections"]
    assert (tmp_path / "o" / f"{pictures[0].stem}.png").is_file()


@pytest.mark.slow
def test_bad_inputs_to_a_detector_get_one_clear_error(onnx_export, pictures, capsys, tmp_path):
    artifact, _ = onnx_export
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    assert main(["predict", str(artifact), str(pictures[0]), str(notes)]) == 2
    captured = capsys.readouterr()
    assert "notes.txt: unsupported input type '.txt'; a detector takes pictures" in captured.err
    assert captured.out == ""  # checked before any picture is run
    fake = tmp_path / "fake.png"
    fake.write_text("not a picture")
    assert main(["predict", str(artifact), str(fake)]) == 2
    err = capsys.readouterr().err
    assert "fake.png: not a picture this command reads" in err and len(err.strip().splitlines()) == 1
    array = tmp_path / "x.npy"
    np.save(array, np.zeros((3, 64, 64), dtype=np.float32))
    assert main(["predict", str(artifact), str(array)]) == 2
    assert "x.npy: unsupported input type '.npy'; a detector takes pictures" in capsys.readouterr().err
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / pictures[0].name).write_bytes(pictures[0].read_bytes())
    assert main(["predict", str(artifact), str(pictures[0]), str(twin / pictures[0].name), "--out", "o"]) == 2
    assert "would both be drawn as" in capsys.readouterr().err
