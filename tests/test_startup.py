"""`modforge list` stays light: heavy optional dependencies are imported only where used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "onnxruntime",
    "onnx",
    "matplotlib",
    "tensorboard",
    "soundfile",
    "transformers",
    "sklearn",
    "scipy",
    "pandas",
    "lightning",
    "torchvision",
    "torchaudio",
    "timm",
)

COMMANDS = [["list"], ["describe", "optimizer", "adamw"]]

# One fresh interpreter serves every check: what ``import modforge`` alone loaded, then each command
# in turn with the modules loaded after it. A module a command imports stays in ``sys.modules``, so
# the list after a later command holds everything the earlier ones loaded too: each check reads the
# list after its own command — a heavy module there was imported by that command or one before it.
PROBE = """
import json, sys
import modforge
print("\\n__IMPORT__" + json.dumps("modforge.train.optimizers" in sys.modules))
from modforge.cli.main import main
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    sys.stdout.flush()
    print("\\n__MODULES__" + json.dumps({"argv": argv, "code": code, "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def probed() -> dict:
    """``import modforge`` and then each of :data:`COMMANDS` in one fresh interpreter: whether the
    import loaded the optimizer registrations, and the modules loaded after each command."""
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(COMMANDS)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (imported,) = [json.loads(line[len("__IMPORT__") :]) for line in lines if line.startswith("__IMPORT__")]
    after = [json.loads(line[len("__MODULES__") :]) for line in lines if line.startswith("__MODULES__")]
    assert [run["argv"] for run in after] == COMMANDS
    return {"import": imported, "after": after}


@pytest.mark.slow
@pytest.mark.parametrize("argv", COMMANDS)
def test_cli_does_not_import_heavy_optional_dependencies(probed, argv):
    runs = probed["after"][: COMMANDS.index(argv) + 1]  # this command and the ones run before it
    assert runs[-1]["code"] == 0
    loaded = sorted(h for h in HEAVY if h in set(runs[-1]["modules"]))
    shown = ", then ".join(f"'modforge {' '.join(run['argv'])}'" for run in runs)
    assert not loaded, f"{shown} imported {loaded}"


def test_import_modforge_does_not_load_parts_or_torch_optim_registrations(probed):
    assert probed["import"] is False  # built-in parts load on the first registry query
