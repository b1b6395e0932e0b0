"""modforge's foundation: registries, signature-inferred arguments, configs, plug-ins, errors.

This package imports nothing else from modforge; every other layer builds on it.
"""

from .arguments import REQUIRED, ArgSpec, PartSignature, signature_of
from .coercion import coerce, coerce_cli, describe_type
from .config import Config, check_keys, load_config, parse_override
from .errors import (
    BuildError,
    ConfigCycleError,
    ConfigError,
    ConfigFileError,
    ConfigSyntaxError,
    ConfigValueError,
    DuplicateComponentError,
    MissingArgumentError,
    ModforgeError,
    PluginError,
    RegistrationError,
    UnknownComponentError,
    UnknownKeyError,
    UsageError,
)
from .plugins import load_entry_point_plugins, load_plugin, load_plugins
from .registries import *  # noqa: F403 - the registries and register_* decorators
from .registries import REGISTRIES, registry_for
from .registries import __all__ as _registry_names
from .registry import Entry, Registry
from .specs import normalize_spec

__all__ = [
    "REQUIRED",
    "ArgSpec",
    "BuildError",
    "Config",
    "ConfigCycleError",
    "ConfigError",
    "ConfigFileError",
    "ConfigSyntaxError",
    "ConfigValueError",
    "DuplicateComponentError",
    "Entry",
    "MissingArgumentError",
    "ModforgeError",
    "PartSignature",
    "PluginError",
    "Registry",
    "RegistrationError",
    "UnknownComponentError",
    "UnknownKeyError",
    "UsageError",
    "check_keys",
    "coerce",
    "coerce_cli",
    "describe_type",
    "load_config",
    "load_entry_point_plugins",
    "load_plugin",
    "load_plugins",
    "normalize_spec",
    "registry_for",
    "REGISTRIES",
    "parse_override",
    "signature_of",
    *_registry_names,
]
