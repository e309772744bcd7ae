"""The optional packages the tests use, and the skip of a test that needs one that is missing.

A test module that needs an optional package says so first (``pytest.importorskip("msgspec")``);
for any other test, tests/conftest.py turns a ModuleNotFoundError of a package listed here, one
that is really not installed, into a skip with the reason ``skip_reason`` gives, so that a plain
local ``pytest`` without the extras reports skips, not errors. Either reason starts with
``could not import '<package>'``: the form TOKENWIRE_EXPECTED_SKIPS matches (tests/conftest.py),
so in CI such a skip still fails the run unless it is expected.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

#: Import name -> the extra of pyproject.toml that installs it ('test' installs every one).
OPTIONAL: dict[str, str] = {
    "msgspec": "msgspec", "zmq": "zmq", "zstandard": "zstd", "pybase64": "base64",
    "pydantic": "pydantic", "pydantic_core": "pydantic", "ray": "ray",
    "hypothesis": "test", "mypy": "test", "nanobind": "test", "pybind11": "test",
    "lz4": "test", "matplotlib": "test", "Cython": "test", "mpi4py": "mpi",
}


def missing_optional(exc: Optional[BaseException]) -> Optional[str]:
    """The optional package whose absence raised `exc` (or an exception it was raised from or
    while handling), if that package is not installed; otherwise None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            top = exc.name.partition(".")[0]
            if top in OPTIONAL and importlib.util.find_spec(top) is None:
                return top
        exc = exc.__cause__ or exc.__context__
    return None


def skip_reason(package: str) -> str:
    extra = OPTIONAL[package]
    return (f"could not import '{package}': an optional package, not installed "
            f"(pip install '.[{extra}]')")
