"""The package's version, written here only: pyproject.toml reads it (setuptools' `attr:`, a
static read that imports nothing) and tokenwire.__version__ re-exports it."""

__version__ = "0.1.0"
