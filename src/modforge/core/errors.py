"""The exceptions modforge raises on purpose.

Every error a user can cause — a mistyped part name, a wrong value in a config, a
plug-in that does not import — is a :class:`UsageError` subclass with one readable
message that says *what* was wrong, *where* (config key path, file, flag) and what was
expected.  The command line turns a ``UsageError`` into exit status 2 and a single
line on stderr; any other :class:`ModforgeError` becomes exit status 1.
"""

from __future__ import annotations

__all__ = [
    "ModforgeError",
    "UsageError",
    "ConfigError",
    "ConfigFileError",
    "ConfigSyntaxError",
    "ConfigCycleError",
    "ConfigValueError",
    "UnknownKeyError",
    "MissingArgumentError",
    "UnknownComponentError",
    "BuildError",
    "RegistrationError",
    "DuplicateComponentError",
    "PluginError",
]


def _one_line(text: str) -> str:
    """Escape newlines and other control characters so a message stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class ModforgeError(Exception):
    """Base class of every error modforge raises deliberately."""


class UsageError(ModforgeError):
    """Bad input from the user: a config, a flag, a file. The CLI exits with status 2."""


class ConfigError(UsageError, ValueError):
    """A problem in a configuration, located by key path and/or source file.

    Args:
        message: what is wrong, without the location.
        path: dotted key path inside the config (``model.backbone.args.depth``),
            or a flag such as ``--width``.
        source: where the offending value came from: a file (``configs/x.yaml``,
            optionally with ``:line``) or an override (``override 'a.b=1'``).
    """

    def __init__(self, message: str, *, path: str | None = None, source: str | None = None):
        self.message = message
        self.path = path or None
        self.source = source or None
        super().__init__(self._render())

    @property
    def where(self) -> str:
        """The location as one string: key path, source, or both."""
        if self.path and self.source:
            return f"{self.path} ({self.source})"
        return self.path or self.source or ""

    def _render(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if self.source:
            text += f" (in {self.source})"
        return _one_line(text)

    def __str__(self) -> str:
        return self._render()

    def located(self, *, path: str | None = None, source: str | None = None) -> ConfigError:
        """Fill in a location the raiser did not know, keeping what it did know."""
        if path and not self.path:
            self.path = path
        if source and not self.source:
            self.source = source
        self.args = (self._render(),)
        return self


class ConfigFileError(ConfigError):
    """A config file is missing, unreadable, or not a mapping at the top level."""


class ConfigSyntaxError(ConfigError):
    """A config file is not valid YAML (or contains YAML tags that safe loading refuses)."""


class ConfigCycleError(ConfigError):
    """``_base_`` inheritance loops back onto a file already being loaded."""


class ConfigValueError(ConfigError):
    """A value does not have the expected type or is not one of the allowed choices."""


class UnknownKeyError(ConfigError):
    """A key (part argument, config section) that nothing accepts."""


class MissingArgumentError(ConfigError):
    """A required argument of a part was not given."""


class UnknownComponentError(ConfigError, LookupError):
    """A registry was asked for a name it does not hold."""


class BuildError(ConfigError):
    """A part's constructor raised; the message names the part, its config path and the cause."""


class RegistrationError(UsageError, TypeError):
    """Something that cannot be registered (not callable, a malformed name...)."""


class DuplicateComponentError(RegistrationError):
    """Two different definitions tried to register under one name."""


class PluginError(UsageError):
    """A plug-in module, file or entry point could not be imported."""
