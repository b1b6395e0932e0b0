"""Whole-batch geometry of in-memory pictures: the pictures torchvision's v2 transforms give one
at a time, made for a whole ``[B, C, H, W]`` uint8 batch in a few tensor operations.

What runs batched: ``random_crop`` (any padding, ``pad_if_needed``, padding modes constant /
edge / reflect / symmetric, a scalar ``fill``), ``pad``, ``center_crop``,
``random_horizontal_flip``, ``random_vertical_flip`` — every transform that moves pixels
along the two axes independently. Each is an *axis map* (output coordinate → source
coordinate, or "fill"); the maps are composed back to front, and the batch is read with one
``gather`` of the (once-padded) pictures — on whatever device the pictures live.

The random draws are v2's own, bit for bit. v2 draws from torch's CPU Mersenne Twister,
seeded per sample (:func:`~.transforms.sample_seed`): ``RandomCrop`` one ``randint(0, n)``
per axis it moves, a flip one ``rand(1)`` compared with ``p``. On the CPU each such call turns
one 32-bit output ``x`` of the generator into ``x % n`` (``n < 2**28``) or
``(x % 2**24) / 2**24``. So one call ``randint(0, m, (K,))`` after seeding, with ``m`` a multiple
of every crop's ``n`` (and one more with ``m = 2**24`` for the flips), reads the K outputs the v2
calls would have consumed, modulo what they need; the offsets and flips follow in tensor
arithmetic (:func:`raw_draws`; checked once per process against the calls themselves). Where
no float transform follows, even the seeding is skipped: those outputs are computed for the whole
batch's seeds at once (:mod:`.mersenne`). The
picture is therefore exactly the one the per-sample path gives (same offsets, same flips, same
uint8 values), and the generator ends in the state v2 would leave it in — so a float transform
after the geometry (random erasing) can still run per sample and draw what it would have drawn.

:func:`batch_plan` says, for a list of v2 transforms and a picture size, how to do them
batched — or why it cannot (the caller then augments one picture at a time).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from ..base import copy_to
from . import mersenne

__all__ = ["BatchPlan", "batch_plan", "draw_passes", "draws_at_once", "raw_draws"]

log = logging.getLogger("modforge.data")

_UNIT = 2.0**-24
"""v2's ``rand(1)``: the low 24 bits of one 32-bit generator output times 2**-24 (float32)."""
_ONE_OUTPUT = 2**28
"""torch's CPU ``randint(0, n)`` is ``x % n`` of ONE 32-bit generator output ``x`` for ``n < 2**28``
(larger ranges take a 64-bit output)."""
_FLOAT_MODULUS = 2**24
"""``x % 2**24``: the 24 bits of ``x`` that ``rand(1)`` keeps."""
_MODES = ("constant", "edge", "reflect", "symmetric")


@dataclasses.dataclass(frozen=True)
class _Draw:
    """One random number v2 draws: ``randint(0, n)`` (``n``) or ``rand(1) < p`` (``p``)."""

    n: int | None = None
    p: float | None = None


@dataclasses.dataclass(frozen=True)
class _Window:
    """One axis of a crop of the padded picture: ``source = offset + out - pad_before``, where
    ``offset`` is a draw modulo ``span`` (``slot``) or fixed; outside ``[0, size_in)`` the
    padding ``mode`` decides (constant: the fill)."""

    axis: int  # 0: rows, 1: columns
    size_in: int
    pad_before: int
    mode: str
    slot: int | None
    span: int
    offset: int = 0


@dataclasses.dataclass(frozen=True)
class _Flip:
    """One axis mirrored for the samples whose draw ``slot`` says so."""

    axis: int
    size: int
    slot: int


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """How a list of v2 transforms is done to a batch of pictures of one size (see the module doc).

    Attributes:
        steps: the axis maps, in the transforms' order.
        draws: the random numbers a sample draws, in v2's order.
        out_size: the pictures' height and width afterwards.
        fill: the value of constant padding (None: no constant padding).
    """

    steps: tuple[_Window | _Flip, ...]
    draws: tuple[_Draw, ...]
    out_size: tuple[int, int]
    fill: int | None

    def offsets(self, raw: torch.Tensor) -> list[torch.Tensor]:
        """Each draw's value per sample from the raw 32-bit outputs ``[B, K]``: an offset
        (``x % n``) or a flip flag (``rand < p``)."""
        values = []
        for k, draw in enumerate(self.draws):
            if draw.n is not None:
                values.append(raw[:, k] % draw.n)
            else:
                unit = (raw[:, k] % _FLOAT_MODULUS).to(torch.float32) * _UNIT
                values.append(unit < draw.p)  # v2: `rand(1) >= p` keeps the picture as it is
        return values

    def __call__(self, pictures: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        """The pictures ``[B, C, H, W]`` transformed, given each sample's raw draws ``[B, K]``."""
        batch, channels, height, width = pictures.shape
        device = pictures.device
        values = self.offsets(copy_to(raw, device))
        coords = [torch.arange(n, device=device).expand(batch, n) for n in self.out_size]
        valid = [torch.ones(batch, n, dtype=torch.bool, device=device) for n in self.out_size]
        for step in reversed(self.steps):
            a = step.axis
            if isinstance(step, _Flip):
                coords[a] = torch.where(values[step.slot][:, None], step.size - 1 - coords[a], coords[a])
                continue
            offset = values[step.slot][:, None] if step.slot is not None else step.offset
            coords[a], inside = _boundary(coords[a] + offset - step.pad_before, step.size_in, step.mode)
            if inside is not None:
                valid[a] = valid[a] & inside
        source = pictures
        if self.fill is not None:  # one row and column of fill after the last: where "fill" points
            source = torch.nn.functional.pad(pictures, (0, 1, 0, 1), value=float(self.fill))
            coords = [torch.where(valid[0], coords[0], height), torch.where(valid[1], coords[1], width)]
        stride = source.shape[-1]
        linear = (coords[0][:, :, None] * stride + coords[1][:, None, :]).reshape(batch, 1, -1)
        flat = source.reshape(batch, channels, -1).gather(2, linear.expand(batch, channels, -1))
        return flat.reshape(batch, channels, *self.out_size)


def _boundary(src: torch.Tensor, size: int, mode: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Coordinates outside ``[0, size)`` brought inside as the padding mode does (one reflection:
    the plan refuses padding wider than that), and (constant) which were inside."""
    if mode == "constant":
        inside = (src >= 0) & (src < size)
        return src.clamp(0, size - 1), inside
    if mode == "edge":
        return src.clamp(0, size - 1), None
    if mode == "reflect":  # ... 2 1 | 0 1 2 ... n-1 | n-2 n-3 ...
        src = torch.where(src < 0, -src, src)
        return torch.where(src >= size, 2 * (size - 1) - src, src), None
    src = torch.where(src < 0, -src - 1, src)  # symmetric: ... 1 0 | 0 1 ... n-1 | n-1 n-2 ...
    return torch.where(src >= size, 2 * size - 1 - src, src), None


def _pads(padding: Any) -> tuple[int, int, int, int]:
    """v2's padding argument as (left, right, top, bottom)."""
    if isinstance(padding, int):
        return padding, padding, padding, padding
    values = [int(v) for v in padding]
    if len(values) == 1:
        return values[0], values[0], values[0], values[0]
    if len(values) == 2:
        return values[0], values[0], values[1], values[1]
    return values[0], values[2], values[1], values[3]


def _fill_value(fill: Any) -> int | str:
    """A scalar uint8 fill, or why the fill cannot be done batched."""
    if fill is None:
        return 0
    if isinstance(fill, (int, float)) and not isinstance(fill, bool) and float(fill).is_integer() and 0 <= fill <= 255:
        return int(fill)
    return f"fill={fill!r} (batched: one whole number 0..255)"


class _Builder:
    """Collects the axis maps and draws of one plan while following the picture's size."""

    def __init__(self, height: int, width: int):
        self.size = [height, width]
        self.steps: list[_Window | _Flip] = []
        self.draws: list[_Draw] = []
        self.fills: set[int] = set()

    def window(self, axis: int, before: int, after: int, out: int, mode: str, random: bool, offset: int = 0) -> None:
        size_in = self.size[axis]
        padded = size_in + before + after
        slot = None
        if random and padded > out:
            slot = len(self.draws)
            self.draws.append(_Draw(n=padded - out + 1))
        self.steps.append(_Window(axis, size_in, before, mode, slot, padded - out + 1, offset))
        self.size[axis] = out

    def pad_limit(self, mode: str, pads: Sequence[int]) -> str | None:
        """Why one reflection cannot give this padding (None: it can)."""
        for axis, (a, b) in enumerate(((pads[2], pads[3]), (pads[0], pads[1]))):
            limit = self.size[axis] - (1 if mode == "reflect" else 0)
            if mode in ("reflect", "symmetric") and max(a, b) > limit:
                return f"{mode} padding of {max(a, b)} pixels on a side of {self.size[axis]}"
        return None

    def pad_then_crop(self, pads: tuple[int, int, int, int], out: tuple[int, int], mode: str, fill: Any,
                      random: bool) -> str | None:  # fmt: skip
        if mode not in _MODES:
            return f"padding_mode={mode!r}"
        if mode == "constant" and any(pads):
            value = _fill_value(fill)
            if isinstance(value, str):
                return value
            self.fills.add(value)
        reason = self.pad_limit(mode, pads)
        if reason:
            return reason
        left, right, top, bottom = pads
        self.window(0, top, bottom, out[0], mode, random)
        self.window(1, left, right, out[1], mode, random)
        return None

    def add(self, transform: Any) -> str | None:
        """Follow one v2 transform; the reason it has no batched form (None: it has)."""
        kind = type(transform).__name__
        if kind == "RandomCrop":
            left, right, top, bottom = transform.padding if transform.padding is not None else (0, 0, 0, 0)
            height, width = (int(v) for v in transform.size)
            if transform.pad_if_needed:  # as v2: the missing size on both sides
                if self.size[0] + top + bottom < height:
                    diff = height - (self.size[0] + top + bottom)
                    top, bottom = top + diff, bottom + diff
                if self.size[1] + left + right < width:
                    diff = width - (self.size[1] + left + right)
                    left, right = left + diff, right + diff
            if self.size[0] + top + bottom < height or self.size[1] + left + right < width:
                return f"a {height}×{width} crop of a smaller picture (v2 refuses it)"
            return self.pad_then_crop((left, right, top, bottom), (height, width), transform.padding_mode,
                                      transform.fill, random=True)  # fmt: skip
        if kind == "Pad":
            pads = _pads(transform.padding)
            out = (self.size[0] + pads[2] + pads[3], self.size[1] + pads[0] + pads[1])
            return self.pad_then_crop(pads, out, transform.padding_mode, transform.fill, random=False)
        if kind == "CenterCrop":
            return self.center_crop(*(int(v) for v in transform.size))
        if kind in ("RandomHorizontalFlip", "RandomVerticalFlip"):
            axis = 1 if kind == "RandomHorizontalFlip" else 0
            self.steps.append(_Flip(axis, self.size[axis], len(self.draws)))
            self.draws.append(_Draw(p=float(transform.p)))
            return None
        return "no batched form"

    def center_crop(self, height: int, width: int) -> str | None:
        """v2's center crop: zero padding to the crop's size first where the picture is smaller."""
        for axis, out in ((0, height), (1, width)):
            size = self.size[axis]
            before, after = ((out - size) // 2, (out - size + 1) // 2) if out > size else (0, 0)
            if before or after:
                self.fills.add(0)
            padded = size + before + after
            offset = int(round((padded - out) / 2.0))
            self.window(axis, before, after, out, "constant", random=False, offset=offset)
        return None


def batch_plan(transforms: Sequence[Any], height: int, width: int) -> BatchPlan | str:
    """The batched form of v2 ``transforms`` for pictures of ``height × width``, or the reason
    (naming the transform) there is none."""
    builder = _Builder(height, width)
    for transform in transforms:
        reason = builder.add(transform)
        if reason is not None:
            return f"{type(transform).__name__}: {reason}"
    if len(builder.fills) > 1:
        return f"constant padding with different fills ({sorted(builder.fills)})"
    fill = next(iter(builder.fills)) if builder.fills else None
    return BatchPlan(tuple(builder.steps), tuple(builder.draws), (builder.size[0], builder.size[1]), fill)


def draw_passes(plan: BatchPlan) -> list[tuple[int, list[int]]]:
    """How to read a sample's draws in few calls: ``(modulus, slots)`` pairs. One call
    ``randint(0, modulus, (K,))`` after seeding reads every draw as ``x % modulus``, from which a
    slot's value follows (``% n`` where ``n`` divides the modulus; the flips' modulus is 2**24)."""
    spans = sorted({d.n for d in plan.draws if d.n is not None})
    modulus = math.lcm(*spans) if spans else 1
    groups = [(modulus, [k for k, d in enumerate(plan.draws) if d.n is not None])] if spans else []
    if modulus >= _ONE_OUTPUT:  # never for crops of pictures, but then one pass per span
        groups = [(n, [k for k, d in enumerate(plan.draws) if d.n == n]) for n in spans]
    flips = [k for k, d in enumerate(plan.draws) if d.p is not None]
    if flips:
        groups.append((_FLOAT_MODULUS, flips))
    return groups


def raw_draws(plan: BatchPlan, seeds: Sequence[int], *, keep_states: bool = False
              ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:  # fmt: skip
    """Each sample's draws ``[B, K]`` (as :meth:`BatchPlan.offsets` reads them) from a CPU generator
    seeded with the sample's seed, as v2's calls would draw them; with ``keep_states``, also each
    generator's state afterwards (where v2's draws would have left torch's generator)."""
    count = len(plan.draws)
    if not keep_states and draws_at_once(plan):
        # every draw reads one output of the freshly seeded generator: the seeding recurrence for the whole
        # batch at once gives them (``x``; ``offsets`` takes ``x % n`` and ``x % 2**24`` as the passes would)
        return torch.from_numpy(mersenne.first_outputs(seeds, count).astype("int64")), None
    raw = torch.zeros(len(seeds), count, dtype=torch.int64)
    generator = torch.Generator()
    states: list[torch.Tensor] | None = [] if keep_states else None
    if not _fast_draws_agree():
        for i, seed in enumerate(seeds):
            generator.manual_seed(seed)
            if count:
                raw[i] = torch.tensor([_exact(draw, generator) for draw in plan.draws])
            if states is not None:
                states.append(generator.get_state())
        return raw, states
    passes = draw_passes(plan)
    drawn = [torch.empty(len(seeds), count, dtype=torch.int64) for _ in passes]
    rows = [d.unbind(0) for d in drawn]  # views made once: a sample's draws go straight into its row
    moduli = [modulus for modulus, _ in passes]
    for i, seed in enumerate(seeds):
        for modulus, row in zip(moduli, rows, strict=True):
            generator.manual_seed(seed)
            row[i].random_(0, modulus, generator=generator)
        if states is not None:
            if not passes:
                generator.manual_seed(seed)
            states.append(generator.get_state())
    for (_, slots), values in zip(passes, drawn, strict=True):
        raw[:, slots] = values[:, slots]
    return raw, states


def draws_at_once(plan: BatchPlan) -> bool:
    """Whether each of the plan's draws is one output of the freshly seeded generator, so that many
    samples' draws can be computed at once (:mod:`.mersenne`) instead of seeding a generator per sample."""
    one_output = all(d.n is None or d.n < _ONE_OUTPUT for d in plan.draws)
    return one_output and _fast_draws_agree() and mersenne.agrees_with_torch()


def _exact(draw: _Draw, generator: torch.Generator) -> int:
    """One draw made as v2 makes it, as the value :meth:`BatchPlan.offsets` reads."""
    if draw.n is not None:
        return int(torch.randint(0, draw.n, (), generator=generator))
    return round(float(torch.rand(1, generator=generator)) / _UNIT)


@functools.cache
def _fast_draws_agree() -> bool:
    """Whether this torch's generator turns one 32-bit output into ``randint(0, n)`` and
    ``rand(1)`` as :func:`raw_draws` assumes (checked once against the calls themselves; where
    not, every draw is made call by call — slower, the same pictures)."""
    plan = BatchPlan((), (_Draw(n=9), _Draw(p=0.5), _Draw(n=5), _Draw(n=7), _Draw(p=0.25)), (1, 1), None)
    generator = torch.Generator()
    for seed in (0, 1, 2**31 + 5, 2**62 + 12345):
        generator.manual_seed(seed)
        exact = [_exact(draw, generator) for draw in plan.draws]
        fast = torch.zeros(len(plan.draws), dtype=torch.int64)
        row = torch.empty(len(plan.draws), dtype=torch.int64)
        for modulus, slots in draw_passes(plan):
            generator.manual_seed(seed)
            row.random_(0, modulus, generator=generator)
            fast[slots] = row[slots]
        values = plan.offsets(fast[None])
        expected = plan.offsets(torch.tensor([exact]))
        if not all(torch.equal(a, b) for a, b in zip(values, expected, strict=True)):
            log.warning("this torch draws random integers differently from what modforge's batched augmentation "
                        "expects: its draws are made one call at a time (the same pictures, slower)")  # fmt: skip
            return False
    return True
