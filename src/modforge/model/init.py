"""``model.init``: start a model from weights written elsewhere.

::

    model:
      backbone: aasist
      head: linear
      init:                               # one mapping, or a list of them (applied in order)
        path: ../weights/AASIST.pth       # a file or folder; relative to this config file
        format: auto                      # a registered checkpoint format, or auto (recognised)
        strict: true                      # every key accounted for, or one error listing all
        exclude: ["parts.head.*"]         # modforge key patterns left as initialised
        part: backbone                    # only this stage's keys (e.g. fine-tune a new head)
        map_location: cpu
        sha256: 51d2d9cf…                 # optional pin: refuse any other file

A pinned ``sha256`` is compared with the file's bytes *before* anything parses them (a file
that is not the pinned one is never unpickled, not even by ``weights_only``). The file is then
read with ``torch.load(weights_only=True)`` after its checksums are verified, its
keys are converted by the format (:mod:`modforge.core.weight_formats`), and compared with
the model's: keys the model lacks, keys the file lacks and shapes that differ are all
reported at once — an error when ``strict`` (the default), a warning listing them when not.
Nothing is renamed by guesswork. A missing ``num_batches_tracked`` buffer (files from
PyTorch before 0.4.1) is not a missing weight: batch norm uses it only without momentum.
Nor is a loss's state (class-weight buffers, a one-class centre) missing from a file that
holds no loss at all — published weights are a network's; the config's losses start fresh.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch.nn as nn

from ..core.config import check_keys, display_path
from ..core.errors import ConfigError, ConfigValueError
from ..core.integrity import file_sha256
from ..core.references import follow_reference
from ..core.registries import CHECKPOINT_FORMATS
from ..core.weight_formats import CheckpointFormat, WeightFormatError

__all__ = ["INIT_KEYS", "InitSpec", "ModelInitError", "apply_init", "parse_init"]

log = logging.getLogger("modforge.model")
INIT_KEYS = ("path", "format", "strict", "exclude", "part", "map_location", "sha256")
_SHOWN = 12  # keys listed per problem in a message


class ModelInitError(ConfigError):
    """Weights that cannot be loaded as ``model.init`` says (located at the init entry)."""


@dataclasses.dataclass
class InitSpec:
    """One ``model.init`` entry, checked and with its path resolved."""

    path: Path
    format: Any = "auto"
    strict: bool = True
    exclude: tuple[str, ...] = ()
    part: str | None = None
    map_location: str = "cpu"
    sha256: str | None = None
    where: str = "model.init"
    source: str | None = None


def parse_init(
    value: Any, *, origin_of: Callable[[str], str | None] | None = None, base_dir: str | Path | None = None
) -> list[InitSpec]:
    """The ``model.init`` entries of a config, checked (keys, types, the file exists, the
    format is registered). A relative path is resolved against the config file's folder, or
    the current directory when it was given on the command line.

    Raises:
        ConfigError: naming the key path and the file it came from.
    """
    where = origin_of or (lambda _p: None)
    entries = value if isinstance(value, list) else [value]
    specs = []
    for i, entry in enumerate(entries):
        at = "model.init" if not isinstance(value, list) else f"model.init.{i}"
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, Mapping):
            raise ConfigValueError(f"expected a mapping with at least 'path', got {entry!r}", path=at, source=where(at))
        check_keys(entry, INIT_KEYS, path=at, what="init key", origin_of=where)
        specs.append(_spec(dict(entry), at, where, base_dir))
    return specs


def _where_to_get(fmt: Any) -> str:
    """`` (published at …)`` when the named format says where its files come from, else nothing."""
    name = fmt.get("type") if isinstance(fmt, dict) else fmt
    if not isinstance(name, str) or name not in CHECKPOINT_FORMATS:
        return ""
    published = getattr(CHECKPOINT_FORMATS.get(name), "published", None)
    return f" (format {name} reads {published})" if published else ""


def _spec(entry: dict[str, Any], at: str, where: Callable[[str], str | None], base_dir: Any) -> InitSpec:
    def bad(key: str, expected: str) -> ConfigValueError:
        return ConfigValueError(f"expected {expected}, got {entry.get(key)!r}", path=f"{at}.{key}",
                                source=where(f"{at}.{key}"))  # fmt: skip

    raw = entry.get("path")
    if not isinstance(raw, str) or not raw.strip():
        raise bad("path", "the path of a weights file or folder")
    # weights are read as data whoever names them (weights_only, no plug-ins): the rule decides the folder
    path = follow_reference("model.init.path", raw, origin=where(f"{at}.path"), said_in=Path(base_dir) if base_dir
                            else None, stored=False, vouch_root=None).path.resolve()  # fmt: skip
    if not path.exists():
        raise ModelInitError(f"weights not found: {display_path(path)}{_where_to_get(entry.get('format'))}; give "
                             f"another file with {at}.path=PATH", path=f"{at}.path", source=where(f"{at}.path"))  # fmt: skip
    if not isinstance(entry.get("strict", True), bool):
        raise bad("strict", "true or false")
    exclude = entry.get("exclude") or []
    if isinstance(exclude, str):
        exclude = [exclude]
    if not isinstance(exclude, list) or not all(isinstance(p, str) for p in exclude):
        raise bad("exclude", "a list of key patterns")
    for key in ("part", "map_location", "sha256"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise bad(key, "a string")
    if entry.get("map_location") is not None:
        _check_device(entry["map_location"], bad)
    fmt = entry.get("format", "auto")
    if fmt != "auto":
        fmt = CHECKPOINT_FORMATS.validate(fmt, path=f"{at}.format", origin_of=where)
    return InitSpec(path, fmt, entry.get("strict", True), tuple(exclude), entry.get("part"),
                    entry.get("map_location") or "cpu", entry.get("sha256"), at, where(at))  # fmt: skip


def _check_device(name: str, bad: Callable[[str, str], ConfigValueError]) -> None:
    """``map_location`` must name a device this machine has (torch.load fails obscurely otherwise)."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise bad("map_location", "a device such as cpu or cuda:0") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise bad("map_location", "a device this machine has (no CUDA here; cpu)")


# ----------------------------------------------------------------- loading
def _fail(spec: InitSpec, message: str, key: str = "") -> ModelInitError:
    at = f"{spec.where}.{key}" if key else spec.where
    return ModelInitError(message, path=at, source=spec.source)


class _Pin:
    """The digests of the files an init entry reads, and whether they match its ``sha256`` pin —
    computed from the bytes before any format parses them."""

    def __init__(self, spec: InitSpec):
        self.spec = spec
        self.digests: dict[Path, str] = {}

    def digest(self, file: Path) -> str:
        if file not in self.digests:
            try:
                self.digests[file] = file_sha256(file)
            except OSError as exc:
                raise _fail(self.spec, f"cannot read {display_path(file)} to check its SHA-256 "
                                       f"({exc.strerror or exc})", "path") from None  # fmt: skip
        return self.digests[file]

    def matches(self, file: Path) -> bool:
        """True when nothing is pinned or ``file``'s bytes are the pinned ones."""
        return not self.spec.sha256 or self.digest(file) == self.spec.sha256.strip().lower()

    def refusal(self, file: Path) -> ModelInitError:
        return _fail(self.spec, f"{display_path(file)} has SHA-256 {self.digest(file)}, not the {self.spec.sha256} "
                                "the config pins (nothing in it was read)", "sha256")  # fmt: skip


_UNREADABLE = object()


def _format(spec: InitSpec, pin: _Pin) -> tuple[str, CheckpointFormat, Any, Path]:
    """(name, format, loaded content, file read) for ``spec``; ``auto`` asks every format. A file
    that does not match the ``sha256`` pin is never read."""
    if spec.format != "auto":
        name = spec.format["type"]
        fmt = CHECKPOINT_FORMATS.build(spec.format, path=f"{spec.where}.format")
        file = fmt.locate(spec.path)
        if not pin.matches(file):
            raise pin.refusal(file)
        return name, fmt, fmt.read(file, spec.map_location), file
    candidates = []
    for name in CHECKPOINT_FORMATS.list():
        cls = CHECKPOINT_FORMATS.get(name)
        if spec.path.is_dir() and not cls.recognises_folder(spec.path):
            continue
        candidates.append((name, cls))
    loaded_by: dict[tuple[Path, Any], Any] = {}  # by file and reader: formats read differently (fairseq's configs)
    unreadable: list[WeightFormatError] = []
    recognised = []
    unpinned: list[Path] = []
    for name, cls in candidates:
        fmt = cls()
        file = fmt.locate(spec.path)
        if not pin.matches(file):  # in a folder, another format's file may be the pinned one
            unpinned.append(file)
            continue
        key = (file, cls.read)
        if key not in loaded_by:
            try:
                loaded_by[key] = fmt.read(file, spec.map_location)
            except WeightFormatError as exc:  # not this reader's kind of file; another may read it
                unreadable.append(exc)
                loaded_by[key] = _UNREADABLE
        if loaded_by[key] is not _UNREADABLE and cls.recognises(loaded_by[key], file):
            recognised.append((name, fmt, loaded_by[key], file))
    if len(recognised) == 1:
        return recognised[0]
    if unpinned and not loaded_by:
        raise pin.refusal(unpinned[0])
    if not recognised and unreadable and all(v is _UNREADABLE for v in loaded_by.values()):
        raise unreadable[0]  # no reader could take it: the first reader's reason (a refused pickle…)
    named = ", ".join(n for n, *_ in recognised) or "none"
    raise _fail(spec, f"format: auto cannot tell what {display_path(spec.path)} is (recognised by: {named}); name it "
                      f"with format: one of {', '.join(CHECKPOINT_FORMATS.list())} (a plain state dict: format: "
                      "{type: state_dict, args: {key_map: {old.prefix.: new.prefix.}}})", "format")  # fmt: skip


def _listed(keys: list[str], shapes: Callable[[str], str] | None = None) -> str:
    shown = [f"{k} {shapes(k)}" if shapes else k for k in sorted(keys)[:_SHOWN]]
    more = f" … and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return ", ".join(shown) + more


def apply_init(model: nn.Module, specs: list[InitSpec]) -> list[dict[str, Any]]:
    """Load each entry's weights into ``model`` (in order); return what was loaded, for the
    run's record: ``[{path, format, sha256, loaded, part}]``.

    Raises:
        ModelInitError: unreadable file, unknown format, a digest that differs from ``sha256``,
            or (``strict``) any missing, unexpected or mis-shaped key — every one listed.
    """
    return [_load_one(model, spec) for spec in specs]


def _selected(spec: InitSpec, target: dict[str, Any], converted: dict[str, Any]) -> tuple[dict, dict]:
    """The model's and the file's keys that ``part`` and ``exclude`` leave in play."""
    if spec.part is not None:
        stages = sorted({k.split(".")[1] for k in target if k.startswith("parts.")})
        if spec.part not in stages:
            raise _fail(spec, f"the model has no stage '{spec.part}' (stages: {', '.join(stages)})", "part")
        prefix = f"parts.{spec.part}."
        target = {k: v for k, v in target.items() if k.startswith(prefix)}
        converted = {k: v for k, v in converted.items() if k.startswith(prefix)}

    def kept(key: str) -> bool:
        return not any(fnmatch.fnmatchcase(key, pattern) for pattern in spec.exclude)

    return {k: v for k, v in target.items() if kept(k)}, {k: v for k, v in converted.items() if kept(k)}


_LOSS_PREFIX = "loss_fns."


def _needed(key: str, file_has_losses: bool) -> bool:
    """Whether a model key must come from the file. Not ``num_batches_tracked`` (see the
    module's docstring), and not the losses' state (class weights, centres) when the file holds
    no loss at all: published weights are a network's, and the config's losses start fresh."""
    if key.endswith("num_batches_tracked"):
        return False
    return file_has_losses or not key.startswith(_LOSS_PREFIX)


def _problems(target: dict[str, Any], converted: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(one text per kind of misfit, the keys whose shapes differ)."""
    file_has_losses = any(k.startswith(_LOSS_PREFIX) for k in converted)
    missing = [k for k in target if k not in converted and _needed(k, file_has_losses)]
    unexpected = [k for k in converted if k not in target]
    mismatched = [k for k in converted if k in target and tuple(converted[k].shape) != tuple(target[k].shape)]
    problems = []
    if missing:
        problems.append(f"{len(missing)} model keys not in the file: {_listed(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} file keys the model does not have: {_listed(unexpected)}")
    if mismatched:

        def shapes(key: str) -> str:
            return f"(file {list(converted[key].shape)}, model {list(target[key].shape)})"

        problems.append(f"{len(mismatched)} shapes differ: {_listed(mismatched, shapes)}")
    return problems, mismatched


def _load_one(model: nn.Module, spec: InitSpec) -> dict[str, Any]:
    pin = _Pin(spec)
    try:
        name, fmt, loaded, file = _format(spec, pin)
        converted = fmt.convert(loaded, file)
        fmt.check_model(model, loaded, file)
    except WeightFormatError as exc:
        raise _fail(spec, str(exc), "path") from None
    digest = pin.digest(file)
    target, converted = _selected(spec, model.state_dict(), converted)
    problems, mismatched = _problems(target, converted)
    usable = {k: v for k, v in converted.items() if k in target and k not in mismatched}
    if problems:
        text = f"{display_path(file)} (format {name}) does not fit the model: " + "; ".join(problems)
        if spec.strict:
            raise _fail(spec, text + " (exclude: [patterns] skips keys; strict: false loads what fits)")
        log.warning("%s; loading the %d keys that fit (strict: false)", text, len(usable))
    model.load_state_dict(usable, strict=False)
    log.info("model.init: %d tensors from %s (format %s)", len(usable), display_path(file), name)
    return {"path": str(file), "format": name, "sha256": digest, "loaded": len(usable),
            **({"part": spec.part} if spec.part else {})}  # fmt: skip
