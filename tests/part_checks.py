"""What the tests of single parts (backbones, frontends, losses) share: the contract's verdict read
one way, a sequence backbone checked on long inputs, under both layouts and under the engines on
inputs of other lengths, a reference model with random BatchNorm statistics, and sockets refused
for tests that must stay offline."""

from __future__ import annotations

import socket
import warnings
from collections.abc import Iterable, Sequence

import pytest
import torch

from modforge.core.registries import BACKBONES
from modforge.engines import build_engine

__all__ = ["CORE_CHECKS", "assert_contract", "assert_embeds", "assert_engines_follow_the_frame_count",
           "assert_layouts_agree", "refuse_network", "with_random_bn_statistics"]

CORE_CHECKS = frozenset({"builds", "forward", "out_dim", "finite", "gradients", "deterministic", "state_dict"})
"""The checks every part of every kind must pass (the others depend on the kind and the part)."""


def assert_contract(results: Sequence, required: Iterable[str] = (), *, layouts: bool = False) -> set[str]:
    """No check of ``check_part``'s ``results`` failed (each failure named, with its layout when
    ``layouts``) and every check in ``required`` passed. Returns the names of the checks that passed."""
    failures = [f"{r.check} [{r.layout}]: {r.detail}" if layouts else f"{r.check}: {r.detail}"
                for r in results if r.status == "fail"]  # fmt: skip
    assert not failures, "\n".join(failures)
    passed = {r.check for r in results if r.status == "pass"}
    assert set(required) <= passed, sorted(set(required) - passed)
    return passed


def assert_embeds(name: str, in_dim: int, frames: int, out_dim: int) -> None:
    """The registered backbone ``name``, built with its defaults for ``in_dim`` features, turns one input
    of ``frames`` frames into one finite embedding of ``out_dim``."""
    net = BACKBONES.build(name, in_dim=in_dim).eval()
    with torch.no_grad():
        out = net(torch.randn(1, frames, in_dim))
    assert out.shape == (1, out_dim) and torch.isfinite(out).all()


def assert_layouts_agree(sequence: torch.nn.Module, channels: torch.nn.Module, x: torch.Tensor) -> None:
    """``channels`` (the same part in the CHANNELS layout), given ``sequence``'s weights, answers ``x``
    (batch, frames, features) transposed as ``sequence`` answers ``x``."""
    channels.load_state_dict(sequence.state_dict())
    with torch.no_grad():
        assert torch.allclose(sequence(x), channels(x.transpose(1, 2)), atol=1e-6)


def assert_engines_follow_the_frame_count(net: torch.nn.Module, engine: str, features: int = 12) -> None:
    """``net`` (eval mode) prepared by ``engine`` on 16 frames of ``features`` answers what eager
    PyTorch answers on 7 and on 50 frames: the sequence length is not baked into the export. (ONNX Runtime
    runs on one thread, as the conformance suite runs it: more only spin on these small batches.)"""
    spec = {"type": engine, "args": {"threads": 1} if engine == "onnx" else {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runnable = build_engine(spec, path=engine).prepare(net, {"input": torch.randn(2, 16, features)})
    for frames in (7, 50):
        x = torch.randn(3, frames, features)
        with torch.no_grad():
            out = runnable(x)
            out = torch.as_tensor(out["logits"] if isinstance(out, dict) else out)  # as the conformance suite reads it
            assert torch.allclose(out, net(x), atol=1e-5)


def with_random_bn_statistics(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in eval mode with random BatchNorm running statistics (a freshly built model's zeros
    and ones would hide a wrong mapping of them)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()


def refuse_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection attempt fails at once (for tests that must run offline)."""

    def refuse(*_args, **_kwargs):  # noqa: ANN202
        raise OSError("network access attempted in an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
