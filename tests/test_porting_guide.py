"""The porting guide (docs/porting/) runs as written: every ``<!-- file: FRAMEWORK/NAME -->`` block is
written into a folder per seed framework and every line of its ``<!-- run: FRAMEWORK -->``
block is run there (in-process), so the guide a DeepFense, Mammoth, UP or delira user
follows cannot drift from the code. The mistakes its tables list are made too, and each
must give the message the table promises."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

GUIDE = sorted((Path(__file__).resolve().parents[1] / "docs" / "porting").glob("*.md"))
_BLOCK = re.compile(r"<!-- (file|run): ([\w./-]+) -->\n```\w*\n(.*?)```", re.S)


def guide_blocks() -> tuple[dict[str, dict[str, str]], dict[str, list[list[str]]]]:
    """({framework: {file name: text}}, {framework: [command argv, ...]}) from the guide's pages."""
    files: dict[str, dict[str, str]] = {}
    runs: dict[str, list[list[str]]] = {}
    for kind, name, body in _BLOCK.findall("\n".join(page.read_text() for page in GUIDE)):
        if kind == "file":
            framework, _, file = name.partition("/")
            files.setdefault(framework, {})[file] = body
        else:
            commands = [shlex.split(line, comments=True) for line in body.splitlines()]
            runs[name] = [argv for argv in commands if argv]
    return files, runs


FILES, RUNS = guide_blocks()


def test_the_guide_covers_every_seed_framework():
    assert set(RUNS) == {"deepfense", "mammoth", "up", "delira"} and set(FILES) == set(RUNS)
    for argvs in RUNS.values():
        assert all(argv[0] == "modforge" for argv in argvs), argvs


@pytest.fixture
def ported(tmp_path, cli):
    """Write one framework's files into the test folder; return a runner of its commands."""

    def _port(framework: str):
        for name, text in FILES[framework].items():
            (tmp_path / name).write_text(text)
        for argv in RUNS[framework]:
            result = cli(*argv[1:])
            assert result.code == 0, f"{shlex.join(argv)} failed:\n{result.err}"
        return tmp_path

    return _port


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["deepfense", "mammoth", "up", "delira"])
def test_the_ported_example_runs_as_the_guide_shows(framework, ported):
    folder = ported(framework)
    summary = yaml.safe_load((folder / "run" / "summary.json").read_text())
    if framework == "mammoth":
        assert len(summary["class_il"]["matrix"]) == 5  # every task trained and evaluated
    else:
        assert summary["epochs"] == 2 and summary.get("test")
    if framework == "deepfense":
        assert (folder / "run" / "scores.txt").exists()
    if framework == "delira":
        assert list((folder / "run" / "exports").glob("*.onnx"))


PORTER_PARTS = '''
import torch.nn as nn
import modforge as mf


@mf.register_head("up_head")
class UpHead(nn.Module):
    dict_io = True

    def __init__(self, in_planes, num_classes):
        super().__init__()
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, input):
        input["logits"] = self.fc(input["backbone"])


@mf.register_head("silent_head")
class SilentHead(nn.Module):
    dict_io = True

    def __init__(self, in_dim: int, num_classes: int):
        super().__init__()
        self.fc = nn.Linear(in_dim, num_classes)

    def forward(self, input):
        input["logits"] = self.fc(input["backbone"])


@mf.register_backbone("config_dict")
class ConfigDict(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc(x)


@mf.register_backbone("input_dim")
class InputDim(nn.Module):
    def __init__(self, input_dim: int, output_dim: int = 8):
        super().__init__()
        self.fc = nn.Linear(input_dim, output_dim)
        self.out_dim = output_dim

    def forward(self, x):
        return self.fc(x)
'''

MISTAKES = {
    "deepfense input_dim": ("{backbone: {type: input_dim}, head: linear}", "config",
                            "model.backbone.args.input_dim: required argument missing (expected int); the builder wires a "
                            "part's input size into an argument named in_dim — rename 'input_dim' to in_dim (and leave it "
                            "out of the config)"),
    "deepfense config dict": ("{backbone: {type: config_dict, args: {config: {a: 1}}}, head: linear}", "config",
                              "(it has no type annotation, so it is read as str)"),
    "up kwarg": ("{stages: [{name: backbone, type: mlp, kwarg: {hidden_dims: [8]}}]}", "config",
                 "model.stages.0.kwarg: unknown key 'kwarg'; did you mean 'args'? Rename 'kwarg:' to 'args:'"),
    "up in_planes": ("{backbone: mlp, head: up_head}", "config",
                     "model.head.args.in_planes: required argument missing (expected str); the builder wires a part's input "
                     "size into an argument named in_dim — rename 'in_planes' to in_dim (and leave it out of the config)"),
    "up head returns None": ("{backbone: mlp, head: silent_head, losses: [cross_entropy]}", "train",
                             "its forward must return the batch dict with 'logits' set, but it returned None (end forward "
                             "with 'return input')"),
    "up num_classes": ("{backbone: mlp, head: {type: linear, args: {num_classes: 21}}, losses: [cross_entropy]}", "config",
                       "model.head.args.num_classes: the data has 10 classes but the config sets num_classes: 21; "
                       "remove it from the config"),
}  # fmt: skip


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_porters_habit_gets_the_message_the_guide_promises(mistake, cli, tmp_path):
    """Each habit of the guide's tables, made: one line (exit 2) with the text the guide
    shows, and no run folder left behind."""
    model, command, promised = MISTAKES[mistake]
    guide = "\n".join(page.read_text() for page in GUIDE).replace("…", "")
    assert promised.split(" (in ")[0] in guide, "the guide's table must show the message"
    (tmp_path / "parts.py").write_text(PORTER_PARTS)
    (tmp_path / "port.yaml").write_text(
        f"plugins: [parts.py]\ndata: {{type: digits, args: {{as_image: false}}}}\nmodel: {model}\ntrain: {{max_epochs: 1}}\n"
    )
    extra = ["--run-dir", "run"] if command == "train" else []
    result = cli(command, "port.yaml", *extra)
    assert result.code == 2 and promised in result.err, result.err
    assert result.err.count("error:") == 1 and not (tmp_path / "run").exists()
