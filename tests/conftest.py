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
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# bench/ (the benchmarks, not installed) is imported from the clone's root by the tests that use
# it. Appended, not prepended: the checkout's tokenwire/ (sources without the compiled extension)
# must not shadow the installed package.
sys.path.append(str(Path(__file__).resolve().parent.parent))

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


@pytest.fixture
def zmq_ctx():
    """(zmq, a Context) for tests over real pyzmq sockets; destroyed without lingering."""
    zmq = pytest.importorskip("zmq")
    ctx = zmq.Context()
    yield zmq, ctx
    ctx.destroy(linger=0)


# --------------------------------------------------------------------------------------------
# skips fail in CI unless expected


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
    _fail_unexpected_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield                     # a module-level importorskip skips the whole module
    _fail_unexpected_skip(outcome.get_result())
