"""docs/adopting.md's runnable examples run as documented (in real subprocesses)."""

from __future__ import annotations

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


def test_doc_shows_the_exact_adoption_lines():
    """The diff in the doc is the diff between the example files (one source of truth)."""
    text = DOC.read_text()
    for line in ("+import tokenwire",
                 '+@tokenwire.token_fields("prompt_token_ids", "query_token_ids")',
                 '+@tokenwire.token_fields("input_ids")'):
        assert line in text, line


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
