"""``modforge export`` and ``modforge predict``: artifacts per engine, metadata, parity with
eager, clear errors, and ONNX prediction without torch."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from modforge.cli.main import main
from torchless import predict_without_torch

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("export") / "run"
    assert main(["train", str(CONFIG), "train.max_epochs=2", "train.progress=never", "--run-dir", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> tuple[Path, Path, list[int]]:
    from PIL import Image
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("inputs")
    digits = load_digits()
    np.save(folder / "three.npy", (digits.data[:3] / 16).reshape(3, 1, 8, 8).astype("float32"))
    ink_on_paper = (255 - digits.images[0] / 16 * 255).astype("uint8")  # dark ink on white, like a scan
    Image.fromarray(ink_on_paper).resize((32, 32), Image.Resampling.NEAREST).save(folder / "zero.png")
    return folder / "three.npy", folder / "zero.png", list(digits.target[:3])


@pytest.mark.parametrize("engine", ["onnx", "torchscript", "eager"])
def test_export_writes_a_self_describing_artifact_that_predicts_like_eager(run_dir, samples, engine, capsys, tmp_path):
    from modforge.cli.commands.predict_files import load_artifact
    from modforge.experiment.export import export_run

    result = export_run(run_dir, engine, tmp_path / f"model-{engine}")
    assert result.path.exists() and result.max_abs_diff <= 1e-5 * max(1.0, result.output_scale)
    runner, metadata = load_artifact(result.path)
    assert metadata["class_names"] == [str(i) for i in range(10)]
    assert metadata["input"]["shape"] == [1, 8, 8] and metadata["input"]["layout"] == "image"
    assert metadata["input"]["normalisation"]["divide_by"] == 16.0
    assert metadata["versions"]["modforge"] and metadata["config"]["model"]
    array, picture, labels = samples
    assert main(["predict", str(result.path), str(array), str(picture)]) == 0
    out = capsys.readouterr().out
    for i, label in enumerate(labels):  # the first three digits, and a scanned-looking zero
        assert re.search(rf"three\.npy\[{i}\]\s+{label}\s", out), out
    assert re.search(r"zero\.png\s+0\s", out), out


def test_a_model_with_an_input_adapter_and_a_free_time_axis_round_trips(tmp_path):
    import torch

    import modforge as mf
    from modforge.engines import build_engine
    from modforge.engines.artifact import make_metadata

    spec = {"backbone": "cnn", "head": "linear"}
    model = mf.build_model(spec, in_dim=12, num_classes=3, layout="sequence", input_shape=(16, 12)).eval()
    metadata = make_metadata(engine="x", model=spec, build={"in_dim": 12, "num_classes": 3},
                             input_shape=[16, 12], input_layout="sequence")
    longer = torch.randn(2, 20, 12)
    with torch.no_grad():
        reference = model(longer)
    for engine in ("eager", "onnx"):
        chosen = build_engine(engine)
        path = chosen.save(chosen.prepare(model, {"input": torch.randn(2, 16, 12)}), tmp_path / f"m{chosen.suffix}",
                           metadata)
        loaded, _ = chosen.load(path)
        with torch.no_grad():
            got = torch.as_tensor(loaded({"input": longer})["logits"])
        assert float((got - reference).abs().max()) <= 1e-5 * max(1.0, float(reference.abs().max())), engine


def test_export_refuses_to_overwrite_and_names_unknown_engines(run_dir, capsys, tmp_path):
    target = tmp_path / "m.onnx"
    assert main(["export", str(run_dir), "--engine", "onnx", "--out", str(target)]) == 0
    assert main(["export", str(run_dir), "--engine", "onnx", "--out", str(target)]) == 2
    assert "exists; choose another --out or pass --force" in capsys.readouterr().err
    assert main(["export", str(run_dir), "--engine", "onnx", "--out", str(target), "--force"]) == 0
    assert main(["export", str(run_dir), "--engine", "onx", "--out", str(tmp_path / "x")]) == 2
    assert "no engine named 'onx'" in capsys.readouterr().err


def test_onnx_prediction_never_imports_torch(run_dir, samples, tmp_path):
    artifact = tmp_path / "m.onnx"
    assert main(["export", str(run_dir), "--engine", "onnx", "--out", str(artifact)]) == 0
    array, picture, labels = samples
    proc = predict_without_torch(str(artifact), str(array), str(picture))
    assert proc.returncode == 0, proc.stderr
    assert "three.npy[1]" in proc.stdout and "zero.png" in proc.stdout


def test_bad_inputs_and_artifacts_get_one_clear_error(run_dir, samples, capsys, tmp_path):
    artifact = tmp_path / "m.onnx"
    assert main(["export", str(run_dir), "--engine", "onnx", "--out", str(artifact)]) == 0
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((3, 5), dtype="float32"))
    assert main(["predict", str(artifact), str(wrong)]) == 2
    assert "wrong.npy: array of shape [3, 5]; this model takes one sample of shape [1, 8, 8]" in capsys.readouterr().err
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros((0, 1, 8, 8), dtype="float32"))
    assert main(["predict", str(artifact), str(empty)]) == 2
    assert "empty.npy: holds no samples" in capsys.readouterr().err
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert main(["predict", str(artifact), str(text)]) == 2
    assert "unsupported input type '.txt'" in capsys.readouterr().err
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    assert main(["predict", str(broken), str(samples[0])]) == 2
    assert "is not a loadable ONNX model" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "missing.ts"), str(samples[0])]) == 2
    assert "artifact not found" in capsys.readouterr().err


def test_out_may_name_a_folder_and_a_wrong_suffix_is_refused(run_dir, capsys, tmp_path):
    existing = tmp_path / "existing"
    existing.mkdir()
    assert main(["export", str(run_dir), "--engine", "eager", "--out", str(existing)]) == 0
    assert (existing / "best-eager.pt").is_file() and not (tmp_path / "existing.pt").exists()
    assert main(["export", str(run_dir), "--engine", "eager", "--out", f"{tmp_path / 'new'}/"]) == 0
    assert (tmp_path / "new" / "best-eager.pt").is_file()
    capsys.readouterr()
    assert main(["export", str(run_dir), "--engine", "eager", "--out", str(tmp_path / "m.onnx")]) == 2
    assert "an artifact of engine 'eager' ends in .pt" in capsys.readouterr().err


def test_predict_refuses_top_zero_and_a_pickle_in_one_clean_line(run_dir, samples, capsys, tmp_path):
    import pickle

    artifact = tmp_path / "m.onnx"
    assert main(["export", str(run_dir), "--engine", "onnx", "--out", str(artifact)]) == 0
    capsys.readouterr()
    assert main(["predict", str(artifact), str(samples[0]), "--top", "0"]) == 2
    assert capsys.readouterr().err == (
        "error: modforge predict: argument --top: expected a positive integer, got 0\n"
    )
    for name in ("plain.pt", "plain.ts"):
        with open(tmp_path / name, "wb") as file:
            pickle.dump({"weights": [1, 2, 3]}, file, protocol=4)
        assert main(["predict", str(tmp_path / name), str(samples[0])]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path / name} is not a") and "\x1b" not in err
        assert "If you are seeing this" not in err  # torch's advice to its own developers
