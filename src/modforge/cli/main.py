"""``modforge`` entry point: dispatch to a sub-command and map errors to exit statuses.

Exit statuses: 0 success; 2 bad usage, config or input (one clear line on stderr);
1 any other failure (one line too, and the traceback with ``--debug`` — accepted anywhere
on the command line — or ``MODFORGE_DEBUG=1``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence

from .._version import __version__
from ..core.errors import ModforgeError, UsageError, _one_line

__all__ = ["main", "COMMANDS"]

COMMANDS: dict[str, str] = {
    "list": "modforge.cli.commands.list_parts",
    "describe": "modforge.cli.commands.describe_part",
    "config": "modforge.cli.commands.show_config",
    "check": "modforge.cli.commands.check_part",
    "train": "modforge.cli.commands.train_run",
    "test": "modforge.cli.commands.test_run",
    "kfold": "modforge.cli.commands.kfold_run",
    "export": "modforge.cli.commands.export_run",
    "profile": "modforge.cli.commands.profile_model",
    "predict": "modforge.cli.commands.predict_files",
    "score": "modforge.cli.commands.score_files",
    "data": "modforge.cli.commands.data_tools",
    "sweep": "modforge.cli.commands.sweep_run",
    "sweep-report": "modforge.cli.commands.sweep_report",
}
"""Sub-command name → module defining ``HELP`` and ``run(argv)``; imported on use."""

_HELPS: dict[str, str] = {
    "list": "list registered parts (all kinds, or one kind), optionally filtered by a wildcard",
    "describe": "show one part's arguments, types, defaults, help and where it is defined",
    "config": "resolve a config (_base_, overrides, part flags), validate it and print it",
    "check": "run the conformance checks on a part (registered or module:Object)",
    "train": "train a model from a config; writes a run folder (resume with --resume)",
    "test": "evaluate a run folder or checkpoint on its test split",
    "kfold": "stratified k-fold cross-validation of a config",
    "export": "write a run's model as an engine artifact (onnx, torchscript, ...), checked against eager",
    "profile": "per part: parameters, FLOPs, activation memory at the batch size; forward latency per engine",
    "predict": "run an exported artifact on .npy arrays, pictures or audio files; class and score per input",
    "score": "spoofing metrics of score files: EER, minDCF, t-DCF (2019, 2021), a-DCF, t-EER, bootstrap intervals",
    "data": "data utilities: download (a standard image corpus), show (samples as training sees them), "
    "make-spoof-corpus (a synthetic audio deepfake corpus), make-shapes (a synthetic COCO set)",
    "sweep": "run a config over a grid / random space and seeds (resumable, N workers); results table at the end",
    "sweep-report": "a sweep's results table: mean ± std over seeds per setting, best in bold, a plot",
}


class CliUsageError(UsageError):
    """argparse found the command line malformed."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so every error path is ours."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CliUsageError(f"{self.prog}: {message}")


def _top_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="modforge",
        description="Build, train, test, export and compare deep-learning models made of registered parts.",
        epilog="Run 'modforge COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"modforge {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show full tracebacks for unexpected errors (accepted anywhere)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        sub.add_parser(name, help=_HELPS[name], add_help=False)
    return parser


DEBUG_HINT = "add --debug anywhere on the command line, or set MODFORGE_DEBUG=1, for the traceback"
"""How every "unexpected" error says to see its traceback."""


def _take_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without its ``--debug`` tokens, and whether there was one.

    ``--debug`` is a global option but users type it where the error happened — after the
    command, after the config — so it is accepted anywhere before a ``--`` separator (a
    part argument named ``debug`` stays reachable as ``--backbone.debug``)."""
    end = argv.index("--") if "--" in argv else len(argv)
    kept = [a for a in argv[:end] if a != "--debug"] + argv[end:]
    return kept, len(kept) != len(argv)


def _env_debug() -> bool:
    """``MODFORGE_DEBUG`` set to anything but empty, ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get("MODFORGE_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def _split_command(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """(global options, command, the command's own arguments).

    The command's arguments are handed over untouched: each command parses them
    itself, because some add options only once they know which parts are chosen.
    """
    for i, token in enumerate(argv):
        if not token.startswith("-"):
            return argv[:i], token, argv[i + 1 :]
    return argv, None, []


def _visible(text: str) -> str:
    """``text`` with every control character but the line break shown as its escape (``\\x1b``):
    a message naming a file, a class or a value from data never drives the terminal."""
    return "\n".join(_one_line(line) for line in text.split("\n"))


class _LowerLevelFormatter(logging.Formatter):
    """``warning: ...`` like ``error: ...`` — the way command-line tools speak; the message's
    control characters shown escaped (it may quote data)."""

    def format(self, record: logging.LogRecord) -> str:
        message = _visible(record.getMessage())
        if record.levelno == logging.INFO:
            return message
        record = logging.makeLogRecord(record.__dict__)
        record.msg, record.args = message, None
        record.levelname = record.levelname.lower()
        return super().format(record)


def _setup_logging(debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LowerLevelFormatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("modforge")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    root.propagate = False
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").handlers[:] = [handler]


def _launched_processes() -> int:
    """WORLD_SIZE as torchrun set it (1 outside torchrun)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        return 1


def _fail(message: str) -> None:
    """``error: message`` as one line on stderr, written as plain text (never through rich, so
    markup such as ``[/bold]`` in a quoted file or class name is shown, not interpreted), with
    line breaks and other control characters shown as escapes."""
    sys.stderr.write(f"error: {_one_line(message)}\n")
    sys.stderr.flush()


_WORKER = re.compile(r"^Caught (\w+) in DataLoader worker process \d+\.\nOriginal Traceback", re.S)


def worker_message(exc: BaseException) -> str:
    """The message of an error raised in a DataLoader worker, without the traceback torch folds
    into it when it re-raises the error in the training process (a bad picture file read by a
    worker is one line, as it is when read in the training process)."""
    text = str(exc)
    if not _WORKER.match(text):
        return text
    name = type(exc).__name__
    for line in reversed(text.rstrip().splitlines()):
        head, sep, rest = line.partition(": ")
        if sep and head.rsplit(".", 1)[-1] == name:
            return rest.strip()
    return text.rstrip().splitlines()[-1]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (never raises for user errors)."""
    argv, debug_flag = _take_debug(list(sys.argv[1:] if argv is None else argv))
    debug = _env_debug() or debug_flag
    try:
        parser = _top_parser()
        options, command, rest = _split_command(argv)
        try:
            ns = parser.parse_args(options + ([command] if command else []))
        except SystemExit as exc:  # --help / --version
            return int(exc.code or 0)
        debug = debug or ns.debug
        _setup_logging(debug)
        if command is None:
            parser.print_help(sys.stderr)
            return 2
        if command != "train" and _launched_processes() > 1:
            raise UsageError(
                f"'modforge {command}' runs in one process; only 'modforge train' scales out over torchrun's "
                f"{_launched_processes()} processes — run this command without torchrun"
            )
        module = importlib.import_module(COMMANDS[command])
        try:
            return int(module.run(rest) or 0)
        except SystemExit as exc:  # a command's --help
            return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        _fail(worker_message(exc))
        return 2
    except ModforgeError as exc:
        _fail(str(exc))
        if debug:
            raise
        return 1
    except KeyboardInterrupt as exc:  # a run says what it kept and how to continue (cli/stops.py)
        _fail(str(exc) or "interrupted")
        for line in getattr(exc, "details", ()):
            sys.stderr.write(_visible(line) + "\n")
        return getattr(exc, "exit_code", 130)
    except BrokenPipeError:  # `modforge list | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
        except OSError:
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - one line, traceback on request
        if debug:
            raise
        _fail(f"unexpected {type(exc).__name__}: {worker_message(exc)} ({DEBUG_HINT})")
        return 1
