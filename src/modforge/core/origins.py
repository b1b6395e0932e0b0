"""Where a config value came from, as far as trust goes: typed on this command line, or read from a file."""

from __future__ import annotations

__all__ = ["CommandLineOrigin", "typed_here"]
class CommandLineOrigin(str):
    """The origin of a value typed on this command line (``override 'a.b=1'``, ``flag --lr``).

    A distinct type, not a prefix of the text: a file's origin is its shown name, which anyone
    who names a file (or a run folder) ``override x.yaml`` could make look like one. Whether a
    value was the user's own choice — a destination a stored config may not make — is
    :func:`typed_here`."""


def typed_here(origin: object) -> bool:
    """Whether ``origin`` says the value was typed on this command line (see :class:`CommandLineOrigin`)."""
    return isinstance(origin, CommandLineOrigin)
