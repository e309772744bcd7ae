"""TokenVector in msgspec and JSON stacks against list[int]: vLLM's engine-core Struct through
plain msgspec, tokenwire.msgspec's hooks and out-of-band Encoder/Decoder, the same Struct through
a host encoder/decoder of vLLM's shape over zmq, and the prompt as a JSON body field; with their
targets (docs/benchmarks.md, "msgspec and JSON"; docs/adopting.md, "vLLM: the engine-core
socket").
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any, List, Optional, cast

import msgspec
import numpy as np

import tokenwire
import tokenwire.msgspec as tw_msgspec
from tokenwire import TokenVector, as_tokens
from bench.data import engine_core_request, engine_request, load_ids
from bench.harness import (GROUPED_NOTE, Method, Result, Suite, Target, push_pull, ratio_target,
                           suite_main, verdict)


#: vLLM's EngineCoreRequest (bench/data.py) with the ids as today and as tokenwire's field.
ListRequest = engine_core_request("ListRequest", Optional[List[int]])
TokenRequest = engine_core_request("TokenRequest", Optional[TokenVector])


G_MSGPACK = "engine-core Struct, msgpack encode+decode"
G_JSON = "JSON body field, encode+decode"
HOOKS = "TokenVector field, tokenwire.msgspec hooks"
OOB = "TokenVector field, out-of-band Encoder/Decoder"
HOOKS_RAW = "TokenVector field, hooks, codec=\"raw\""
OOB_RAW = "TokenVector field, out-of-band, codec=\"raw\""
B64 = "to_base64(TokenVector) / from_base64"
B64_LIST = "to_base64(list[int]) / from_base64"


def struct_methods(ids: np.ndarray) -> list[Method]:
    lst, tv = ids.tolist(), as_tokens(ids)
    list_req, tv_req = engine_request(ListRequest, lst), engine_request(TokenRequest, tv)
    hooks, raw = tw_msgspec.Hooks(), tw_msgspec.Hooks(codec="raw")
    dec_hooks = msgspec.msgpack.Decoder(TokenRequest, ext_hook=hooks.ext_hook,
                                        dec_hook=hooks.dec_hook)
    dec_oob = tw_msgspec.Decoder(TokenRequest)
    body_list = {"prompt_token_ids": lst}
    json_text = json.dumps(body_list)
    ms_json = msgspec.json.encode(body_list)
    text = tokenwire.to_base64(tv)

    def m(group: str, name: str, enc: Callable[[], object], dec: Callable[[], object],
          baseline: bool = False) -> Method:
        return Method(name, {"encode": enc, "decode": dec}, group, baseline)

    def struct(name: str, enc: Any, dec: Any, req: Any, baseline: bool = False) -> Method:
        """`enc.encode(req)`, then `dec.decode` of what a receiver holds: the message, or the
        out-of-band frames (main frame and buffers) as received bytes."""
        sent = enc.encode(req)
        wire = [bytes(f) for f in sent] if isinstance(sent, list) else sent
        return m(G_MSGPACK, name, lambda: enc.encode(req), lambda: dec.decode(wire), baseline)

    return [
        struct("list[int] field, plain msgspec", msgspec.msgpack.Encoder(),
               msgspec.msgpack.Decoder(ListRequest), list_req, True),
        struct(HOOKS, msgspec.msgpack.Encoder(enc_hook=hooks.enc_hook), dec_hooks, tv_req),
        struct(OOB, tw_msgspec.Encoder(), dec_oob, tv_req),
        struct(HOOKS_RAW, msgspec.msgpack.Encoder(enc_hook=raw.enc_hook), dec_hooks, tv_req),
        struct(OOB_RAW, tw_msgspec.Encoder(codec="raw"), dec_oob, tv_req),
        m(G_JSON, "msgspec.json(list[int])", lambda: msgspec.json.encode(body_list),
          lambda: msgspec.json.decode(ms_json), True),
        m(G_JSON, "json.dumps/loads(list[int])", lambda: json.dumps(body_list),
          lambda: json.loads(json_text)),
        m(G_JSON, B64, lambda: tokenwire.to_base64(tv), lambda: tokenwire.from_base64(text)),
        m(G_JSON, B64_LIST, lambda: tokenwire.to_base64(lst), lambda: tokenwire.from_base64(text)),
    ] + ([
        m(G_JSON, B64 + " (binascii)", lambda: _binascii(tokenwire.to_base64, tv),
          lambda: _binascii(tokenwire.from_base64, text)),
    ] if tokenwire.text.base64_backend() == "pybase64" else [])


def _binascii(fn: Callable[[Any], object], arg: Any) -> object:
    # The fallback, measured beside pybase64 (switching costs two global stores).
    previous = tokenwire.text._set_pybase64(False)
    try:
        return fn(arg)
    finally:
        tokenwire.text._set_pybase64(previous)


TARGETS: list[Target] = [
    ratio_target("Struct with TokenVector via hooks (default codec) >= 30x faster than list[int] "
                 "via msgspec", G_MSGPACK, HOOKS, 30),
    ratio_target("hooks, codec=\"raw\" >= 100x faster", G_MSGPACK, HOOKS_RAW, 100),
    ratio_target("out-of-band Encoder/Decoder (default codec) >= 30x faster", G_MSGPACK, OOB, 30),
    ratio_target("out-of-band Encoder/Decoder, codec=\"raw\" >= 200x faster", G_MSGPACK, OOB_RAW,
                 200),
    ratio_target("from_base64(to_base64(tv)) >= 25x faster than msgspec.json of the list", G_JSON,
                 B64, 25),
    ratio_target("to_base64(list) + from_base64 >= 10x faster than msgspec.json of the list",
                 G_JSON, B64_LIST, 10),
]


# --------------------------------------------------------------------------------------------
# vLLM's host encoder and decoder, over zmq

CUSTOM_TYPE_RAW_VIEW = 3          # the host's own Ext codes (1-5); tokenwire uses 84 and 85
MSGPACK_ZERO_COPY_THRESHOLD = 256
REQUEST_TYPE_ADD = b"\x00"


class HostEncoder:
    """The host's encoder: ndarrays of >= 256 bytes into ``self.aux_buffers`` (None outside
    `encode`), smaller ones inline. `tokenwire` (a `Hooks`, or None for the stock host) adds
    the one TokenVector line. tests/test_msgspec.py runs it and `HostDecoder` too."""

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
        if self.tw is not None and code in (self.tw.ext_code, self.tw.buffer_ext_code):
            return self.tw.aux_ext_hook(code, data, self.aux_buffers)     # the tokenwire line
        if code == CUSTOM_TYPE_RAW_VIEW:
            return msgspec.msgpack.Ext(code, bytes(data))
        raise NotImplementedError(f"Extension type code {code} is not supported")


G_ZMQ = "vLLM shape over zmq: encode, send, recv, decode, engine list (.copy())"
G_CODEC = "vLLM shape: encode + decode alone"
LIST = "prompt_token_ids: list[int], stock msgspec"
AUTO = "prompt_token_ids: TokenVector (default codec)"
RAW = "prompt_token_ids: TokenVector, codec=\"raw\""


def host_methods(ids: np.ndarray) -> list[Method]:
    lst, tv = ids.tolist(), as_tokens(ids)
    push, pull = push_pull("input.sock")               # the engine core's input socket
    rows: list[Method] = []
    alone_rows: list[Method] = []
    for name, cls, prompt, hooks in (
            (LIST, ListRequest, lst, None),
            (AUTO, TokenRequest, tv, tw_msgspec.Hooks()),
            (RAW, TokenRequest, tv, tw_msgspec.Hooks(codec="raw"))):
        req = engine_request(cls, prompt)
        enc, dec = HostEncoder(hooks), HostDecoder(cls, hooks)
        frames = [bytes(f) for f in enc.encode(req)]          # what the engine holds

        def through_zmq(enc: HostEncoder = enc, dec: HostDecoder = dec, req: Any = req) -> object:
            push.send_multipart((REQUEST_TYPE_ADD, *enc.encode(req)), copy=False)
            request_type, *data_frames = pull.recv_multipart(copy=False)
            got = dec.decode(data_frames)
            return got.prompt_token_ids.copy()                 # the engine's own list

        def alone(enc: HostEncoder = enc, dec: HostDecoder = dec, req: Any = req,
                  frames: list[bytes] = frames) -> object:
            enc.encode(req)
            return dec.decode(list(frames))      # a new list per message, as received

        if dec.decode(frames).prompt_token_ids.copy() != lst:
            raise SystemExit(f"{name}: the ids that came back differ from those sent")
        nbytes = sum(len(f) for f in frames)
        rows.append(Method(name, {"time": through_zmq}, G_ZMQ, hooks is None, nbytes))
        alone_rows.append(Method(name, {"time": alone}, G_CODEC, hooks is None, nbytes))
    return rows + alone_rows


TARGETS += [
    ratio_target("through zmq, engine list included, >= 6x faster than list[int]", G_ZMQ, AUTO, 6),
    ratio_target("encode + decode alone >= 30x faster than list[int]", G_CODEC, AUTO, 30),
]


def methods(n: int, args: argparse.Namespace) -> list[Method]:
    ids = load_ids(n, args.ids)
    return struct_methods(ids) + host_methods(ids)


def _sizes(results: Sequence[Result], args: argparse.Namespace) -> None:
    """Not timed: the sizes of the text and of the host's messages (main frame + buffers)."""
    print(f"\nSizes (ids: {args.ids or 'synthetic token_stream'}):")
    by = {(r.name, r.isl): r.nbytes or 0 for r in results if r.group == G_CODEC}
    for n in sorted({r.isl for r in results}):
        ids = load_ids(n, args.ids)
        chars = len(tokenwire.to_base64(ids))
        width = int(ids.max()).bit_length()
        json_chars = len(msgspec.json.encode(ids.tolist()))
        print(f"  {verdict(width > 18 or chars / n <= 3.1 if n == 40_000 else None)} ISL {n:,}: "
              f"base64 text {chars / n:.3f} characters per id ({width}-bit ids; target <= 3.1), "
              f"JSON array {json_chars / n:.3f}; pybase64: "
              f"{tokenwire.text.base64_backend() == 'pybase64'}")
        cells = [f"{name.split(':')[-1].strip()} {by[(name, n)]:,} B "
                 f"({by[(name, n)] / n:.3f} B/id)" for name in (LIST, AUTO, RAW)]
        print(f"  {verdict(by[(AUTO, n)] <= by[(LIST, n)])} ISL {n:,}: message bytes: "
              + "; ".join(cells) + "  (default <= list)")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ids", metavar="FILE", default=None,
                   help="raw little-endian int32 ids (e.g. from bench/pfor_ids.py); "
                        "default: the synthetic stream of bench/data.py")


def main(argv: list[str] | None = None) -> int:
    return suite_main(argv, Suite(
        name="msgspec", prog="python -m bench msgspec", doc=__doc__ or "", methods=methods,
        targets=TARGETS, note=f"{GROUPED_NOTE}; base64 via {tokenwire.text.base64_backend()}",
        after=_sizes, add_arguments=_add_arguments))
