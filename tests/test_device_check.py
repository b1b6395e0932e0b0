"""``benchmarks/device_check.py``, the one command of a device session: on a machine without CUDA
every GPU step is skipped at once with its reason and the summary says so; the steps it plans
and why it skips one; the README sections a device run rewrote are taken back here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would measure")
def test_without_cuda_every_step_is_skipped_and_the_summary_says_why(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (tmp_path / "summary.md").read_text()
    for step in ("cuda-tests", "gpu", "continual", "input-pipeline", "airbench"):
        assert f"| {step} | skipped | 0 | no CUDA device here |" in summary
    assert "no NVIDIA driver here;" in summary and summary in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.md"]  # nothing ran: no logs, no README


def test_the_plan_runs_the_cuda_tests_and_records_the_benchmarks():
    dc = _module()
    steps = {step.name: step for step in dc.plan("python3")}
    assert list(steps) == ["cuda-tests", "gpu", "continual", "input-pipeline", "airbench"]
    tests = steps["cuda-tests"].command
    assert tests[:8] == ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda"]
    assert "tests/test_device_hot_path.py" in tests and "tests/test_device_check.py" not in tests
    assert steps["gpu"].command == ["python3", "benchmarks/gpu.py", "--quick", "--runs", "5", "--profile", "--write"]
    assert steps["continual"].command[-3:] == ["--mammoth", ".mammoth", "--write"]
    assert sum(step.timeout for step in steps.values()) <= 600  # one device command's limit


def test_a_step_is_skipped_for_what_the_machine_lacks(tmp_path, monkeypatch):
    dc = _module()
    monkeypatch.setattr(dc, "ROOT", tmp_path)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "continual_gpu.py").write_text("")
    step = next(s for s in dc.plan("python3") if s.name == "continual")
    found = {"cuda": True, "modforge": True, "kornia": "ModuleNotFoundError: No module named 'kornia'"}
    assert dc.why_skipped(step, found) == "cannot import kornia (ModuleNotFoundError: No module named 'kornia')"
    assert "no .mammoth/" in dc.why_skipped(step, {**found, "kornia": True})
    (tmp_path / ".mammoth").mkdir()
    assert dc.why_skipped(step, {**found, "kornia": True}) is None
    assert dc.why_skipped(step, {**found, "kornia": True, "cuda": False}) == "no CUDA device here"
    gone = next(s for s in dc.plan("python3") if s.name == "airbench")
    assert dc.why_skipped(gone, found) == "benchmarks/airbench.py does not exist"


def test_the_sections_a_device_run_rewrote_are_taken_back():
    dc = _module()
    local = "# Benchmarks\n\n<!-- gpu:start -->\nNot run yet.\n<!-- gpu:end -->\n\ntext\n\n<!-- ema:start -->\nE\n<!-- ema:end -->\n"
    returned = ("# Benchmarks\n\n<!-- gpu:start -->\nH200: 1.02x\n<!-- gpu:end -->\n\n<!-- ema:start -->\nE\n"
                "<!-- ema:end -->\n\n<!-- continual_gpu:start -->\n1.3x\n<!-- continual_gpu:end -->\n")  # fmt: skip
    text, taken = dc.take_sections(returned, local)
    assert taken == ["gpu", "continual_gpu"]
    assert "H200: 1.02x" in text and "Not run yet" not in text and "\ntext\n" in text
    assert text.endswith("<!-- continual_gpu:start -->\n1.3x\n<!-- continual_gpu:end -->\n")
    assert dc.take_sections(returned, text) == (text, [])


def test_a_step_runs_in_its_own_process_group_with_its_output_logged_and_is_stopped_at_its_limit(tmp_path):
    dc = _module()
    env = {**__import__("os").environ}
    ok = dc.Step("ok", [sys.executable, "-c", "print('figures')"], 30)
    assert dc.run_step(ok, 30, env, tmp_path / "ok.log")[0] == "ok"
    assert (tmp_path / "ok.log").read_text().endswith("figures\n")
    failing = dc.Step("failing", [sys.executable, "-c", "raise SystemExit(3)"], 30)
    assert dc.run_step(failing, 30, env, tmp_path / "failing.log")[0] == "failed (exit 3)"
    # a step that outlives its limit is stopped with the process it started
    code = ("import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
            "time.sleep(60)']); print(child.pid, flush=True); time.sleep(60)")  # fmt: skip
    slow = dc.Step("slow", [sys.executable, "-c", code], 1)
    status, _seconds = dc.run_step(slow, 1.5, env, tmp_path / "slow.log")
    assert status == "stopped at its limit (2 s)"  # not "ok": it did not run its 60 s out
    child = int((tmp_path / "slow.log").read_text().splitlines()[-1])
    assert _ended(child)


def _ended(pid: int) -> bool:
    """Whether process ``pid`` is gone (or a zombie nobody reaped yet), waiting up to 5 s."""
    import time

    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False
