"""Config-taking commands: ``CONFIG [key=value ...] [--backbone NAME --width 32 ...]``.

Parsing happens in two phases, because a part's flags exist only once it is known
which part is chosen (Mammoth style)::

    modforge train cfg.yaml --backbone resnet18 --width 32 model.head.args.bias=false

1. The fixed options are parsed leniently to find the config file, ``--plugins``,
   the overrides and the part choices (``--backbone``...).  Plug-ins are imported, the
   config is loaded, overrides and choices applied.
2. A full parser is built: the fixed options plus, for every chosen part, one flag per
   user argument (``--width``, and always the qualified ``--backbone.width``).  The
   command line is parsed again, strictly; unknown flags are errors with suggestions.

Flag values are coerced with the part's declared types and written into the config at
``<slot>.args.<name>``, so the config that is printed or saved is the whole truth.

Every config-taking command (``config``, ``train``, ``kfold``, ``test CONFIG``) parses the
same way and has the same shortcuts (``--epochs``, ``--lr``, ``--batch-size``:
:mod:`.run_options`). Choosing another part by flag follows the same rule as an override
that changes a type (:mod:`modforge.core.retype`). A run folder's ``config.yaml`` as CONFIG
is read like ``test`` reads the run: its plug-ins come from the run's verified copies.

Conflicts: a part argument whose flag already exists outside the part (``--seed``,
``--plugins``, ``--lr``) never replaces that flag — the outer flag wins, and when the user
passes it a warning says how to set the part's argument instead. Two chosen parts with
an argument of the same name get only their qualified flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.arguments import REQUIRED, ArgSpec
from ..core.coercion import coerce_cli, to_plain
from ..core.config import Config, load_config
from ..core.errors import ConfigError, UsageError
from ..core.origins import CommandLineOrigin
from ..core.plugins import load_config_plugins, load_plugins
from ..core.registries import REGISTRIES
from ..core.retype import TypeSwitchNote, collect_notes, switch_type
from ..core.specs import normalize_spec
from ..experiment.schema import PART_SLOTS, PartSlot, apply_overrides, validate_config
from .common import CommandParser, add_plugins_option, load_cli_plugins
from .run_options import add_run_options, apply_run_options

__all__ = ["ResolvedConfig", "add_config_arguments", "resolve_config_from_cli"]

log = logging.getLogger("modforge.cli")
_PREFIX = "part__"
_MAX_PASSES = 3


@dataclasses.dataclass(frozen=True)
class StoredConfig:
    """CONFIG is one modforge saved (a run being resumed): data, not a file the user vouches for.

    Attributes:
        run_dir: the run folder whose verified plug-in copies may be imported (``None``: none).
        what: how messages name it (``the config of runs/x``).
    """

    run_dir: Path | None
    what: str


def run_folder_config(config: str | None) -> StoredConfig | None:
    """CONFIG is a run folder's ``config.yaml`` (``modforge config runs/x/config.yaml
    data.type=...``): a config modforge saved, read as ``test`` and ``--resume`` read it — its
    plug-ins come from the run's verified copies (or ``--plugins``), not from beside it."""
    if not config:
        return None
    path = Path(config)
    run_dir = path.parent
    if path.name != "config.yaml" or not path.is_file():
        return None
    if not ((run_dir / "checkpoints").is_dir() or (run_dir / "plugins" / "manifest.json").is_file()):
        return None
    from ..core.config import display_path

    return StoredConfig(run_dir, f"the config of {display_path(run_dir)}")


@dataclasses.dataclass
class ResolvedConfig:
    """The outcome of parsing a config-taking command line.

    Attributes:
        config: loaded, overridden, flag-applied and validated.
        args: the command's fixed options (``config``, ``overrides``, ``plugins``...).
        plugins: every plug-in in force (config's and ``--plugins``).
    """

    config: Config
    args: argparse.Namespace
    plugins: list[str]


@dataclasses.dataclass(frozen=True)
class _PartFlag:
    slot: PartSlot
    arg: ArgSpec


def add_config_arguments(parser: argparse.ArgumentParser, slots: Sequence[PartSlot] = PART_SLOTS) -> None:
    """The fixed options every config-taking command has."""
    parser.add_argument("config", metavar="CONFIG", help="YAML config file")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY.PATH=VALUE",
        help="set one config value, read as YAML (e.g. train.max_epochs=5)",
    )
    add_plugins_option(parser)
    parser.add_argument("--seed", type=int, help="random seed (sets the config's 'seed')")
    parser.add_argument(
        "--print-config", action="store_true", help="print the fully resolved config as YAML and exit without running"
    )
    for slot in slots:
        if slot.flag:
            parser.add_argument(
                f"--{slot.flag}",
                metavar="NAME",
                help=f"choose the {slot.kind} by name (sets {slot.path}); its arguments become flags",
            )


def _make_parser(
    name: str, description: str, add_fixed: Callable[[argparse.ArgumentParser], None], add_help: bool
) -> CommandParser:
    parser = CommandParser(name, description=description, add_help=add_help)
    add_fixed(parser)
    return parser


def _selections(ns: argparse.Namespace, slots: Sequence[PartSlot]) -> dict[str, str]:
    return {s.flag: getattr(ns, s.flag) for s in slots if s.flag and getattr(ns, s.flag, None) is not None}


def _key(ns: argparse.Namespace, slots: Sequence[PartSlot]) -> tuple:
    return (
        ns.config,
        tuple(ns.overrides or ()),
        tuple(ns.plugins or ()),
        tuple(sorted(_selections(ns, slots).items())),
    )


def _load(
    ns: argparse.Namespace, slots: Sequence[PartSlot], strict: bool, stored: StoredConfig | None = None
) -> tuple[Config, list[str]]:
    """Load plug-ins and config; apply overrides and part choices. A ``stored`` config (a run's
    own, when resuming) vouches for no plug-in beside it."""
    cli_plugins = load_cli_plugins(list(ns.plugins or ()))
    overrides = list(ns.overrides or ())
    if not strict:  # phase 1 may mistake a flag's value for an override
        overrides = [o for o in overrides if "=" in o]
    stored = stored or run_folder_config(ns.config)
    cfg = load_config(ns.config, stored=stored is not None)
    if stored is not None:
        from ..experiment.run_plugins import load_stored_plugins

        in_force = load_stored_plugins(cfg.plugins, run_dir=stored.run_dir, what=stored.what)
        if in_force != cfg.plugins:
            cfg.data["plugins"] = in_force
    load_config_plugins(cfg.plugins, sources=cfg.plugin_sources, origin=f"plugins: in {cfg.where('plugins')}")
    listed = set(cfg.plugins)
    apply_overrides(cfg, overrides, slots)
    typed = [p for p in cfg.plugins if p not in listed]  # plugins=... on the command line: the user's own
    load_plugins(typed, origin="a plugins= override")
    if cli_plugins:
        merged = cfg.plugins + [p for p in cli_plugins if p not in cfg.plugins]
        cfg.set("plugins", merged, CommandLineOrigin("--plugins"))
    for slot in slots:
        if not slot.many and cfg.get(slot.path, None) is not None:
            spec = normalize_spec(
                cfg.get(slot.path), path=slot.path, kind=slot.kind, extras=slot.extras, origin_of=cfg.where
            )
            _replace(cfg, slot.path, spec)
    for flag, name in _selections(ns, slots).items():
        _choose(cfg, next(s for s in slots if s.flag == flag), name)
    return cfg, cli_plugins


def _replace(cfg: Config, path: str, value: Any) -> None:
    parent_path, _, key = path.rpartition(".")
    parent = cfg.get(parent_path) if parent_path else cfg.data
    parent[key] = value


def _choose(cfg: Config, slot: PartSlot, name: str) -> None:
    """``--backbone NAME``: switch the part, keeping the config's arguments the new one
    accepts (the same rule, and warning, as ``model.backbone=NAME``: :mod:`~modforge.core.retype`)."""
    registry = REGISTRIES[slot.kind]
    registry.resolve(  # an unknown name is an error naming the flag
        name, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir), path=f"--{slot.flag}", source="command line"
    )
    switch_type(cfg, slot.path, name, CommandLineOrigin(f"flag --{slot.flag} {name}"), shown=f"--{slot.flag} {name}")


def _default_text(arg: ArgSpec) -> str:
    return "required" if arg.default is REQUIRED else f"default: {arg.default!r}"


def _add_part_flags(
    parser: argparse.ArgumentParser, cfg: Config, slots: Sequence[PartSlot]
) -> tuple[dict[str, _PartFlag], dict[str, str]]:
    """One flag per user argument of every chosen part.

    Returns dest → flag info, and for each command option that hides a part argument of the
    same name (``--seed``), the warning to give if the user passes that option."""
    chosen: list[tuple[PartSlot, str, list[ArgSpec]]] = []
    for slot in slots:
        spec = cfg.get(slot.path, None)
        if slot.many or not slot.flag or not isinstance(spec, dict):
            continue
        registry = REGISTRIES[slot.kind]
        _obj, sig = registry.resolve(
            spec["type"],
            allowed_modules=cfg.plugins,
            base_dir=str(cfg.base_dir),
            path=f"{slot.path}.type",
            source=cfg.where(f"{slot.path}.type"),
        )
        chosen.append((slot, spec["type"], sig.user_args))
    owners: dict[str, list[str]] = {}
    for slot, _name, args in chosen:
        for arg in args:
            owners.setdefault(arg.name, []).append(slot.flag)
    taken = set(parser._option_string_actions)  # noqa: SLF001 - argparse has no public accessor
    flags: dict[str, _PartFlag] = {}
    shadowed: dict[str, str] = {}
    for slot, name, args in chosen:
        group = parser.add_argument_group(f"{slot.kind} '{name}' arguments (--{slot.flag}.ARG always works)")
        for arg in args:
            dest = f"{_PREFIX}{slot.flag}__{arg.name}"
            flags[dest] = _PartFlag(slot, arg)
            dashed, plain = arg.name.replace("_", "-"), arg.name
            strings = [f"--{slot.flag}.{dashed}"] + ([f"--{slot.flag}.{plain}"] if plain != dashed else [])
            bare = [f"--{dashed}"] + ([f"--{plain}"] if plain != dashed else [])
            if len(owners[arg.name]) > 1:
                log.debug(
                    "--%s is taken by several parts (%s); use the qualified flags", dashed, ", ".join(owners[arg.name])
                )
            elif any(s in taken for s in bare):
                for flag in (s for s in bare if s in taken):
                    shadowed[flag] = (
                        f"{flag} is the command's own option, not the {slot.kind} '{name}' argument '{arg.name}'; "
                        f"set that with {slot.path}.args.{arg.name}=VALUE or --{slot.flag}.{dashed}"
                    )
            else:
                strings = bare + strings
            strings = [s for s in strings if s not in taken]
            taken.update(strings)
            _add_flag(group, strings, dest, arg, taken)
    return flags, shadowed


def _given(flag: str, argv: Sequence[str]) -> bool:
    """Whether ``flag`` is on the command line (``--seed 3`` or ``--seed=3``)."""
    return any(token == flag or token.startswith(flag + "=") for token in argv)


class _Record(argparse.Action):
    """Append ``(option string, value)`` so errors can name the flag as typed."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ARG002
        items = list(getattr(namespace, self.dest, None) or [])
        value = self.const if values is None or self.nargs == 0 else values
        items.append((option_string, value))
        setattr(namespace, self.dest, items)


def _add_flag(group: Any, strings: list[str], dest: str, arg: ArgSpec, taken: set[str]) -> None:
    help_text = (arg.help + " " if arg.help else "") + f"[{arg.type_name}; {_default_text(arg)}]"
    help_text = help_text.replace("%", "%%")
    if arg.type is bool:
        group.add_argument(
            *strings,
            dest=dest,
            action=_Record,
            nargs="?",
            const="true",
            default=argparse.SUPPRESS,
            metavar="BOOL",
            help=help_text,
        )
        negatives = [s.replace("--", "--no-", 1) if "." not in s else None for s in strings]
        negatives = [n for n in negatives if n and n not in taken]
        taken.update(negatives)
        if negatives:
            group.add_argument(
                *negatives,
                dest=dest,
                action=_Record,
                nargs=0,
                const="false",
                default=argparse.SUPPRESS,
                help=f"set {arg.name} to false",
            )
        return
    group.add_argument(*strings, dest=dest, action=_Record, default=argparse.SUPPRESS, metavar="VALUE", help=help_text)


def _apply_part_flags(cfg: Config, ns: argparse.Namespace, flags: dict[str, _PartFlag]) -> None:
    for dest, flag in flags.items():
        if not hasattr(ns, dest):
            continue
        recorded = getattr(ns, dest)
        shown = recorded[-1][0]
        raw = [value for _option, value in recorded]
        try:
            value = coerce_cli(raw if len(raw) > 1 else raw[0], flag.arg.type)
        except ConfigError as exc:
            raise exc.located(path=shown) from None
        cfg.set(f"{flag.slot.path}.args.{flag.arg.name}", to_plain(value), CommandLineOrigin(f"flag {shown}"))


def _lenient_parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Phase 1: the fixed options, ignoring part flags not yet known.

    With a part flag before the config (``--width 8 cfg.yaml``) argparse takes ``8`` for
    the config; the first YAML file or existing file among the positional-looking
    tokens is then the config. The strict second phase confirms or corrects it.
    """
    ns, _ = parser.parse_known_args(argv)
    if ns.config is not None and not Path(ns.config).is_file():
        for token in argv:
            if (
                not token.startswith("-")
                and "=" not in token
                and (token.endswith((".yaml", ".yml")) or Path(token).is_file())
            ):
                ns.config = token
                break
    return ns


def _help_requested(argv: Sequence[str]) -> bool:
    return any(a in ("-h", "--help") for a in argv)


def resolve_config_from_cli(
    name: str,
    argv: Sequence[str],
    *,
    description: str = "",
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    slots: Sequence[PartSlot] = PART_SLOTS,
    stored: StoredConfig | None = None,
) -> ResolvedConfig:
    """Parse a config-taking command line and return the validated config.

    Args:
        name: the sub-command (for ``prog`` and messages).
        argv: the sub-command's arguments.
        description: help text of the command.
        add_arguments: adds the command's own options (beyond :func:`add_config_arguments`).
        slots: the part slots that may be chosen by flag.
        stored: CONFIG is a config modforge saved (``--resume``): data that vouches for no
            plug-in; the run folder's verified copies and ``--plugins`` provide them.

    Raises:
        SystemExit: after printing ``--help`` (status 0).
        ConfigError / CliUsageError: any problem, as one clear message.
    """
    argv = list(argv)

    def add_fixed(parser: argparse.ArgumentParser) -> None:
        add_config_arguments(parser, slots)
        if add_arguments is not None:
            add_arguments(parser)
        add_run_options(parser)  # --epochs/--lr/--batch-size: the same on every config-taking command

    lenient = _make_parser(name, description, add_fixed, add_help=False)
    if _help_requested(argv):
        try:  # with a loadable config, --help lists the chosen parts' flags too
            ns = _lenient_parse(lenient, argv)
            with collect_notes():
                _load(ns, slots, strict=False, stored=stored)
        except UsageError:
            _make_parser(name, description, add_fixed, add_help=True).parse_args(["--help"])
    ns = _lenient_parse(lenient, argv)
    strict = False
    for _ in range(_MAX_PASSES):
        with collect_notes() as notes:  # reported once, from the last pass
            cfg, cli_plugins = _load(ns, slots, strict=strict, stored=stored)
        parser = _make_parser(name, description, add_fixed, add_help=True)
        flags, shadowed = _add_part_flags(parser, cfg, slots)
        full = parser.parse_intermixed_args(argv)
        if strict and _key(full, slots) == _key(ns, slots):
            break
        strict = True
        ns = full
    notes += [note for flag, note in shadowed.items() if _given(flag, argv)]
    _apply_part_flags(cfg, full, flags)
    if full.seed is not None:
        cfg.set("seed", full.seed, CommandLineOrigin("flag --seed"))
    apply_run_options(cfg, full)
    for note in dict.fromkeys(notes):  # once the whole command line is applied: what it replaced was not kept
        text = note.now(cfg) if isinstance(note, TypeSwitchNote) else note
        if text:
            log.warning(text)
    validate_config(cfg, allowed_modules=cli_plugins)
    return ResolvedConfig(cfg, full, cfg.plugins)
