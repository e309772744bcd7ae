"""docs/adopting.md's runnable examples run as documented (in real subprocesses)."""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import msgspec
import zmq

import tokenwire
from tokenwire.msgspec import Decoder, Encoder, dec_hook, enc_hook, ext_hook

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "adopting.md"


class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """docs/adopting.md, section 1: vLLM's engine-core request with a TokenVector field."""

    request_id: str
    prompt_token_ids: Optional[tokenwire.TokenVector]
    arrival_time: float


def _run(*args: str) -> str:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_adopting_example_runs():
    out = _run("examples/adopting.py")
    assert out.strip().endswith("ok")
    for step in ("1. pickled", "2. ExecutorRequest", "2. TokenizedGenerateReqInput",
                 "3. restricted unpickler: global 'os.system' is not allowed",
                 "4. list_on_wire", "5. ids >= 2**31 and nested lists travel as the plain list"):
        assert step in out, out


def test_doc_names_the_examples_and_they_exist():
    text = DOC.read_text()
    named = set(re.findall(r"examples/[\w/]+\.py", text))
    assert {"examples/adopting.py", "examples/before/serving_requests.py",
            "examples/after/serving_requests.py", "examples/worker_submit.py"} <= named
    for path in named:
        assert (ROOT / path).is_file(), path


def test_doc_shows_the_whole_adoption_diff():
    """Section 1's diff is "the whole diff between the two example files": its added and removed
    lines are exactly those of the files' diff, in order, and every line it shows (context lines
    abbreviated with "..." aside) is the after file's, in order, each added line directly above
    the line the doc shows under it (the decorator on the class it decorates)."""
    block = re.search(r"^## 1\..*?```diff\n(.*?)```", DOC.read_text(), flags=re.S | re.M)
    assert block, "section 1 has no diff block"
    shown = block.group(1).splitlines()
    before = (ROOT / "examples" / "before" / "serving_requests.py").read_text().splitlines()
    after = (ROOT / "examples" / "after" / "serving_requests.py").read_text().splitlines()
    real = [line for line in difflib.unified_diff(before, after, lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert [line for line in shown if line.startswith(("+", "-"))] == real
    pos = -1                                  # the after file's line the doc reached
    for k, line in enumerate(shown):
        if line.startswith("-") or "..." in line:
            continue
        text = line[1:]
        found = after.index(text, pos + 1) if text in after[pos + 1:] else None
        assert found is not None, f"not in examples/after/serving_requests.py, in order: {line!r}"
        if line.startswith("+") and k + 1 < len(shown) and "..." not in shown[k + 1]:
            assert after[found + 1] == shown[k + 1][1:], f"{line!r} is not above {shown[k + 1]!r}"
        pos = found


def test_msgspec_section_as_documented():
    """Section 1's msgspec Struct: a TokenVector field through tokenwire.msgspec, over a real
    pair of pyzmq sockets (out of band) and through the hooks (one message)."""
    text = DOC.read_text()
    assert "input_ids: bytes" not in text
    assert "+    prompt_token_ids: Optional[tokenwire.TokenVector]" in text
    assert "+Encoder().send(socket, req)" in text and "+req = Decoder(EngineCoreRequest).recv(socket)" in text

    ids = list(range(100_000, 140_000))
    req = EngineCoreRequest("r1", tokenwire.as_tokens(ids), 1.5)
    ctx = zmq.Context.instance()
    proxy, worker = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        port = worker.bind_to_random_port("tcp://127.0.0.1")
        proxy.connect(f"tcp://127.0.0.1:{port}")
        Encoder().send(proxy, req)
        assert worker.poll(10_000), "nothing arrived"
        got = Decoder(EngineCoreRequest).recv(worker)
    finally:
        proxy.close(linger=0)
        worker.close(linger=0)
    assert type(got.prompt_token_ids) is tokenwire.TokenVector and got.prompt_token_ids == ids
    inline = msgspec.msgpack.Encoder(enc_hook=enc_hook).encode(req)
    dec = msgspec.msgpack.Decoder(EngineCoreRequest, ext_hook=ext_hook, dec_hook=dec_hook)
    assert dec.decode(inline) == req
    # An old proxy's list[int] is read by the new worker type too (workers first).
    old = msgspec.msgpack.encode(["r1", ids[:5], 1.5])
    assert dec.decode(old).prompt_token_ids == ids[:5]
