"""The command line's front door: one parser rule for every config-taking command, type
switches that drop the old type's arguments, ``--plugins`` and ``--debug`` everywhere, and
run folders whose plug-ins every command that reads them loads (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from modforge.cli.main import main
from registry_state import registries_restored

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DIGITS = str(CONFIGS / "digits.yaml")
DER = str(CONFIGS / "continual" / "seq_digits_der.yaml")

NPZ_ENGINE = '''
"""A plug-in engine whose artifacts are numpy .npz archives (not torch files)."""
import json
import numpy as np
import torch
import modforge as mf
from modforge.engines import Capabilities, Engine
from modforge.engines.artifact import rebuild_model, write_atomically


@mf.register_engine("npz")
class Npz(Engine):
    """Weights and metadata in one .npz archive."""

    capabilities = Capabilities(can_train=False, multi_device=False, dynamic_shapes=True, needs_example_input=False)
    suffix = ".npz"

    def __init__(self, compress: bool = False):
        self.compress = compress

    def prepare(self, model, example=None, *, train=False):
        return model

    def save(self, runnable, path, metadata):
        arrays = {k: v.detach().cpu().numpy() for k, v in runnable.state_dict().items()}
        save = np.savez_compressed if self.compress else np.savez

        def write(tmp):
            with open(tmp, "wb") as file:
                save(file, __metadata__=np.array(json.dumps(metadata)), **arrays)

        return write_atomically(path, write)

    def load(self, path):
        with np.load(path, allow_pickle=False) as data:
            metadata = json.loads(str(data["__metadata__"]))
            state = {k: torch.from_numpy(data[k]) for k in data.files if k != "__metadata__"}
        model = rebuild_model(metadata, path)
        model.load_state_dict(state)
        return model.eval(), metadata
'''


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory) -> Path:
    """A one-epoch digits run whose config loads a plug-in engine (copied into the run)."""
    folder = tmp_path_factory.mktemp("plugin-run")
    (folder / "npz_engine.py").write_text(NPZ_ENGINE)
    (folder / "run.yaml").write_text(
        f"_base_: {DIGITS}\nplugins: [npz_engine.py]\n"
        "train: {max_epochs: 1, scheduler: null, callbacks: [], progress: never}\n"
    )
    with registries_restored():
        assert main(["train", str(folder / "run.yaml"), "--run-dir", str(folder / "run")]) == 0
    return folder / "run"


def _yaml(result) -> dict:
    assert result.code == 0, result
    return yaml.safe_load(result.out)


def _warnings(result) -> list[str]:
    return [line for line in result.err.splitlines() if line.startswith("warning:")]


# ------------------------------------------------------------------ --debug


def test_debug_is_accepted_anywhere_and_from_the_environment(cli, monkeypatch):
    from modforge.cli.commands import list_parts

    def boom(argv):
        raise RuntimeError("kaput")

    monkeypatch.setattr(list_parts, "run", boom)
    for argv in (["--debug", "list"], ["list", "--debug"], ["list", "backbone", "--debug"]):
        with pytest.raises(RuntimeError, match="kaput"):
            cli(*argv)
    monkeypatch.setenv("MODFORGE_DEBUG", "0")  # "0" means off
    res = cli("list")
    assert res.code == 1 and "add --debug anywhere on the command line" in res.err
    monkeypatch.setenv("MODFORGE_DEBUG", "1")
    with pytest.raises(RuntimeError, match="kaput"):
        cli("list")


# ------------------------------------------------------- one parser rule


@pytest.mark.parametrize("command", [["config"], ["train", "--print-config"], ["kfold", "--print-config"],
                                     ["test", "--print-config"]])  # fmt: skip
def test_run_shortcuts_mean_the_same_on_every_config_command(cli, command):
    res = cli(command[0], DIGITS, *command[1:], "--lr", "0.01", "--epochs", "3", "--batch-size", "8")
    cfg = _yaml(res)
    assert cfg["train"]["optimizer"]["args"]["lr"] == 0.01 and cfg["train"]["optimizer"]["type"] == "adamw"
    assert cfg["train"]["max_epochs"] == 3 and cfg["data"]["batch_size"] == 8
    assert res.err == ""


def test_the_shortcut_help_is_shown_by_config_too(cli):
    res = cli("config", DIGITS, "--help")
    assert res.code == 0 and "--lr LR" in res.out and "sets train.optimizer.args.lr" in res.out


def test_unknown_flags_are_suggested_only_close_real_flags(cli, write):
    res = cli("config", DIGITS, "--epoch", "3")
    assert res.code == 2 and "did you mean: --epoch → --epochs?" in res.err
    res = cli("config", DIGITS, "--lx", "3")
    assert res.code == 2 and "unrecognized arguments: --lx 3" in res.err and "did you mean" not in res.err
    res = cli("train", DIGITS, "--epocs", "3")
    assert res.code == 2 and "--epocs → --epochs?" in res.err and "--depth" not in res.err
    res = cli("list", "--plugin", "x.py")
    assert res.code == 2 and "--plugin → --plugins?" in res.err
    assert "--help" not in cli("config", DIGITS, "--hel").err


# -------------------------------------------------------- type switches


@pytest.mark.parametrize("spelling", [["--backbone", "mlp"], ["model.backbone=mlp"], ["model.backbone.type=mlp"]])
def test_switching_a_part_drops_the_old_arguments_it_does_not_take(cli, spelling):
    res = cli("config", DIGITS, *spelling)
    cfg = _yaml(res)
    assert cfg["model"]["backbone"] == {"type": "mlp", "args": {"dropout": 0.1}}
    [warning] = _warnings(res)
    assert "model.backbone 'cnn' → 'mlp': dropped channels ('mlp' does not take them)" in warning
    assert "kept dropout=0.1" in warning


def test_arguments_typed_on_the_command_line_survive_a_switch(cli):
    res = cli("config", DIGITS, "model.backbone.args.channels=[4]", "model.backbone.type=mlp")
    assert res.code == 2 and "model.backbone.args.channels" in res.err and "unknown argument 'channels'" in res.err
    cfg = _yaml(cli("config", DIGITS, "model.backbone.type=mlp", "model.backbone.args.hidden_dims=[4]"))
    assert cfg["model"]["backbone"]["args"] == {"dropout": 0.1, "hidden_dims": [4]}


def test_switching_the_algorithm_says_what_it_keeps_and_drops(cli):
    res = cli("config", DER, "--algorithm", "layer_distill")
    assert _yaml(res)["continual"]["algorithm"]["type"] == "layer_distill"
    [warning] = _warnings(res)
    assert "'der' → 'layer_distill': kept alpha=3.0, buffer_size=200" in warning
    res = cli("config", DER, "continual.algorithm=sgd")
    assert _yaml(res)["continual"]["algorithm"] == {"type": "sgd", "args": {}}
    [warning] = _warnings(res)
    assert "dropped alpha, buffer_size ('sgd' does not take them)" in warning


def test_switching_the_dataset_drops_its_arguments_on_every_command(cli):
    for command in (["config"], ["train", "--print-config"]):
        res = cli(command[0], DIGITS, *command[1:], "data.type=synthetic_classification")
        assert _yaml(res)["data"]["args"] == {}
        assert "data 'digits' → 'synthetic_classification': dropped as_image" in res.err


def test_a_run_folders_config_takes_a_dataset_switch_and_loads_its_plugins(cli, plugin_run):
    res = cli("config", str(plugin_run / "config.yaml"), "data.type=synthetic_classification")
    cfg = _yaml(res)  # the plug-in engine's file came from the run's own verified copy: no --plugins
    assert cfg["data"]["type"] == "synthetic_classification" and cfg["data"]["args"] == {}
    assert "dropped as_image" in res.err


# ---------------------------------------------------- run folders, plug-ins


def test_export_loads_the_runs_plugins_and_takes_engine_arguments(cli, plugin_run, tmp_path):
    out = tmp_path / "artifacts"
    out.mkdir()
    with registries_restored():  # as separate processes: the export's plug-in is gone afterwards
        res = cli("export", str(plugin_run), "--engine", "npz", "--engine-args", "compress=true", "--out", str(out))
        assert res.code == 0, res
        bad = cli("export", str(plugin_run), "--engine", "npz", "--engine-args", "level=3", "--out", str(out))
        assert bad.code == 2 and "--engine.args.level: unknown argument 'level'" in bad.err
    artifact = out / "best-npz.npz"  # an existing folder as --out: written into it
    with np.load(artifact) as data:
        assert json.loads(str(data["__metadata__"]))["engine_args"] == {"compress": True}
    sample = tmp_path / "x.npy"
    np.save(sample, np.zeros((1, 8, 8), dtype="float32"))
    res = cli("predict", str(artifact), str(sample))
    assert res.code == 2 and "no registered engine writes '.npz' artifacts" in res.err and "--plugins" in res.err
    res = cli("predict", str(artifact), str(sample), "--plugins", str(plugin_run.parent / "npz_engine.py"))
    assert res.code == 0, res
    assert "x.npy" in res.out


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "backbone", "--plugins", "p.py"],
        ["describe", "backbone", "door_mlp", "--plugins", "p.py"],
        ["config", "c.yaml", "--plugins", "p.py"],
        ["check", "backbone", "door_mlp", "--plugins", "p.py", "--args", "nope=1"],
        ["predict", "--plugins", "p.py", "missing.onnx", "x.npy"],
        ["export", "--plugins", "p.py", "missing-run", "--engine", "eager"],
        ["test", "missing-run", "--plugins", "p.py"],
        ["data", "make-spoof-corpus", "--plugins", "p.py", "full"],
    ],
)
def test_plugins_option_works_on_every_command(cli, write, argv):
    write("p.py", "import modforge as mf\nfrom modforge.components.backbones.mlp import MLP\n"
                  "mf.register_backbone('door_mlp')(MLP)\n")  # fmt: skip
    write("c.yaml", "model: {backbone: door_mlp, head: linear}\n")
    write("full/occupied", "")
    res = cli(*argv)
    assert "unrecognized arguments" not in res.err and "required" not in res.err, res
    assert "p.py" not in res.err, res  # the plug-in was found and imported
    assert res.code in (0, 1, 2) and res.err.count("error:") <= 1
    if argv[0] in ("list", "describe", "config"):
        assert res.code == 0 and "door_mlp" in res.out


def test_test_help_is_true_and_config_only_options_are_refused_for_a_run(cli, tmp_path):
    """`modforge test --help` lists what `modforge test CONFIG` accepts; those options given
    with a run folder are one clear error, not silently ignored."""
    res = cli("test", "--help")
    assert res.code == 0 and "--run-dir" in res.out and "--print-config" in res.out and "--epochs" in res.out
    (tmp_path / "a_run").mkdir()
    res = cli("test", "a_run", "--run-dir", "elsewhere")
    assert res.code == 2 and "--run-dir: only with a CONFIG (.yaml) target" in res.err
