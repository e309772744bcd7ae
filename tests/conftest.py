"""Shared pytest configuration: hypothesis profiles, and the fixtures several modules use.

`dev` (default) keeps the suite fast; `ci` (selected by CI=true or HYPOTHESIS_PROFILE=ci) runs
many more examples. Strategies live in tests/strategies.py.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

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
