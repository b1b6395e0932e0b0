"""The contract checks, one function each, and the runner.

Every registered part is put through these by the project's own test suite, and
``modforge check`` runs them on a user's part. Each check returns a short detail on
success, raises :class:`CheckFailed` with the reason, or :class:`CheckSkipped` when
it does not apply (a loss has no batch rows to compare).
"""

from __future__ import annotations

import copy
import dataclasses
import io
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from ..components.layouts import Layout, infer_layout, out_dim_of
from ..model.introspect import declared_out_dim, takes_returnt
from ..model.modular import describe_value
from .subjects import Subject

__all__ = ["CHECKS", "CheckFailed", "CheckResult", "CheckSkipped", "run_checks"]


class CheckFailed(AssertionError):
    """The part breaks the contract; the message says how."""


class CheckSkipped(Exception):
    """The check does not apply to this part."""


@dataclasses.dataclass
class CheckResult:
    """One row of the report."""

    check: str
    status: str  # "pass", "fail" or "skip"
    detail: str = ""
    layout: str = ""


@dataclasses.dataclass
class Context:
    """What the checks share: the subject, one built part, its eval-mode output."""

    subject: Subject
    part: nn.Module
    _output: Any = None

    @property
    def output(self) -> Any:
        if self._output is None:
            self.part.eval()
            with torch.no_grad():
                self._output = self.subject.run(self.part)
        return self._output


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    raise CheckFailed(f"output is {describe_value(value)}, not a tensor or a list of tensors")


def _close(a: Any, b: Any, *, rtol: float = 1e-4, atol: float = 1e-5) -> tuple[bool, float]:
    """(all close, largest absolute difference) of two outputs, scaled by their size."""
    ta, tb = _tensors(a), _tensors(b)
    if len(ta) != len(tb) or any(x.shape != y.shape for x, y in zip(ta, tb, strict=True)):
        return False, float("inf")
    worst, ok = 0.0, True
    for x, y in zip(ta, tb, strict=True):
        scale = max(1.0, float(x.detach().abs().max())) if x.numel() else 1.0
        diff = float((x.detach() - y.detach()).abs().max()) if x.numel() else 0.0
        worst = max(worst, diff)
        ok = ok and torch.allclose(x.detach(), y.detach(), rtol=rtol, atol=atol * scale)
    return ok, worst


def check_forward(ctx: Context) -> str:
    """Forward on a valid input of the declared layout."""
    return f"{describe_value(ctx.subject.example)} -> {describe_value(ctx.output)}"


def _output_layout(ctx: Context) -> Layout:
    declared = getattr(ctx.part, "produces", None)
    return Layout(declared) if declared else infer_layout(ctx.output, hint=ctx.subject.layout)


def check_out_dim(ctx: Context) -> str:
    """The output's size equals the declared ``out_dim`` (a loss: a scalar)."""
    if ctx.subject.is_loss:
        if not isinstance(ctx.output, torch.Tensor) or ctx.output.numel() != 1:
            raise CheckFailed(f"a loss must return a scalar tensor, got {describe_value(ctx.output)}")
        return "scalar"
    layout = _output_layout(ctx)
    measured = out_dim_of(ctx.output, layout)
    declared = declared_out_dim(ctx.part)
    if declared is None:
        return f"{measured} ({layout.value}; not declared: the builder measures it)"
    if declared != measured:
        raise CheckFailed(
            f"declares out_dim {declared} but its {layout.value} output {describe_value(ctx.output)} has {measured}"
        )
    return f"{measured} ({layout.value})"


def check_finite(ctx: Context) -> str:
    """No NaN or Inf in the output."""
    for t in _tensors(ctx.output):
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise CheckFailed(f"output {describe_value(t)} has NaN/Inf values")
    return "finite"


def _requiring_grad(example: Any) -> Any:
    if isinstance(example, (list, tuple)):
        return [t.clone().requires_grad_(True) for t in example]
    return example.clone().requires_grad_(True) if example.is_floating_point() else example


def check_gradients(ctx: Context) -> str:
    """In train mode, backward reaches every trainable parameter and the input (a part
    that detaches its input would silently freeze every part before it)."""
    part = ctx.subject.build().train()
    example = _requiring_grad(ctx.subject.example)
    out = ctx.subject.run(part, example)
    total = sum(t.float().sum() for t in _tensors(out))
    if not isinstance(total, torch.Tensor) or not total.requires_grad:
        raise CheckFailed("no gradient: the output does not depend on the parameters or the input (detached?)")
    total.backward()
    missing = [n for n, p in part.named_parameters() if p.requires_grad and p.grad is None]
    if missing:
        raise CheckFailed(f"no gradient reaches {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    bad = [n for n, p in part.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    if bad:
        raise CheckFailed(f"non-finite gradients in {', '.join(bad[:5])}")
    inputs = [t for t in _tensors(example) if t.requires_grad]
    reached = [t for t in inputs if t.grad is not None]
    if inputs and not reached:  # a multiscale consumer may use only some levels, but not none
        raise CheckFailed("no gradient flows back to the input (is it detached?)")
    if any(not torch.isfinite(t.grad).all() for t in reached):
        raise CheckFailed("non-finite gradient at the input")
    count = sum(1 for p in part.parameters() if p.requires_grad)
    return f"{count} trainable tensors and the input" if count else "reaches the input (no parameters)"


def check_returnt(ctx: Context) -> str:
    """``returnt`` modes agree: "both" == ("out", "features"), ``features()`` ==
    ``returnt="features"`` and ``returnt="full"`` is a list of tensors (Mammoth style); a
    backbone without ``returnt`` has ``features``/``forward_intermediates`` agreeing with its forward."""
    part, x = ctx.part.eval(), ctx.subject.example
    if ctx.subject.dict_io:
        raise CheckSkipped("a dict-in/dict-out part")
    with torch.no_grad():
        if takes_returnt(part):
            out, feats = part(x, returnt="out"), part(x, returnt="features")
            both = part(x, returnt="both")
            if not (_close(both[0], out)[0] and _close(both[1], feats)[0]):
                raise CheckFailed('returnt="both" differs from ("out", "features")')
            if callable(getattr(part, "features", None)) and not _close(part.features(x), feats)[0]:
                raise CheckFailed('features() differs from returnt="features"')
            full = part(x, returnt="full")
            if not isinstance(full, (list, tuple)) or not full or not all(isinstance(t, torch.Tensor) for t in full):
                raise CheckFailed(f'returnt="full" must return a non-empty list of tensors (every layer\'s output), '
                                  f"got {describe_value(full)}")  # fmt: skip
            return f"out/features/both/full agree; full: {len(full)} layers"
        if callable(getattr(part, "forward_intermediates", None)):
            final, blocks = part.forward_intermediates(x)
            if not _close(final, ctx.output)[0]:
                raise CheckFailed("forward_intermediates() output differs from forward()")
            if not isinstance(blocks, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in blocks):
                raise CheckFailed(f'forward_intermediates() blocks (returnt="full") must be a list of tensors, '
                                  f"got {describe_value(blocks)}")  # fmt: skip
            if callable(getattr(part, "features", None)) and not _close(part.features(x), ctx.output)[0]:
                raise CheckFailed("features() differs from forward()")
            return f"{len(blocks)} intermediate blocks"
    raise CheckSkipped("no returnt parameter and no forward_intermediates")


def check_deterministic(ctx: Context) -> str:
    """Two eval-mode forwards on the same input are equal."""
    ctx.part.eval()
    with torch.no_grad():
        again = ctx.subject.run(ctx.part)
    ok, diff = _close(again, ctx.output, rtol=0, atol=0)
    if not ok:
        raise CheckFailed(f"two eval forwards differ (max |diff| {diff:.3g})")
    return "equal"


def check_state_dict(ctx: Context) -> str:
    """state_dict → ``torch.save`` → ``torch.load(weights_only=True)`` → a fresh instance
    reproduces the outputs."""
    buffer = io.BytesIO()
    torch.save(ctx.part.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    other = ctx.subject.build()
    other.load_state_dict(state, strict=True)
    other.eval()
    with torch.no_grad():
        again = ctx.subject.run(other)
    ok, diff = _close(again, ctx.output, rtol=1e-6, atol=1e-7)
    if not ok:
        raise CheckFailed(f"a fresh instance with the loaded state differs (max |diff| {diff:.3g})")
    return f"{len(state)} entries"


def check_flat_params(ctx: Context) -> str:
    """``get_params``/``set_params``/``get_grads``/``set_grads`` round-trip."""
    part = ctx.subject.build()
    if not callable(getattr(part, "get_params", None)):
        raise CheckSkipped("not a Backbone subclass (no flat parameter API)")
    total = sum(p.numel() for p in part.parameters())
    vector = part.get_params()
    if vector.shape != (total,):
        raise CheckFailed(f"get_params() has shape {tuple(vector.shape)}, expected ({total},)")
    shifted = vector + 1.0
    part.set_params(shifted)
    back = part.get_params()
    # exact for float32 parameters; close enough where a parameter's own dtype rounds the values (a
    # whole-vector allclose costs several times an equality test on a part of millions of values)
    if not (torch.equal(back, shifted) or torch.allclose(back, shifted)):
        raise CheckFailed("set_params() then get_params() does not give the vector back")
    if part.get_grads().any():
        raise CheckFailed("get_grads() is not all zeros before any backward")
    grads = torch.arange(total, dtype=vector.dtype)
    part.set_grads(grads)
    if not torch.equal(part.get_grads(), grads):
        raise CheckFailed("set_grads() then get_grads() does not give the vector back")
    return f"{total} values"


def _row(example: Any, i: int) -> Any:
    if isinstance(example, (list, tuple)):
        return [t[i : i + 1] for t in example]
    return example[i : i + 1]


def check_batch_independence(ctx: Context) -> str:
    """In eval mode, row i of a batch's output equals the output for row i alone."""
    if ctx.subject.is_loss:
        raise CheckSkipped("a loss reduces over the batch")
    ctx.part.eval()
    worst = 0.0
    with torch.no_grad():
        target = ctx.subject.target
        for i in range(len(_tensors(ctx.subject.example)[0])):
            row_target = target[i : i + 1] if target is not None else None
            alone = ctx.subject.run(ctx.part, _row(ctx.subject.example, i), row_target)
            ok, diff = _close(alone, _row(ctx.output, i))
            worst = max(worst, diff)
            if not ok:
                raise CheckFailed(f"row {i} differs when run alone (max |diff| {diff:.3g})")
    return f"max |diff| {worst:.2g}"


_DEVICE_WORDS = (
    "same device",
    "expected device",
    "device cpu",
    "device type cpu",
    "on cpu",
    "cpu and meta",
    "meta and cpu",
)


def check_device(ctx: Context) -> str:
    """No hard-coded device: the part runs with its weights and input on the ``meta``
    device (a tensor made on a fixed device inside forward breaks this)."""
    part = copy.deepcopy(ctx.part).to("meta").eval()
    example = (
        [t.to("meta") for t in ctx.subject.example]
        if isinstance(ctx.subject.example, list)
        else ctx.subject.example.to("meta")
    )
    target = ctx.subject.target.to("meta") if ctx.subject.target is not None else None
    try:
        with torch.no_grad():
            ctx.subject.run(part, example, target)
    except Exception as exc:
        text = str(exc).lower()
        if any(word in text for word in _DEVICE_WORDS):
            raise CheckFailed(
                f"creates tensors on a fixed device: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            ) from None
        raise CheckSkipped(f"an operation does not run on the meta device ({type(exc).__name__})") from None
    return "follows its input's device"


PARITY_ENGINES = ("torchscript", "onnx")  # compile is covered by the test suite (slow to compile on CPU)
PARITY_ENGINE_ARGS = {"onnx": {"threads": 1}}
"""Engine settings for the parity runs: ONNX Runtime on one thread — on a 5-sample batch its pool of
spinning threads only burns CPU (~13 % of the check's time, measured), and the outputs compared are the same."""


def check_engines(ctx: Context) -> str:
    """Under every engine that supports the part, its output matches eager (max abs
    difference ≤ 1e-5 relative to the output's scale) on another batch size than the
    example. A part declares what it cannot do in ``unsupported_engines``
    (engine → reason); that is reported, not failed."""
    import warnings

    from ..engines import build_engine

    subject = ctx.subject
    if subject.kind not in ("backbone", "frontend") or subject.dict_io:
        raise CheckSkipped("engine parity is checked on tensor-in/tensor-out backbones and frontends")
    if not isinstance(ctx.output, torch.Tensor):
        raise CheckSkipped(f"its output is {describe_value(ctx.output)}; engines are checked on single-tensor outputs")
    declared = dict(getattr(type(ctx.part), "unsupported_engines", {}) or {})
    example = subject.example
    wider = torch.cat([example, example[:1] * 0.5])
    with torch.no_grad():
        reference = ctx.part.eval()(wider)
    scale, notes = max(1.0, float(reference.abs().max())), []
    for name in PARITY_ENGINES:
        if name in declared:
            notes.append(f"{name}: declared unsupported ({declared[name]})")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                spec = {"type": name, "args": PARITY_ENGINE_ARGS.get(name, {})}
                runnable = build_engine(spec, path=name).prepare(ctx.part, {"input": example})
                with torch.no_grad():
                    out = runnable(wider)
        except Exception as exc:
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise CheckFailed(
                f"{name}: {first[:200]} — fix the part, or declare it: unsupported_engines = {{'{name}': 'why'}}"
            ) from None
        out = torch.as_tensor(out["logits"] if isinstance(out, dict) else out)
        diff = float((out - reference).abs().max()) if out.shape == reference.shape else float("inf")
        if not diff <= 1e-5 * scale:
            raise CheckFailed(f"{name}: output differs from eager by {diff:.3g} (shape {list(out.shape)})")
        how = " (traced)" if "Traced" in type(runnable).__name__ else ""
        notes.append(f"{name}{how} ≤ {diff:.1e}")
    return "; ".join(notes)


CHECKS: list[tuple[str, Callable[[Context], str]]] = [
    ("forward", check_forward),
    ("out_dim", check_out_dim),
    ("finite", check_finite),
    ("gradients", check_gradients),
    ("returnt", check_returnt),
    ("deterministic", check_deterministic),
    ("state_dict", check_state_dict),
    ("flat_params", check_flat_params),
    ("batch_independence", check_batch_independence),
    ("device", check_device),
    ("engines", check_engines),
]
"""Every contract check, in the order they run."""


def run_checks(subject: Subject) -> list[CheckResult]:
    """Build the part and run every check on it; a failure never stops the others."""
    layout = (
        subject.layout.value if subject.layout_note == "declared" else f"{subject.layout.value} ({subject.layout_note})"
    )
    try:
        part = subject.instance()
    except Exception as exc:
        return [CheckResult("builds", "fail", f"{type(exc).__name__}: {exc}", layout)] + [
            CheckResult(name, "skip", "the part did not build", layout) for name, _ in CHECKS
        ]
    results = [CheckResult("builds", "pass", f"{sum(p.numel() for p in part.parameters()):,} parameters", layout)]
    ctx = Context(subject, part)
    broken = False
    for name, check in CHECKS:
        if broken and name != "forward":
            results.append(CheckResult(name, "skip", "forward failed", layout))
            continue
        try:
            results.append(CheckResult(name, "pass", check(ctx), layout))
        except CheckSkipped as exc:
            results.append(CheckResult(name, "skip", str(exc), layout))
        except CheckFailed as exc:
            results.append(CheckResult(name, "fail", str(exc), layout))
        except Exception as exc:
            results.append(CheckResult(name, "fail", f"{type(exc).__name__}: {exc}", layout))
            broken = broken or name == "forward"
    return results
