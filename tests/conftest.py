"""Shared pytest configuration: hypothesis profiles, and the fixtures several modules use.

`dev` (default) keeps the suite fast; `ci` (selected by CI=true or HYPOTHESIS_PROFILE=ci) runs
many more examples. Strategies live in tests/support/strategies.py.
"""

import os
import sys
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
