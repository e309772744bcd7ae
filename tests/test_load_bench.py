"""`python -m bench load --quick`: the proxy -> worker path under load, run as a real subprocess
from the clone's root against the installed tokenwire."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.bench_cli import run_bench

pytest.importorskip("zmq")

# A real worker process and sockets: `pytest -m "not integration"` skips it.
pytestmark = pytest.mark.integration


def test_load_quick(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    r = run_bench("load", "--quick", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert {row["isl"] for row in rows} == {1000, 40_000}
    assert {"baseline", "tokenwire", "tokenwire-oob", "tokenwire-oob-batch8", "floor"} <= {
        row["row"] for row in rows}
    for row in rows:
        name = f"{row['row']} at ISL {row['isl']}"
        assert row["correct"] and row["wrong"] == 0, name      # the worker checked every id
        assert row["checked"] == (row["row"] != "floor"), name  # the floor's messages carry none
        assert row["requests"] > 0 and row["rps"] > 0, name
        assert row["proxy_cpu_us"] > 0 and row["worker_cpu_us"] > 0, name
        assert row["p99_us"] >= row["p50_us"] > 0, name
        assert row["open_loop"], name
        for point in row["open_loop"]:
            assert point["requests"] > 0 and point["p99_us"] >= point["p50_us"] > 0, name
    assert "correctness: tokens received == tokens sent" in r.stdout
    # Every other row's proxy and worker CPU against the floor's, at both ISLs.
    assert r.stdout.count("x floor (") == 2 * 2 * (len({row["row"] for row in rows}) - 1)


def test_load_with_proxy_threads(tmp_path: Path) -> None:
    """`--proxy-threads 2`: every row runs again with two serializing threads in the proxy, each
    sending on its own socket, except the shared-memory row (a Sender is one thread's); the
    worker still checks every id."""
    out = tmp_path / "load.json"
    r = run_bench("load", "--quick", "--rows", "baseline,tokenwire-oob,tokenwire-shm,floor",
                  "--proxy-threads", "2", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["rows"]
    by = {(row["row"], row["threads"], row["isl"]) for row in rows}
    for isl in (1000, 40_000):
        for name in ("baseline", "tokenwire-oob", "floor"):
            assert {(name, 1, isl), (name, 2, isl)} <= by
        assert ("tokenwire-shm", 1, isl) in by and ("tokenwire-shm", 2, isl) not in by
    for row in rows:
        assert row["correct"] and row["requests"] > 0 and row["rps"] > 0, row["row"]
    assert r.stdout.count(" x2t ") >= 6 and "Proxy threads (requests/s" in r.stdout
