"""``modforge config CONFIG [overrides] [--backbone NAME --width 32 ...]`` — print the resolved config.

Everything a training run would do to a config before building anything — ``_base_``
inheritance, overrides, ``--plugins``, part choices and part flags, validation of every
part against its registry — and then the result as YAML on stdout. The same output is
what a run folder's ``config.yaml`` holds, and what ``--print-config`` prints on every
config-taking command.
"""

from __future__ import annotations

import sys

from ...core.text_safety import display_lines
from ..config_args import resolve_config_from_cli

HELP = "resolve a config (_base_, overrides, part flags), validate it and print it as YAML"


def run(argv: list[str]) -> int:
    resolved = resolve_config_from_cli("config", argv, description=HELP)
    sys.stdout.write(display_lines(resolved.config.to_yaml()))
    return 0
