"""Waveform utilities shared by the frontends: input checking, pre-emphasis, level normalisation.

Every frontend takes a batch of mono waveforms ``[B, T]`` (a ``[B, 1, T]`` batch is accepted
and squeezed). :func:`check_waveform` turns a wrong rank or a too-short input into one clear
``ValueError`` naming the part and the minimum length, instead of a shape error from deep
inside a convolution. The functions are TorchScript-compatible, so a scripted frontend keeps
the same checks.
"""

from __future__ import annotations

import torch

__all__ = ["check_waveform", "normalise_level", "pre_emphasize"]


def check_waveform(x: torch.Tensor, min_length: int, part: str) -> torch.Tensor:
    """``x`` as ``[B, T]`` (a ``[B, 1, T]`` batch is squeezed), at least ``min_length`` samples long.

    Raises:
        ValueError: another rank, or fewer than ``min_length`` samples.
    """
    if x.dim() == 3 and x.shape[1] == 1:
        x = x.squeeze(1)
    if x.dim() != 2:
        raise ValueError(
            f"frontend '{part}' expects a batch of waveforms [B, T], got a {x.dim()}-D tensor of shape {list(x.shape)}"
        )
    if x.shape[-1] < min_length:
        raise ValueError(
            f"frontend '{part}' needs waveforms of at least {min_length} samples, got {x.shape[-1]} "
            f"(pad or crop the audio, or use a smaller window/kernel)"
        )
    return x


def pre_emphasize(x: torch.Tensor, coefficient: float) -> torch.Tensor:
    """First-order pre-emphasis ``y[t] = x[t] - a·x[t-1]`` (``y[0] = x[0]``) along the last axis."""
    return torch.cat([x[:, :1], x[:, 1:] - coefficient * x[:, :-1]], dim=1)


def normalise_level(x: torch.Tensor, mode: str, eps: float) -> torch.Tensor:
    """Per-waveform level normalisation: ``"peak"`` (max |x| → 1), ``"rms"`` (RMS → 1) or ``"none"``.

    ``eps`` keeps silent inputs finite (and their gradients too).
    """
    if mode == "peak":
        return x / x.abs().amax(dim=-1, keepdim=True).clamp_min(eps)
    if mode == "rms":
        return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True).clamp_min(eps * eps))
    return x
