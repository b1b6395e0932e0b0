"""Everything that needs a GPU, as one command for a session lent a device machine (at most 9½ minutes).

Steps, in this order, each in its own process with its own time limit (and all of them within
``--budget`` seconds, 570 by default), each one's output in ``$OUT/<step>.log``; a step that fails or runs out of
time is recorded and the next one runs:

1. ``cuda-tests`` — the tests marked ``cuda`` (``pytest -m cuda`` over the files that use the mark);
2. ``gpu`` — ``benchmarks/gpu.py --quick --runs 5 --profile --write``: Trainer vs hand loop vs the model-only
   bound, then one epoch of each compiled contender profiled;
3. ``continual`` — ``benchmarks/continual_gpu.py --quick --write``: DER++ steps/s vs Mammoth's own
   code (needs Mammoth's tree in ``.mammoth``);
4. ``input-pipeline`` — ``benchmarks/input_pipeline.py --device cuda --quick --write``;
5. ``airbench`` — ``benchmarks/airbench.py --speed --profile --write`` (needs the ``airbench`` package): the
   recipe's 476 steps against airbench's, then where each side's time goes.

``--skip STEP`` leaves a step out (its figures recorded by an earlier device session); ``--quick`` runs the
airbench comparison over 2 epochs, once each (a diagnosis: the profile is what it is for).

A step whose script is missing, or that needs what the machine lacks (a CUDA device, Mammoth's
tree, a package), is skipped with the reason. At the end ``$OUT/summary.md`` (also printed) says
what ran, how long, and how it ended, with the machine's GPU, torch and CUDA; ``$OUT/README.md`` is
``benchmarks/README.md`` as the benchmarks' ``--write`` left it on the device machine (its working
tree does not come back). ``$OUT`` defaults to ``./device-out``. On a machine without CUDA every
GPU step is skipped at once (the suite runs it that way).

A device machine has no network: what it needs travels with the working tree. Prepare it here
(package registries reachable), once::

    python benchmarks/device_check.py --prepare --mammoth-repo <a clone of aimagelab/mammoth>

which downloads, for the device's Python (``--python-version``, 3.12), wheels of the packages
modforge and the benchmarks import that the device image lacks into ``.whl/`` and exports Mammoth's
tree at the parity commit into ``.mammoth/``, both ignored by git (``.git/info/exclude``). Then the
device session runs, as one command (the tool's ``carry: [".whl", ".mammoth"]``, ``timeout_s`` 600)::

    python3 benchmarks/device_check.py

(installing ``.whl/*.whl`` into a scratch folder first), and back here::

    python benchmarks/device_check.py --take <returned folder>/README.md

copies the sections the device run rewrote into ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "benchmarks" / "README.md"
MAMMOTH_COMMIT = "e75a491c69fd729edeb01431afb753d9157d9a81"
# what the device machine's image lacks (its package list), pinned to the versions installed here
# (typing-extensions too: pydantic needs a newer one than the image may have)
WHEELS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions", "docstring-parser",
          "kornia", "kornia-rs", "airbench==0.1.8")  # fmt: skip
PROBE = """
import json, sys
found = {"python": sys.version.split()[0]}
try:
    import torch
    found.update(torch=torch.__version__, cuda=torch.cuda.is_available(), cuda_version=torch.version.cuda)
    if found["cuda"]:
        found["gpu"] = torch.cuda.get_device_name(0)
except Exception as exc:
    found.update(torch=None, cuda=False, torch_error=repr(exc))
for name in ("modforge", "airbench", "kornia") if found["cuda"] else ():  # without CUDA every step is skipped
    try:
        __import__(name)
        found[name] = True
    except Exception as exc:
        found[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
"""


@dataclasses.dataclass
class Step:
    """One step: its name, its command (run from the repository's root), its time limit in seconds, and
    what it needs (a script that exists, a CUDA device, packages, a folder)."""

    name: str
    command: list[str]
    timeout: int
    script: str | None = None
    packages: tuple[str, ...] = ()
    folder: str | None = None


def marked_test_files() -> list[str]:
    """The test files that use the ``cuda`` mark."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if "pytest.mark.cuda" in p.read_text(errors="replace"))  # fmt: skip


def writes(script: str) -> list[str]:
    """``--write`` when the benchmark records its figures with it."""
    path = ROOT / script
    return ["--write"] if path.is_file() and '"--write"' in path.read_text(errors="replace") else []


def plan(python: str, quick: bool = False) -> list[Step]:
    """The steps, in order (their limits add up to one device command's 10 minutes, less start-up);
    ``quick``: the airbench comparison over 2 epochs, once each (a diagnosis run)."""
    gpu, continual, pipeline, airbench = (f"benchmarks/{name}.py" for name in
                                          ("gpu", "continual_gpu", "input_pipeline", "airbench"))  # fmt: skip
    tests = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", *marked_test_files()]
    return [
        Step("cuda-tests", tests, 75, packages=("modforge",)),
        Step("gpu", [python, gpu, "--quick", "--runs", "5", "--profile", *writes(gpu)], 210, script=gpu,
             packages=("modforge",)),
        Step(
            "continual",
            [python, continual, "--quick", "--mammoth", ".mammoth", *writes(continual)],
            40,
            script=continual,
            packages=("modforge", "kornia"),
            folder=".mammoth",
        ),
        Step(
            "input-pipeline",
            [python, pipeline, "--device", "cuda", "--quick", *writes(pipeline)],
            60,
            script=pipeline,
            packages=("modforge",),
        ),
        Step(
            "airbench",
            [python, airbench, "--speed", "--profile", *(["--quick"] if quick else []), *writes(airbench)],
            210,
            script=airbench,
            packages=("modforge", "airbench"),
        ),
    ]


def has_nvidia_driver() -> bool:
    """Whether this machine has an NVIDIA driver (``nvidia-smi`` or a ``/dev/nvidia*`` device)."""
    return shutil.which("nvidia-smi") is not None or any(Path("/dev").glob("nvidia*"))


def why_skipped(step: Step, found: dict) -> str | None:
    """Why ``step`` cannot run here, or None."""
    if step.script and not (ROOT / step.script).is_file():
        return f"{step.script} does not exist"
    if not found.get("cuda"):
        return "no CUDA device here"
    missing = [f"{name} ({found.get(name)})" for name in step.packages if found.get(name) is not True]
    if missing:
        return "cannot import " + ", ".join(missing)
    if step.folder and not (ROOT / step.folder).is_dir():
        return f"no {step.folder}/ (benchmarks/device_check.py --prepare makes it)"
    return None


def run_step(step: Step, timeout: float, env: dict, log: Path) -> tuple[str, float]:
    """Run ``step`` with its output in ``log``; (how it ended, seconds)."""
    started = time.perf_counter()
    with log.open("w") as out:
        out.write(f"$ {' '.join(step.command)}\n")
        out.flush()
        proc = subprocess.Popen(step.command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            rc = proc.wait(timeout=timeout)
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the step and every process it started (loader workers)
            proc.wait()
            status = f"stopped at its limit ({timeout:.0f} s)"
    return status, time.perf_counter() - started


def install_wheels(python: str, env: dict, out: Path) -> str:
    """Install the carried ``.whl/*.whl`` into a scratch folder put first on ``PYTHONPATH`` (one at a
    time: a wheel this Python cannot take does not keep the others out)."""
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    if not wheels:
        return "no .whl/ wheels carried"
    site = Path(tempfile.mkdtemp(prefix="modforge-device-site-"))
    failed, log = [], []
    for wheel in wheels:
        done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--no-cache-dir", "--target", str(site), str(wheel)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        if done.returncode:
            failed.append(wheel.name)
            log.append(f"{wheel.name}:\n{done.stdout}{done.stderr}")
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    if failed:
        (out / "wheels.log").write_text("\n".join(log))
        return f"{len(wheels) - len(failed)} of {len(wheels)} wheels installed; not {', '.join(failed)} (wheels.log)"
    return f"{len(wheels)} wheels installed"


def check(out: Path, budget: float, dry_run: bool, skip: frozenset[str] = frozenset(), quick: bool = False) -> int:
    """Run every step but those in ``skip`` (or, with ``dry_run``, say what would run); write
    ``out/summary.md``."""
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    driver = has_nvidia_driver()
    wheels = "not installed (dry run)" if dry_run else install_wheels(python, env, out) if driver else "not needed"
    if driver:
        probe = subprocess.run([python, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        found = json.loads(probe.stdout.strip().splitlines()[-1]) if probe.returncode == 0 else {"probe": probe.stderr}
    else:  # no need to start torch to know
        found = {"python": sys.version.split()[0], "cuda": False, "gpu": "no NVIDIA driver here"}
    machine = (f"{found.get('gpu', 'no CUDA device')}; Python {found.get('python')}, torch {found.get('torch')}, "
               f"CUDA {found.get('cuda_version')}; wheels: {wheels}")  # fmt: skip
    rows, failed = [], 0
    for step in plan(python, quick):
        reason = "--skip" if step.name in skip else why_skipped(step, found)
        left = budget - (time.perf_counter() - started)
        if reason is None and left < 20:
            reason = f"out of time ({left:.0f} s of the {budget:.0f} s budget left)"
        if dry_run:
            reason = f"{reason + '; ' if reason else ''}would run: {' '.join(step.command[1:])}"
        if reason is not None:
            rows.append((step.name, "skipped", 0.0, reason))
            print(f"[{step.name}] skipped: {reason}", flush=True)
            continue
        limit = min(step.timeout, left)
        print(f"[{step.name}] {' '.join(step.command[1:])} (limit {limit:.0f} s)", flush=True)
        status, seconds = run_step(step, limit, env, out / f"{step.name}.log")
        failed += status != "ok"
        rows.append((step.name, status, seconds, f"{step.name}.log"))
        print(f"[{step.name}] {status} in {seconds:.0f} s", flush=True)
        if status != "ok":
            print("".join((out / f"{step.name}.log").read_text(errors="replace").splitlines(True)[-25:]), flush=True)
    if README.is_file() and any(status != "skipped" for _, status, _, _ in rows):
        shutil.copy(README, out / "README.md")  # what the benchmarks' --write recorded on this machine
    summary = (
        f"# Device check\n\n{machine}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{time.perf_counter() - started:.0f} s of a {budget:.0f} s budget.\n\n"
        "| step | result | seconds | output |\n|---|---|---|---|\n"
        + "".join(f"| {name} | {status} | {seconds:.0f} | {note} |\n" for name, status, seconds, note in rows)
    )
    (out / "summary.md").write_text(summary)
    print("\n" + summary, flush=True)
    return 1 if failed else 0


SECTION = re.compile(r"<!-- ([\w.-]+):start -->.*?<!-- \1:end -->", re.S)


def take_sections(returned: str, local: str) -> tuple[str, list[str]]:
    """``local`` with every marked section (``<!-- name:start -->`` … ``<!-- name:end -->``) that
    ``returned`` holds differently replaced by ``returned``'s, and the names taken (a section new
    in ``returned`` is appended)."""
    taken = []
    for match in SECTION.finditer(returned):
        name, block = match.group(1), match.group(0)
        mine = re.search(rf"<!-- {re.escape(name)}:start -->.*?<!-- {re.escape(name)}:end -->", local, re.S)
        if mine is None:
            local = local.rstrip("\n") + f"\n\n{block}\n"
        elif mine.group(0) != block:
            local = local[: mine.start()] + block + local[mine.end() :]
        else:
            continue
        taken.append(name)
    return local, taken


def prepare(python_version: str, mammoth_repo: str | None) -> int:
    """Download the wheels the device lacks into ``.whl/`` and export Mammoth's tree into ``.mammoth/``."""
    from importlib import metadata

    exclude = ROOT / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    with exclude.open("a") as f:
        f.writelines(f"{entry}\n" for entry in ("/.whl/", "/.mammoth/", "/device-out/") if entry not in lines)
    pins = []
    for name in WHEELS:
        try:
            pins.append(name if "==" in name else f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)  # not installed here (kornia): the newest
    platforms = [arg for n in (28, 27, 17) for arg in ("--platform", f"manylinux_2_{n}_x86_64")]
    platforms += ["--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64"]
    for pin in pins:  # one at a time: a pin pip cannot find for that platform does not stop the others
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "--python-version", python_version, "--implementation", "cp", *platforms,
                               "-d", str(ROOT / ".whl"), pin], capture_output=True, text=True)  # fmt: skip
        if done.returncode:  # no wheel published (airbench: a source archive only): build it, if pure Python
            done = pure_wheel(pin, ROOT / ".whl")
        print(f"{pin}: {'ok' if done.returncode == 0 else 'FAILED ' + done.stderr.strip().splitlines()[-1]}")
    if mammoth_repo:
        target = ROOT / ".mammoth"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        archive = subprocess.run(["git", "-C", mammoth_repo, "archive", MAMMOTH_COMMIT], capture_output=True)
        if archive.returncode:
            print(f"git archive {MAMMOTH_COMMIT} in {mammoth_repo} failed: {archive.stderr.decode().strip()}")
            return 1
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        print(f"Mammoth {MAMMOTH_COMMIT[:7]} exported to {target}")
    size = sum(p.stat().st_size for d in (".whl", ".mammoth") for p in (ROOT / d).rglob("*") if p.is_file())
    print(f".whl/ and .mammoth/: {size / 2**20:.1f} MiB (the working tree that travels must stay under 64 MiB)")
    return 0


def pure_wheel(pin: str, into: Path) -> subprocess.CompletedProcess:
    """A wheel of ``pin`` built here from its source archive, kept only if it is pure Python (it then
    installs on any machine)."""
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-binary", ":all:",
                               "-w", scratch, pin], capture_output=True, text=True)  # fmt: skip
        built = list(Path(scratch).glob("*.whl"))
        if done.returncode == 0 and not all(w.name.endswith("-py3-none-any.whl") for w in built):
            return subprocess.CompletedProcess(done.args, 1, "", f"{pin} is not pure Python: no wheel for the device")
        for wheel in built:
            shutil.copy(wheel, into / wheel.name)
        return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "device-out"),
                        help="where the logs and the summary go (default: $OUT, else ./device-out)")  # fmt: skip
    parser.add_argument("--budget", type=float, default=570.0, help="seconds for everything together (default 570)")
    parser.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    parser.add_argument("--skip", action="append", default=[], metavar="STEP",
                        help="a step not to run (its figures are recorded already); repeatable")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="airbench over 2 epochs, once each (not the recipe's 476 steps)")
    parser.add_argument("--prepare", action="store_true", help="here, before a device session: wheels and Mammoth")
    parser.add_argument("--python-version", default="3.12", help="--prepare: the device's Python (default 3.12)")
    parser.add_argument("--mammoth-repo", help="--prepare: a clone of aimagelab/mammoth to export .mammoth from")
    parser.add_argument("--take", metavar="README", help="copy the sections a device run rewrote into README.md")
    parser.add_argument("--readme", default=str(README), help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.prepare:
        return prepare(ns.python_version, ns.mammoth_repo)
    if ns.take:
        target = Path(ns.readme)
        text, taken = take_sections(Path(ns.take).read_text(), target.read_text())
        target.write_text(text)
        print(f"took {', '.join(taken) if taken else 'nothing (no section differs)'} into {target}")
        return 0
    unknown = set(ns.skip) - {step.name for step in plan(sys.executable)}
    if unknown:
        parser.error(f"--skip: no step named {', '.join(sorted(unknown))}")
    return check(Path(ns.out), ns.budget, ns.dry_run, frozenset(ns.skip), ns.quick)


if __name__ == "__main__":
    sys.exit(main())
