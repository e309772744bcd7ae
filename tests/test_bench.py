"""The benchmarks, `python -m bench` from the clone's root, run as real subprocesses against the
installed tokenwire: the subcommands, the codec table (JSON, plot, a real tokenizer), e2e."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tokenwire
from support.bench_cli import ROOT, run_bench
from support.wait import WAIT_S


# Real subprocesses, sockets and clusters: `pytest -m "not integration"` skips them.
pytestmark = pytest.mark.integration


def test_help_lists_every_subcommand() -> None:
    from bench.__main__ import SUBCOMMANDS
    r = run_bench("--help")
    assert r.returncode == 0, r.stderr
    for name in SUBCOMMANDS:
        assert f"python -m bench {name}" in r.stdout or name == "codec", name
    assert "--plot PNG" in r.stdout                        # the codec table's own options follow


def test_unknown_subcommand_is_a_usage_error() -> None:
    r = run_bench("frobnicate")
    assert r.returncode == 2 and "unknown subcommand 'frobnicate'" in r.stderr


@pytest.mark.parametrize("name", sorted(__import__("bench.__main__").__main__.SUBCOMMANDS))
def test_every_subcommand_has_help(name: str) -> None:
    r = run_bench(name, "--help")
    assert r.returncode == 0, r.stderr
    prog = "python -m bench" if name == "codec" else f"python -m bench {name}"
    assert f"usage: {prog} " in r.stdout and "--" in r.stdout


def test_the_installed_tokenwire_is_measured(tmp_path: Path) -> None:
    """Run from the root, where the checkout's tokenwire/ sits first on sys.path: bench imports
    the installed package instead (the checkout's holds no compiled extension in CI)."""
    probe = ("import sys, bench, tokenwire; print(tokenwire.__file__); "
             "print(sys.path.index(bench.ROOT) == len(sys.path) - 1)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       cwd=ROOT, timeout=WAIT_S)
    assert r.returncode == 0, r.stderr
    imported, root_last = r.stdout.split()
    assert Path(imported) == Path(tokenwire.__file__) and root_last == "True"


def test_bench_reads_real_ids_and_measures_pfor(tmp_path: Path) -> None:
    """--ids: a raw int32 file (bench/pfor_ids.py's output) repeated up to each ISL; the
    pfor row's size is that of tokenwire.encode(ids, codec="pfor") on those ids."""
    ids = np.array([5, 70_000, 17, 3, 151_000, 2, 9, 1] * 64, dtype="<i4")
    path = tmp_path / "ids.i32"
    ids.tofile(path)
    out_json = tmp_path / "b.json"
    r = run_bench("--quick", "--ids", str(path), "--only", "pfor", "--json", str(out_json))
    assert r.returncode == 0, r.stderr
    assert f"ids from {path}" in r.stdout
    rows = [row for row in json.loads(out_json.read_text())["rows"]
            if row["name"] == "tokenwire pfor"]
    assert rows
    for row in rows:
        expected = len(tokenwire.encode(np.resize(ids, row["isl"]), codec="pfor"))
        assert row["nbytes"] == expected, row


def test_bench_quick_json_and_plot(tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "b.json", tmp_path / "b.png"
    r = run_bench("--quick", "--only", "raw", "packed", "--json", str(out_json),
                  "--plot", str(out_png))
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "ISL 40,000" in text and "tokenwire packed" in text and "Targets at ISL 40,000" in text
    doc = json.loads(out_json.read_text())
    names = {row["name"] for row in doc["rows"]}
    assert {"pickle(list[int])", "tokenwire raw", "tokenwire packed"} <= names
    assert "msgspec.msgpack(list[int])" not in names                 # --only filtered it out
    codec_rows = [row for row in doc["rows"] if row["group"] != "per call"]
    assert codec_rows and all(row["encode_us"] > 0 and row["decode_us"] > 0 for row in codec_rows)
    assert {row["name"] for row in doc["rows"] if row["group"] == "per call"} == {
        "encode(list of 16)", "decode(16-id frame)", "pickle.dumps(list of 16)"}
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_request_benchmark_measures_the_examples_classes(tmp_path: Path) -> None:
    """bench request times examples/'s dataclass, unmodified and adopted: the same classes the
    drop-in tests check, not copies of them."""
    out_json = tmp_path / "r.json"
    r = run_bench("request", "--isl", "1000", "--repeat", "3", "--round-ms", "2",
                  "--json", str(out_json))
    assert r.returncode == 0, r.stderr
    rows = {(row["group"], row["name"]) for row in json.loads(out_json.read_text())["rows"]}
    assert ("dataclass (32 fields): pickle.dumps+loads, protocol 5",
            "token_fields dataclass") in rows
    signed = "request round trip (dumps_oob + loads_oob), signed with key="
    assert {(signed, "unsigned"), (signed, "signed (key=)"),
            (signed, "signed, ids covered (sign_buffers=True)")} <= rows
    from bench import request
    assert request.TokenizedReq is request.before.TokenizedGenerateReqInput
    assert request.TwTokenizedReq is request.after.TokenizedGenerateReqInput
    assert request.TokenizedReq.__module__ == "bench.request.before"
    assert Path(request.before.__file__).samefile(ROOT / "examples/before/serving_requests.py")


def test_msgspec_suite(tmp_path: Path) -> None:
    """Every group of the suite runs, vLLM's host encoder over zmq too, and the default codec's
    message is never larger than the list's."""
    pytest.importorskip("msgspec")
    pytest.importorskip("zmq")
    out = tmp_path / "m.json"
    r = run_bench("msgspec", "--isl", "200", "--repeat", "2", "--round-ms", "1",
                  "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "out-of-band Encoder/Decoder" in r.stdout and "characters per id" in r.stdout
    assert "[MISSED] ISL" not in r.stdout and "(default <= list)" in r.stdout
    rows = {(row["group"], row["name"]) for row in json.loads(out.read_text())["rows"]}
    names = {name for _, name in rows}
    assert {"list[int] field, plain msgspec", "msgspec.json(list[int])",
            "to_base64(TokenVector) / from_base64"} <= names
    assert {("vLLM shape over zmq: encode, send, recv, decode, engine list (.copy())",
             "prompt_token_ids: TokenVector (default codec)"),
            ("vLLM shape: encode + decode alone", "prompt_token_ids: list[int], stock msgspec")
            } <= rows


def test_e2e_quick_is_correct(tmp_path: Path) -> None:
    """The worker is a spawned process: it finds bench/ (not installed) and the installed
    tokenwire through the sys.path it inherits. Every mode runs, the shared-memory one
    included (its ids through slots: a fallback to frames would fail the correctness check),
    and the whole trip's p99 is reported beside its p50, in the table and the JSON."""
    pytest.importorskip("zmq")
    from tokenwire import shm
    out_json = tmp_path / "e2e.json"
    r = run_bench("e2e", "--quick", "--requests", "6", "--json", str(out_json))
    assert r.returncode == 0, r.stderr
    modes = ("baseline", "tokenwire", "tokenwire-oob", "tokenwire-shm", "tokenwire-shm-spin",
             "floor")
    for mode in modes:
        assert f" {mode} " in r.stdout
    assert "correctness: tokens received == tokens sent" in r.stdout
    header = next(line for line in r.stdout.splitlines() if line.startswith("transport"))
    assert "trip p50        p99" in header and "trip x floor" in header
    floor = [ln for ln in r.stdout.splitlines() if ln.startswith("zmq") and " floor " in ln]
    assert len(floor) == 2 and all("1.00x  yes" in ln for ln in floor), floor
    assert "whole trip <= 1.5x the floor's" in r.stdout
    rows = json.loads(out_json.read_text())["results"]
    assert {(row["mode"], row["isl"]) for row in rows} == {
        (mode, isl) for mode in modes for isl in (1000, 40_000)}
    for row in rows:
        assert row["correct"] and len(row["trip_us"]) == 6
        assert row["trip_p99_us"] >= row["trip_p50_us"] > 0
    if shm.available():
        assert "tokenwire-shm: whole trip p99 <= 3x its p50" not in r.stdout   # numpy engine
        assert "tokenwire-shm: worker submit >= 10x lower" in r.stdout


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):     # ended since the listing
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def _running(pid: int) -> bool:
    """Whether process `pid` has not ended (a zombie has: it waits only to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("suite, options, row_started", [
    ("e2e", ("--requests", "400"), "e2e zmq: ISL 40,000, tokenwire-oob 30/"),
    ("load", ("--rows", "tokenwire-oob", "--seconds", "60"),
     "load: ISL 40,000, tokenwire-oob: closed loop"),
])
def test_a_killed_proxy_leaves_no_worker(suite: str, options: tuple[str, ...],
                                         row_started: str) -> None:
    """The proxy of `bench e2e` / `bench load` killed with SIGKILL in the middle of a row: its
    worker process sees its parent gone, also while it waits for the row's next request, and
    ends by itself (a worker left behind would hold its core and the proxy's segment)."""
    pytest.importorskip("zmq")
    proxy = subprocess.Popen([sys.executable, "-m", "bench", suite, "--isl", "40000", *options],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    assert proxy.stderr is not None
    workers: list[int] = []
    try:
        seen = []
        for line in proxy.stderr:       # the progress lines; the proxy's end closes the pipe
            seen.append(line)
            if row_started in line:
                break
        else:
            pytest.fail(f"bench {suite} ended (exit {proxy.wait()}) before a row began: "
                        + "".join(seen[-20:]))
        workers = _children(proxy.pid)
        assert workers, "the proxy has no worker process"
        proxy.kill()
        assert proxy.wait(timeout=WAIT_S) == -signal.SIGKILL
        deadline = time.monotonic() + WAIT_S
        while any(map(_running, workers)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [pid for pid in workers if _running(pid)]
        assert not left, f"worker process(es) {left} still run {WAIT_S:.0f} s after the proxy died"
    finally:
        proxy.kill()
        proxy.wait()
        proxy.stderr.close()
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(sys.platform != "linux", reason="bench malloc reads /proc/self/status")
def test_malloc_suite(tmp_path: Path) -> None:
    """`python -m bench malloc`: fresh processes with settling on and off, paired by seed; the
    medians and the pair difference docs/benchmarks.md quotes."""
    out = tmp_path / "malloc.json"
    r = run_bench("malloc", "--runs", "2", "--steps", "20", "--min-kib", "128", "--max-kib",
                  "1024", "--json", str(out))
    assert r.returncode == 0, r.stderr
    runs = json.loads(out.read_text())["runs"]
    assert len(runs["on"]) == len(runs["off"]) == 2
    for mode in ("on", "off"):
        for run in runs[mode]:
            # (VmHWM may lag VmRSS by the kernel's batched counters: no peak >= steady.)
            assert run["peak"] > run["start"] > 0 and run["steady"] > 0 and run["final"] > 0, \
                (mode, run)
            assert (run["settled"] > 0) == (mode == "on"), (mode, run)
    assert "pair difference, peak RSS (on - off, the same seed): median " in r.stdout
    assert " of 2" in r.stdout


def test_shm_suite_quick() -> None:
    """`python -m bench shm`: the channel's paths by size, slot vs memcpy."""
    pytest.importorskip("zmq")
    from tokenwire import shm
    if not shm.available():
        pytest.skip("the shared-memory channel needs Linux memfd_create")
    r = run_bench("shm", "--quick")
    assert r.returncode == 0, r.stderr
    for row in ("in-band (the ids in the pickle)", "out-of-band frames",
                "shared memory (channel=)", "  memcpy ", "slot write + copy out + free"):
        assert row in r.stdout, row


def test_shm_suite_refuses_more_ids_than_a_slot_holds() -> None:
    """An ISL beyond a slot would silently leave the channel's row on frames (and crash the slot
    row): it is a usage error naming the bound."""
    from tokenwire import shm
    if not shm.available():
        pytest.skip("the shared-memory channel needs Linux memfd_create")
    r = run_bench("shm", "--isl", "300000")
    assert r.returncode == 1
    assert "--isl 300,000 is more than a slot holds (262,144 ids)" in r.stderr, r.stderr


def test_threads_suite_quick(tmp_path: Path) -> None:
    """`python -m bench threads`: every row at 1 and 2 threads (each thread checks the ids it
    got back), the interpreter's free-threading in the header, throughput, scaling and x floor
    in the table and the JSON."""
    import sysconfig

    from bench.threads import FLOOR, ROWS
    out = tmp_path / "threads.json"
    r = run_bench("threads", "--quick", "--threads", "1,2", "--json", str(out))
    assert r.returncode == 0, r.stderr
    free = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert f"free-threaded build (Py_GIL_DISABLED): {'yes' if free else 'no'}" in r.stdout
    assert "GIL enabled now: " in r.stdout and "scaling 2/1" in r.stdout
    assert "Targets at 2 threads" in r.stdout
    data = json.loads(out.read_text())
    assert data["free_threaded"] is free and data["threads"] == [1, 2]
    rows = {(row["name"], row["threads"]): row for row in data["rows"]}
    assert set(rows) == {(row.name, k) for row in ROWS for k in (1, 2)}
    assert all(row["ops_per_s"] > 0 and len(row["samples_ops_per_s"]) == 2
               for row in rows.values())
    assert all(rows[(row.name, 1)]["scaling"] == 1.0 for row in ROWS)
    assert rows[(FLOOR, 2)]["x_floor_scaling"] == 1.0


@pytest.mark.parametrize("nodes", [1, 2])
def test_e2e_through_ray(nodes: int, tmp_path: Path) -> None:
    """Ray's workers get bench/ shipped as a module (runtime_env py_modules); with two nodes the
    proxy and worker actors sit on different raylets and the ids still arrive whole, put in the
    store or passed as the call's argument, raw or as a pfor frame (each row CRC-checks every
    request's ids)."""
    pytest.importorskip("ray")
    pytest.importorskip("zmq")
    from bench.e2e import RAY_INLINE_ENV
    out = tmp_path / "e2e.json"
    # The two-node run sets Ray's limit for an argument inside the call (what a deployment may
    # raise); the one-node run leaves Ray's default. The header and the JSON say which.
    env = {k: v for k, v in os.environ.items() if k != RAY_INLINE_ENV}
    limit = "1048576" if nodes == 2 else None
    if limit:
        env[RAY_INLINE_ENV] = limit
    r = run_bench("e2e", "--isl", "2000", "--requests", "4", "--ray", "--ray-nodes", str(nodes),
                  "--json", str(out), env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert (f"max_direct_call_object_size = {limit} bytes ({RAY_INLINE_ENV})" if limit
            else "max_direct_call_object_size = 100 KiB (the default)") in r.stdout
    label = "ray-2node" if nodes == 2 else "ray"
    data = json.loads(out.read_text())
    assert data["ray_inline_limit"] == limit
    for transport, submits in ((label, 4), (label + "-arg", 0)):
        mine = [row for row in data["results"] if row["transport"] == transport]
        assert [row["mode"] for row in mine] == ["baseline", "tokenwire", "tokenwire-pfor",
                                                 "floor"]
        assert all(row["correct"] and len(row["trip_us"]) == 4 for row in mine), mine
        assert all(len(row["latency_us"]) == submits for row in mine), mine   # put: ray.get
        # Every row's trip is shown against the floor's, and the floor's against itself.
        printed = [ln for ln in r.stdout.splitlines() if ln.startswith(transport + " ")]
        assert len(printed) == 4 and not any(ln.rstrip().endswith("n/a  yes") for ln in printed)
        assert printed[-1].rstrip().endswith("1.00x  yes") and " floor " in printed[-1], printed
    assert "correctness: tokens received == tokens sent" in r.stdout


def test_the_ray_pfor_row_sends_pfor() -> None:
    """bench e2e's tokenwire-pfor request pickles its 40k ids as a pfor frame: under Ray's
    100 KiB limit for an argument sent inside the call, where the raw request is over it."""
    from bench.data import token_stream
    from bench.e2e import PforGenerationRequest, make_request
    ids = token_stream(40_000, seed=1)
    req = make_request("tokenwire-pfor", ids, 0)
    assert type(req) is PforGenerationRequest
    assert PforGenerationRequest.prompt_token_ids.codec == "pfor"
    assert len(pickle.dumps(req, protocol=5)) < 100 * 1024
    assert len(pickle.dumps(make_request("tokenwire", ids, 0), protocol=5)) > 100 * 1024


@pytest.mark.slow
def test_bench_typechecks() -> None:
    """The benchmarks are held to the package's standard: `mypy --strict -p bench`."""
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "-p", "bench"],
                       capture_output=True, text=True, cwd=ROOT, timeout=WAIT_S,
                       env=dict(os.environ, MYPY_CACHE_DIR=os.devnull))
    assert r.returncode == 0, r.stdout + r.stderr


def test_wires_suite(tmp_path: Path) -> None:
    pytest.importorskip("orjson")
    pytest.importorskip("google.protobuf")
    out = tmp_path / "w.json"
    r = run_bench("wires", "--isl", "300", "--repeat", "2", "--round-ms", "1", "--json", str(out))
    assert r.returncode == 0, r.stderr
    # every writer's bytes are the stack's own, and each reader's speed is printed
    assert r.stdout.count("writer byte-identical to the stack's: True") == 3, r.stdout
    assert r.stdout.count(" bytes/ns (memcpy ") == 3
    names = {row["name"] for row in json.loads(out.read_text())["rows"]}
    assert {"tokenwire.wires.read", "as_tokens(msg.input_ids)",
            "memcpy of the wire's bytes (floor)",
            "ids as msgspec.Raw, then tokenwire.wires.read"} <= names   # the engine-core receive
