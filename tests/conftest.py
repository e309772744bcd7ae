"""Shared pytest configuration: hypothesis profiles, and the fixtures several modules use.

`dev` (default) keeps the suite fast; `ci` (selected by CI=true or HYPOTHESIS_PROFILE=ci) runs
many more examples. Strategies live in tests/support/strategies.py.

Skips are failures in CI. Tests skip when an optional package is missing (pytest.importorskip)
or the platform lacks something; on a developer's machine that is a convenience, in CI it would
hide a missing install step (a golden zstd fixture silently untested). With CI=true (or
TOKENWIRE_STRICT_SKIPS=1; TOKENWIRE_STRICT_SKIPS=0 turns it off) every skip fails the run unless
its reason is listed in TOKENWIRE_EXPECTED_SKIPS: comma-separated entries, each the name of a
package the environment leaves out on purpose (a skip "could not import 'ray'" matches `ray`) or
text the skip reason contains. .ci/pythons lists what its reduced install leaves out.

Without an optional package (tests/support/extras.py lists them) a test that needs it skips:
through a module-level pytest.importorskip, or, for a test that imports it without one, a
ModuleNotFoundError of that package is reported as a skip naming it. hypothesis is optional
too: its profiles are registered when it is installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.extras import missing_optional, skip_reason

if TYPE_CHECKING:
    from support.cpp_harness import Conformance

# bench/ (the benchmarks, not installed) is imported from the clone's root by the tests that use
# it. Appended, not prepended: the checkout's tokenwire/ (sources without the compiled extension)
# must not shadow the installed package.
sys.path.append(str(Path(__file__).resolve().parent.parent))

try:
    from hypothesis import HealthCheck, settings
except ModuleNotFoundError:             # the modules that use it skip without it
    pass
else:
    settings.register_profile("dev", max_examples=60, deadline=None)
    settings.register_profile(
        "ci",
        max_examples=400,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    settings.load_profile(
        os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    )


@pytest.fixture(scope="session")
def cpp_build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's C++ test programs are compiled (a compiler is required)."""
    from support.cpp_harness import require_compiler

    require_compiler()
    return tmp_path_factory.mktemp("cpp-conformance")


@pytest.fixture(scope="session")
def cpp(cpp_build_dir: Path) -> Iterator[Conformance]:
    """The conformance server (tests/cpp/conformance.cpp), compiled once and shared by every
    module that compares the C++ header with the extension (test_cpp_wire, test_codecs)."""
    from support.cpp_harness import Conformance, compile_conformance, have_zstd_header

    zstd = have_zstd_header()
    server = Conformance(compile_conformance(cpp_build_dir, zstd=zstd), skip_zstd=not zstd)
    yield server
    server.close()


@pytest.fixture
def zmq_ctx():
    """(zmq, a Context) for tests over real pyzmq sockets; destroyed without lingering.

    The context holds every socket made from it until the test ends, and then closes them: a
    socket left to the garbage collector is a ResourceWarning, which the suite makes an error.
    """
    zmq = pytest.importorskip("zmq")

    class HoldingContext(zmq.Context):  # type: ignore[misc, name-defined]
        held: list[Any]

        def socket(self, *args: Any, **kwargs: Any) -> Any:
            sock = super().socket(*args, **kwargs)
            self.held.append(sock)
            return sock

    ctx = HoldingContext()
    ctx.held = []
    yield zmq, ctx
    ctx.destroy(linger=0)


@pytest.fixture
def threshold() -> Iterator[None]:
    """The GIL-release threshold (tokenwire._core) as it was before the test, after it."""
    import tokenwire._core

    previous = tokenwire._core.gil_release_threshold()
    yield
    tokenwire._core.gil_release_threshold(previous)


# --------------------------------------------------------------------------------------------
# a missing optional package is a skip; skips fail in CI unless expected


def _skip_missing_optional(report: pytest.TestReport | pytest.CollectReport,
                           excinfo: pytest.ExceptionInfo[BaseException] | None,
                           path: str, lineno: int) -> None:
    """Report a failure whose cause is a missing optional package as a skip naming it."""
    if not report.failed or excinfo is None:
        return
    package = missing_optional(excinfo.value)
    if package is not None:
        report.outcome = "skipped"
        report.longrepr = (path, lineno, f"Skipped: {skip_reason(package)}")


def _strict_skips() -> bool:
    flag = os.environ.get("TOKENWIRE_STRICT_SKIPS")
    if flag is not None:
        return flag.strip().lower() not in ("", "0", "false", "no")
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _expected_skip(reason: str) -> bool:
    for entry in filter(None, (e.strip() for e in
                               os.environ.get("TOKENWIRE_EXPECTED_SKIPS", "").split(","))):
        if reason.startswith(f"could not import '{entry}'") or entry in reason:
            return True
    return False


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:      # (path, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_unexpected_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not (report.skipped and _strict_skips()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if _expected_skip(reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"unexpected skip in CI: {reason}\n"
        "Install what the test needs (pip install '.[test]' installs every extra), or, where "
        "this environment leaves it out on purpose, list it in TOKENWIRE_EXPECTED_SKIPS "
        "(see tests/conftest.py).")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if call.when in ("setup", "call"):
        path, lineno, _ = report.location
        _skip_missing_optional(report, call.excinfo, path, (lineno or 0) + 1)
    _fail_unexpected_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield                     # a module-level importorskip skips the whole module
    report = outcome.get_result()
    call = getattr(report, "call", None)                # pytest keeps the collect call here
    _skip_missing_optional(report, call and call.excinfo, str(collector.path), 1)
    if report.skipped:
        report.result = []
    _fail_unexpected_skip(report)
