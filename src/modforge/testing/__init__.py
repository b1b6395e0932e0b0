"""The conformance suite: the contract every part must keep, as runnable checks.

    from modforge.testing import check_part
    results = check_part("backbone", "resnet18")            # a registered part
    results = check_part("backbone", "my_pkg.parts:MyNet")  # or any class/function

The project's tests run it over every registered part; ``modforge check`` runs it on
yours and prints the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .checks import CHECKS, CheckFailed, CheckResult, CheckSkipped, run_checks
from .subjects import PART_KINDS, Subject, subjects_for

__all__ = [
    "CHECKS",
    "PART_KINDS",
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "Subject",
    "check_part",
    "run_checks",
    "subjects_for",
]


def check_part(
    kind: str,
    target: str | Any,
    args: dict[str, Any] | None = None,
    *,
    layouts: Iterable[str] | None = None,
    in_dim: Any = None,
    plugins: Iterable[str] = (),
) -> list[CheckResult]:
    """Run every check on a part, for every input layout it accepts (see :func:`subjects_for`)."""
    results: list[CheckResult] = []
    for subject in subjects_for(kind, target, args, layouts=layouts, in_dim=in_dim, plugins=plugins):
        results.extend(run_checks(subject))
    return results
