"""The package version (single source for pyproject and ``modforge --version``)."""

__version__ = "0.1.0"
