"""Hugging Face model folders are data, never code (issue 25, hole 10).

A folder whose ``config.json`` asks for its own Python (``auto_map``, or a ``model_type`` only
such code defines) must be one clear error naming the folder — never the ``transformers``
prompt "run the custom code? [y/N]", and never the folder's ``.py`` run, even when stdin
answers ``y``. Each case carries a ``.py`` that writes a marker file when imported: the marker
must never appear.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import modforge as mf  # noqa: E402
from modforge.components.frontends.ssl import SSLFrontend  # noqa: E402
from train_processes import run_warm  # noqa: E402

pytestmark = pytest.mark.hostile

SRC = str(Path(__file__).resolve().parents[1] / "src")


def evil_folder(root: Path, marker: Path, *, model_type: str = "evil-ssl", auto_map: bool = True) -> Path:
    """A tiny wav2vec2 config saved by transformers, then edited to ask for the folder's own code,
    which writes ``marker`` when imported."""
    from transformers import Wav2Vec2Config

    folder = root / f"hf-{model_type}-{auto_map}"
    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                            conv_dim=(32,), conv_kernel=(10,), conv_stride=(5,))  # fmt: skip
    config.save_pretrained(str(folder))
    data = json.loads((folder / "config.json").read_text())
    data["model_type"] = model_type
    data["architectures"] = ["EvilModel"]
    if auto_map:
        data["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(data))
    payload = f"open({str(marker)!r}, 'w').write('the folder ran code')\n"
    (folder / "configuration_evil.py").write_text(
        payload + "from transformers import Wav2Vec2Config\n\n"
        f"class EvilConfig(Wav2Vec2Config):\n    model_type = {model_type!r}\n"
    )
    (folder / "modeling_evil.py").write_text(
        payload + "from transformers import Wav2Vec2Model\n"
        "from .configuration_evil import EvilConfig\n\n"
        "class EvilModel(Wav2Vec2Model):\n    config_class = EvilConfig\n"
    )
    return folder


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``code`` in a process of its own whose stdin answers "y" to any prompt, with its own Hugging Face
    cache (a copied module would land there, not in the user's): a warm child
    (:func:`train_processes.run_warm`, forked from a server that imported torch and modforge but neither
    transformers nor huggingface_hub — the child imports them, reading this environment, as a fresh
    interpreter would)."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}  # fmt: skip
    return run_warm(code=code, stdin="y\ny\ny\n", timeout=120, env=env, cwd=tmp_path)


@pytest.mark.parametrize(
    ("model_type", "auto_map", "expected"),
    [
        ("evil-ssl", True, "asks to run its own code (config.json has an 'auto_map')"),
        ("wav2vec2", True, "asks to run its own code (config.json has an 'auto_map')"),
        ("evil-ssl", False, "has model_type 'evil-ssl' in config.json, which transformers does not define"),
    ],
)
def test_a_folder_asking_for_its_own_code_is_one_error_naming_it(tmp_path, model_type, auto_map, expected):
    marker = tmp_path / "MARKER"
    folder = evil_folder(tmp_path, marker, model_type=model_type, auto_map=auto_map)
    with pytest.raises(ValueError) as caught:
        SSLFrontend(path=str(folder))
    message = str(caught.value)
    assert expected in message and f"'{folder}'" in message and "\n" not in message
    # the same through the registry, as a config (a run's stored config.yaml) builds it: one BuildError
    with pytest.raises(mf.BuildError, match="never runs code from a model folder"):
        mf.FRONTENDS.build({"type": "ssl", "args": {"path": str(folder)}})
    assert not marker.exists()


def test_a_stdin_answering_yes_never_runs_the_folder_code(tmp_path):
    """The frontend as a user would hit it on a terminal: stdin says "y"; nothing runs, one error."""
    marker = tmp_path / "MARKER"
    folder = evil_folder(tmp_path, marker)
    code = (
        "from modforge.components.frontends.ssl import SSLFrontend\n"
        f"SSLFrontend(path={str(folder)!r})\n"
    )
    proc = run_python(code, tmp_path)
    assert proc.returncode != 0
    assert "asks to run its own code" in proc.stderr and "Do you wish to run the custom code" not in proc.stdout
    assert not marker.exists()
    assert not (tmp_path / "hf-home" / "modules").exists() or not any((tmp_path / "hf-home" / "modules").rglob("*.py"))


def test_transformers_itself_is_told_not_to_trust_the_folder(tmp_path):
    """Defence in depth: with modforge's own check switched off, ``trust_remote_code=False``
    still keeps transformers from prompting or importing the folder's code."""
    marker = tmp_path / "MARKER"
    folder = evil_folder(tmp_path, marker)
    code = (
        "import modforge.components.frontends.ssl as ssl\n"
        "ssl._refuse_remote_code = lambda *args: None\n"
        "try:\n"
        f"    ssl.SSLFrontend(path={str(folder)!r})\n"
        "except ValueError as exc:\n"
        "    print('refused:', exc)\n"
    )
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "refused: could not load the pretrained SSL model" in proc.stdout
    assert "Do you wish to run the custom code" not in proc.stdout
    assert not marker.exists()


def test_an_eager_artifact_naming_such_a_folder_is_refused_by_predict(tmp_path):
    """An artifact's metadata is data too: ``modforge predict`` rebuilds the model from it; the
    folder it names is refused with exit 2 and one line, stdin's "y" notwithstanding."""
    import numpy as np

    from modforge.engines.artifact import make_metadata, write_torch_artifact

    marker = tmp_path / "MARKER"
    folder = evil_folder(tmp_path, marker)
    model = {"frontend": {"type": "ssl", "args": {"path": str(folder)}}, "backbone": "mlp", "head": "linear"}
    metadata = make_metadata(engine="eager", model=model, build={"in_dim": 1, "num_classes": 2},
                             input_shape=[4000], input_layout="waveform", class_names=["a", "b"])  # fmt: skip
    artifact = write_torch_artifact({}, tmp_path / "model.pt", metadata)
    sample = tmp_path / "x.npy"
    np.save(sample, np.zeros((1, 4000), dtype="float32"))
    code = (
        "import sys\nfrom modforge.cli.main import main\n"
        f"sys.exit(main(['predict', {str(artifact)!r}, {str(sample)!r}]))\n"
    )
    proc = run_python(code, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "asks to run its own code" in proc.stderr and str(folder) in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 100_000, "unreadable"),
        ('["a list"]', "is not a JSON object"),
        ('{"sampling_rate": "16k"}', "sampling_rate must be a number of Hz, got '16k'"),
    ],
)
def test_a_hostile_preprocessor_config_is_one_clear_error(tmp_path, text, expected):
    folder = tmp_path / "model"
    SSLFrontend().save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(text)
    with pytest.raises(mf.BuildError, match=expected):
        mf.FRONTENDS.build({"type": "ssl", "args": {"path": str(folder)}})
