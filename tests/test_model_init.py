"""``model.init``: weights from elsewhere — checkpoint formats, key maps, every misfit reported,
nothing loaded silently, and ``modforge test CONFIG`` / fine-tuning from them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import yaml

import modforge as mf
from modforge.cli.main import main
from modforge.core.config import load_config
from modforge.core.errors import ConfigError
from modforge.experiment import validate_config

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"
MODEL = {"backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "head": "linear"}


def build(init=None, num_classes: int = 3) -> torch.nn.Module:
    section = dict(MODEL, **({"init": init} if init is not None else {}))
    return mf.build_model(section, in_dim=4, num_classes=num_classes)


@pytest.fixture
def foreign(tmp_path, monkeypatch) -> tuple[Path, dict]:
    """A state dict as other code names it (``net.`` instead of ``parts.``), values shifted."""
    monkeypatch.chdir(tmp_path)
    reference = build().state_dict()
    state = {k.replace("parts.", "net."): v + 1 for k, v in reference.items()}
    torch.save(state, tmp_path / "foreign.pt")
    return tmp_path / "foreign.pt", {k: v + 1 for k, v in reference.items()}


def state_dict_format(**args) -> dict:
    return {"type": "state_dict", "args": {"key_map": {"net.": "parts."}, **args}}


def test_a_plain_state_dict_loads_through_its_key_map_exactly(foreign):
    path, expected = foreign
    model = build({"path": str(path), "format": state_dict_format()})
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in expected.items())
    (record,) = model.init_records
    assert record["format"] == "state_dict" and len(record["sha256"]) == 64 and record["loaded"] == len(expected)


def test_auto_never_guesses_a_plain_state_dict(foreign):
    path, _ = foreign
    with pytest.raises(ConfigError, match=r"format: auto cannot tell what .*foreign.pt is .*state_dict"):
        build({"path": str(path)})


def test_strict_reports_every_missing_unexpected_and_misshaped_key_at_once(foreign):
    path, _ = foreign
    with pytest.raises(ConfigError) as info:
        build({"path": str(path), "format": "state_dict"})
    text = str(info.value)
    assert "4 model keys not in the file: parts.backbone" in text and "4 file keys the model does not have: net." in text
    with pytest.raises(ConfigError, match=r"2 shapes differ: parts.head.fc.bias \(file \[3\], model \[5\]\)"):
        build({"path": str(path), "format": state_dict_format()}, num_classes=5)


def test_strict_false_loads_what_fits_and_warns_about_the_rest(foreign, caplog):
    path, expected = foreign
    with caplog.at_level(logging.WARNING):
        model = build({"path": str(path), "format": state_dict_format(), "strict": False}, num_classes=5)
    assert "2 shapes differ" in caplog.text and "loading the 2 keys that fit" in caplog.text
    state = model.state_dict()
    assert torch.equal(state["parts.backbone.layer1.0.weight"], expected["parts.backbone.layer1.0.weight"])
    assert state["parts.head.fc.weight"].shape == (5, 8)  # left as initialised


def test_a_files_network_loads_beside_the_configs_own_loss_state(foreign):
    """Published weights hold no loss: a weighted or centred loss keeps its own state; a file
    that does hold losses (modforge's own) must hold all of them."""
    path, expected = foreign
    losses = [{"type": "cross_entropy", "args": {"class_weights": [0.2, 0.3, 0.5]}}, {"type": "oc_softmax", "weight": 0.5}]
    section = dict(MODEL, losses=losses, init={"path": str(path), "format": state_dict_format()})
    model = mf.build_model(section, in_dim=4, num_classes=3)
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in expected.items())
    assert torch.equal(state["loss_fns.loss_cross_entropy.weight"], torch.tensor([0.2, 0.3, 0.5]))
    partial = {k: v for k, v in state.items() if not k.startswith("loss_fns.loss_oc_softmax")}
    torch.save(partial, path.parent / "partial.pt")
    with pytest.raises(ConfigError, match=r"model keys not in the file: loss_fns.loss_oc_softmax"):
        mf.build_model(dict(section, init={"path": str(path.parent / "partial.pt"), "format": "state_dict"}),
                       in_dim=4, num_classes=3)


def test_part_and_exclude_choose_what_is_loaded(foreign):
    path, expected = foreign
    fresh = build().state_dict()
    for init in ({"part": "backbone"}, {"exclude": ["parts.head.*"]}):
        model = build({"path": str(path), "format": state_dict_format(), **init}, num_classes=5)
        state = model.state_dict()
        assert torch.equal(state["parts.backbone.layer1.0.bias"], expected["parts.backbone.layer1.0.bias"])
        assert not torch.equal(state["parts.head.fc.bias"][:3], expected["parts.head.fc.bias"])
    assert fresh  # the model builds without init too
    with pytest.raises(ConfigError, match=r"model.init.part: the model has no stage 'neck' \(stages: backbone, head\)"):
        build({"path": str(path), "format": state_dict_format(), "part": "neck"})


def test_a_device_this_machine_lacks_is_a_config_error(foreign):
    path, _ = foreign
    with pytest.raises(ConfigError, match=r"model.init.map_location: expected a device such as cpu"):
        build({"path": str(path), "format": state_dict_format(), "map_location": "tpu:9"})
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"model.init.map_location: expected a device this machine has"):
            build({"path": str(path), "format": state_dict_format(), "map_location": "cuda"})


def test_a_pinned_digest_refuses_another_file(foreign):
    path, _ = foreign
    with pytest.raises(ConfigError, match=r"model.init.sha256: .*has SHA-256 [0-9a-f]{64}, not the 00ff the config pins"):
        build({"path": str(path), "format": state_dict_format(), "sha256": "00ff"})


def test_files_that_would_run_code_or_are_damaged_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import os

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'MARKER'}",)

    torch.save({"w": torch.ones(2), "evil": Payload()}, tmp_path / "pickled.pt")
    with pytest.raises(ConfigError, match=r"refused to load .*pickled.pt: it references .*system.*nothing in it was executed"):
        build({"path": "pickled.pt", "format": "state_dict"})
    assert not (tmp_path / "MARKER").exists()
    torch.save({"w": torch.arange(1000.0)}, tmp_path / "damaged.pt")
    data = bytearray((tmp_path / "damaged.pt").read_bytes())
    offset = data.find(torch.arange(1000.0).numpy().tobytes())
    data[offset + 2000] ^= 0x10
    (tmp_path / "damaged.pt").write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"damaged.pt is damaged: checksum mismatch"):
        build({"path": "damaged.pt", "format": "state_dict"})


def test_config_validation_names_the_file_and_line_of_a_bad_init(write):
    path = write("c.yaml", "model:\n  backbone: mlp\n  init: {path: nowhere.pt}\n")
    with pytest.raises(ConfigError, match=r"model.init.path: weights not found: .*nowhere.pt; give another file with model.init.path=PATH \(in .*c.yaml:3\)"):
        validate_config(load_config(path))
    write("w.pt", "")
    path = write("d.yaml", "model:\n  backbone: mlp\n  init: {path: w.pt, format: state_dct, strictt: true}\n")
    with pytest.raises(ConfigError, match=r"unknown init key 'strictt'; did you mean 'strict'"):
        validate_config(load_config(path))
    path = write("e.yaml", "model:\n  backbone: mlp\n  init: {path: w.pt, format: state_dct}\n")
    with pytest.raises(ConfigError, match=r"model.init.format.type: no checkpoint_format named 'state_dct'; did you mean 'state_dict'"):
        validate_config(load_config(path))


def test_a_users_own_format_is_one_registered_class(foreign):
    from modforge.core.weight_formats import CheckpointFormat

    path, expected = foreign

    @mf.register_checkpoint_format("mine")
    class Mine(CheckpointFormat):
        """Recognises its files by their 'net.' keys."""

        @classmethod
        def recognises(cls, loaded, file):
            return isinstance(loaded, dict) and all(k.startswith("net.") for k in loaded)

        def convert(self, loaded, file):
            return {k.replace("net.", "parts.", 1): v for k, v in loaded.items()}

    model = build({"path": str(path)})  # auto: only 'mine' recognises it
    assert model.init_records[0]["format"] == "mine"
    assert torch.equal(model.state_dict()["parts.head.fc.weight"], expected["parts.head.fc.weight"])


# ------------------------------------------------------------------ commands
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("init") / "run"
    assert main(["train", str(CONFIG), "train.max_epochs=2", "train.progress=never", "--run-dir", str(folder)]) == 0
    return folder


def test_test_config_evaluates_init_weights_like_testing_the_run(trained, cli, tmp_path):
    by_run = cli("test", str(trained))
    assert by_run.code == 0, by_run.err
    by_config = cli("test", str(CONFIG), f"model.init={trained}", "--run-dir", "evaluated")
    assert by_config.code == 0, by_config.err
    summary = json.loads((tmp_path / "evaluated" / "summary.json").read_text())
    stored = json.loads(next((trained / "evaluations").glob("*.json")).read_text())
    assert summary["test"]["accuracy"] == pytest.approx(stored["accuracy"], abs=1e-12)
    recorded = yaml.safe_load((tmp_path / "evaluated" / "config.yaml").read_text())["model"]["init"]
    assert recorded["format"] == "modforge" and recorded["path"].endswith("best.pt") and len(recorded["sha256"]) == 64
    assert summary["evaluated"] == "model.init" and summary["init"][0]["sha256"] == recorded["sha256"]


def test_fine_tuning_from_init_is_an_ordinary_train_and_resumes_without_the_file(trained, cli, tmp_path):
    import shutil

    source = tmp_path / "source"
    shutil.copytree(trained, source)
    run = cli("train", str(CONFIG), f"model.init={source}", "train.max_epochs=3", "train.progress=never",
              "--run-dir", "tuned")  # fmt: skip
    assert run.code == 0, run.err
    recorded = yaml.safe_load((tmp_path / "tuned" / "config.yaml").read_text())["model"]["init"]
    assert Path(recorded["path"]).parent.parent == source.resolve()
    shutil.rmtree(source)  # the starting weights are gone; the run's checkpoints hold its own
    resumed = cli("train", "--resume", "tuned", "train.max_epochs=4")
    assert resumed.code == 0, resumed.err
    (tmp_path / "tuned" / "checkpoints" / "best.pt").unlink()
    assert cli("test", "tuned").code == 0


def test_a_hugging_face_folder_loads_into_an_ssl_frontend(tmp_path, caplog):
    pytest.importorskip("transformers")
    section = {"frontend": "ssl", "backbone": "mlp", "head": "linear"}
    source = mf.build_model(section, in_dim=1, num_classes=2, layout="waveform", input_shape=[4000])
    source.stage("frontend").save_pretrained(tmp_path / "hf")
    model = mf.build_model({**section, "init": {"path": str(tmp_path / "hf"), "part": "frontend"}},
                           in_dim=1, num_classes=2, layout="waveform", input_shape=[4000])  # fmt: skip
    assert model.init_records[0]["format"] == "hf_wav2vec2"
    got, expected = model.state_dict(), source.state_dict()
    assert all(torch.equal(got[k], v) for k, v in expected.items() if k.startswith("parts.frontend.model."))
    # a pre-training checkpoint: 'wav2vec2.'-prefixed keys and a quantizer the frontend has no place for
    weights = tmp_path / "hf" / "model.safetensors"
    from safetensors.torch import load_file

    state = {f"wav2vec2.{k}": v for k, v in load_file(str(weights)).items()}
    state["quantizer.codevectors"] = torch.zeros(1, 4, 2)
    weights.unlink()
    torch.save(state, tmp_path / "hf" / "pytorch_model.bin")
    with caplog.at_level(logging.INFO):
        again = mf.build_model({**section, "init": {"path": str(tmp_path / "hf"), "part": "frontend"}},
                               in_dim=1, num_classes=2, layout="waveform", input_shape=[4000])  # fmt: skip
    assert "left out 1 tensors of the pre-training/CTC heads" in caplog.text
    assert torch.equal(again.state_dict()["parts.frontend.model.encoder.layer_norm.weight"],
                       expected["parts.frontend.model.encoder.layer_norm.weight"])  # fmt: skip


def test_a_torchvision_resnet_file_is_a_recognised_format(tmp_path):
    section = {"backbone": {"type": "resnet18", "args": {"stem": "imagenet"}}, "head": "linear"}
    source = mf.build_model(section, in_dim=3, num_classes=10, input_shape=[3, 32, 32])
    torchvision = {}
    for key, value in source.state_dict().items():  # modforge's names → torchvision's
        name = key.replace("parts.backbone.", "").replace("parts.head.", "").replace("stem.0.", "conv1.")
        torchvision[name.replace("stem.1.", "bn1.").replace("shortcut.", "downsample.")] = value + 0.5
    torch.save(torchvision, tmp_path / "resnet18.pth")
    model = mf.build_model({**section, "init": {"path": str(tmp_path / "resnet18.pth")}}, in_dim=3, num_classes=10,
                           input_shape=[3, 32, 32])  # fmt: skip
    assert model.init_records[0]["format"] == "torchvision_resnet"
    assert all(torch.equal(model.state_dict()[k], v + 0.5) for k, v in source.state_dict().items()
               if not k.endswith("num_batches_tracked"))  # fmt: skip
    new_head = mf.build_model({**section, "init": {"path": str(tmp_path / "resnet18.pth"), "part": "backbone"}},
                              in_dim=3, num_classes=7, input_shape=[3, 32, 32])  # fmt: skip
    assert new_head.state_dict()["parts.head.fc.weight"].shape == (7, 512)  # fc left out: a new head
    with pytest.raises(ConfigError, match=r"2 shapes differ: parts.head.fc.bias \(file \[10\], model \[7\]\)"):
        mf.build_model({**section, "init": str(tmp_path / "resnet18.pth")}, in_dim=3, num_classes=7,
                       input_shape=[3, 32, 32])  # fmt: skip


def test_the_2021_baseline_rawnet2_file_is_a_recognised_format(tmp_path):
    from modforge.components.backbones.rawnet2 import reference_state_dict
    from test_backbone_rawnet2 import reference_state

    args = {"gru_dim": 32, "gru_layers": 2, "fc_dim": 16}
    state = reference_state(**args)
    torch.save(state, tmp_path / "pre_trained_DF_RawNet2.pth")
    section = {"backbone": {"type": "rawnet2", "args": args}, "head": "linear"}
    model = mf.build_model({**section, "init": str(tmp_path / "pre_trained_DF_RawNet2.pth")}, in_dim=1,
                           num_classes=2, layout="waveform")  # fmt: skip
    assert model.init_records[0]["format"] == "rawnet2_baseline"
    expected = reference_state_dict(state)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in expected.items())


def test_a_missing_published_weights_file_names_where_the_format_comes_from(write):
    from modforge.core.errors import ConfigError

    path = write("p.yaml", "model:\n  backbone: aasist\n  head: linear\n  init: {path: weights/AASIST.pth, format: aasist_official}\n")
    with pytest.raises(ConfigError, match=r"weights not found: .*AASIST.pth \(format aasist_official reads .*github.com/clovaai/aasist"):
        validate_config(mf.load_config(path))
