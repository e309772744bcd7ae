"""`python -m bench`: tokenwire's wire codecs against the usual ways of shipping token ids;
docs/benchmarks.md, "The codec table", describes the rows, the columns and the ids.
"""

from __future__ import annotations

import argparse
import importlib
import pickle
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import tokenwire
from bench.data import SamplingParams, VOCABS, load_ids, token_stream
from bench.harness import (Figures, Method, Result, Stat, Suite, Target, codec_method, machine,
                           measure, pyplot, save_plot, suite_main)

PICKLE_LIST = "pickle(list[int])"
MEMCPY = "memcpy (np.copyto int32)"
PACKED, U16, RAW = "tokenwire packed", "tokenwire u16 (ids < 65,536)", "tokenwire raw"


def _optional(name: str) -> Any:
    """The module `name`, or None when it is not installed: a peer's row is optional."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _zstd_method(zstandard: Any, level: int, ids: np.ndarray) -> Method:
    cctx, dctx = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
    return codec_method(f"zstd-{level}(int32 bytes)", lambda: cctx.compress(ids),
                        lambda b: lambda: np.frombuffer(dctx.decompress(b), np.int32))


def compression_peers(ids: np.ndarray) -> list[Method]:
    """OpenZL's field-aware LZ and integer-compression libraries, each from an int32 ndarray to
    its own bytes and back to an ndarray (preallocated output where the API wants one); rows
    only for those installed (`openzl` is in no extra: pip install openzl)."""
    out, u = [], ids.view(np.uint32)
    ext, graphs = _optional("openzl.ext"), _optional("openzl.ext.graphs")
    fastpfor, svb, pcodec = map(_optional, ("pyfastpfor", "libstreamvbyte", "pcodec"))
    if ext is not None and graphs is not None:      # FieldLz over one numeric (int32) input
        compressor = ext.Compressor()
        compressor.select_starting_graph(graphs.FieldLz()(compressor))
        cctx, dctx = ext.CCtx(), ext.DCtx()
        cctx.ref_compressor(compressor)
        cctx.set_parameter(ext.CParam.StickyParameters, 1)
        cctx.set_parameter(ext.CParam.FormatVersion, ext.MAX_FORMAT_VERSION)

        def oz_enc() -> bytes:
            return bytes(cctx.compress([ext.Input(ext.Type.Numeric, ids)]))

        oz_enc.compressor = compressor      # type: ignore[attr-defined]  # kept alive with cctx
        out.append(codec_method("openzl FieldLz(int32)", oz_enc, lambda b: lambda: np.asarray(
            dctx.decompress(b)[0].content.as_nparray())))
    if fastpfor is not None:
        codec = fastpfor.getCodec("simdfastpfor128")

        def fp_enc() -> np.ndarray:
            buf = np.empty(len(u) + 1024, np.uint32)
            return buf[:codec.encodeArray(u, len(u), buf, len(buf))]

        def fp_dec(blob: np.ndarray) -> Callable[[], object]:
            def dec() -> np.ndarray:
                back = np.empty(len(u) + 1024, np.uint32)
                return back[:codec.decodeArray(blob, len(blob), back, len(back))]
            return dec

        out.append(codec_method("pyfastpfor simdfastpfor128", fp_enc, fp_dec))
    if svb is not None:
        out.append(codec_method("libstreamvbyte", lambda: svb.encode(u),
                                lambda b: lambda: svb.decode(b, len(u))))
    if pcodec is not None:
        standalone, config = _optional("pcodec.standalone"), pcodec.ChunkConfig()
        out.append(codec_method("pcodec", lambda: standalone.simple_compress(ids, config),
                                lambda b: lambda: standalone.simple_decompress(b)))
    return out


def methods_for(ids: np.ndarray, small: np.ndarray) -> list[Method]:
    """Every row at one ISL, a peer's where it is installed. `small` is a stream whose ids are
    < 65,536 (for the u16 row)."""
    lst, dst = ids.tolist(), np.empty_like(ids)
    msgspec, zstandard, lz4_block = map(_optional, ("msgspec", "zstandard", "lz4.block"))
    out = [Method(MEMCPY, {"encode": lambda: np.copyto(dst, ids),
                           "decode": lambda: np.copyto(dst, ids)}, nbytes=ids.nbytes),
           codec_method(PICKLE_LIST, lambda: pickle.dumps(lst, 5),
                        lambda b: lambda: pickle.loads(b))]
    if msgspec is not None:
        enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()
        out.append(codec_method("msgspec.msgpack(list[int])", lambda: enc.encode(lst),
                                lambda b: lambda: dec.decode(b)))
    out += [codec_method("pickle(int32 ndarray)", lambda: pickle.dumps(ids, 5),
                         lambda b: lambda: pickle.loads(b)),
            codec_method("ndarray.tobytes / np.frombuffer", ids.tobytes,
                         lambda b: lambda: np.frombuffer(b, np.int32))]
    if zstandard is not None:
        out += [_zstd_method(zstandard, level, ids) for level in (1, 3)]
    if lz4_block is not None:
        out.append(codec_method("lz4.block(int32 bytes)", lambda: lz4_block.compress(ids),
                                lambda b: lambda: np.frombuffer(lz4_block.decompress(b), np.int32)))

    def wire(name: str, src: Any, **kw: Any) -> Method:
        return codec_method(name, lambda: tokenwire.encode(src, **kw),
                            lambda b: lambda: tokenwire.decode(b))

    tv, params = tokenwire.as_tokens(ids), SamplingParams()
    return out + [
        wire(RAW, ids, codec="raw"),
        wire(PACKED, ids, codec="packed"),
        wire("tokenwire pfor", ids, codec="pfor"),
        wire("tokenwire auto", ids),
        wire("tokenwire auto, from list", lst),
        wire(U16, small, codec="u16"),
        wire("tokenwire packed+crc32c", ids, codec="packed", checksum=True),
        wire("tokenwire raw+crc32c", ids, codec="raw", checksum=True),
        *([wire("tokenwire zstd", ids, codec="zstd")] if zstandard is not None else []),
        *compression_peers(ids),
        Method("tokenwire as_tokens(list) / tolist", {
            "encode": lambda: tokenwire.as_tokens(lst), "decode": tv.tolist}, nbytes=ids.nbytes),
        codec_method("tokenwire GenerationRequest pickle",
                     lambda: pickle.dumps(tokenwire.GenerationRequest(lst, params, id=1), 5),
                     lambda b: lambda: pickle.loads(b)),
    ]


@dataclass
class Row:
    name: str
    isl: int
    encode: Stat
    decode: Stat
    bytes_per_token: float
    x_pickle: float       # pickle(list) encode+decode time / this row's (> 1 is faster)
    x_memcpy: float       # this row's encode+decode time / two memcpys


PER_CALL = "per call"
PER_CALL_IDS = 16


def rows_of(results: Sequence[Result]) -> list[Row]:
    """The codec table's rows (not the per-call ones), with their ratios at their ISL."""
    us = {(r.name, r.isl): r.total_us() for r in results}
    return [Row(r.name, r.isl, r.stats["encode"], r.stats["decode"], (r.nbytes or 0) / r.isl,
                us[(PICKLE_LIST, r.isl)] / r.total_us(), r.total_us() / us[(MEMCPY, r.isl)])
            for r in results if r.group != PER_CALL]


def print_rows(rows: Sequence[Row]) -> None:
    for isl in sorted({r.isl for r in rows}):
        print(f"\nISL {isl:,}")
        print(f"  {'method':<36}{'encode µs':>11}{'±IQR':>6}{'decode µs':>11}{'±IQR':>6}"
              f"{'bytes/id':>9}{'x pickle':>10}{'x memcpy':>10}")
        for r in (r for r in rows if r.isl == isl):
            print(f"  {r.name:<36}{r.encode.median_us:>11.2f}{r.encode.iqr_pct:>5.0f}%"
                  f"{r.decode.median_us:>11.2f}{r.decode.iqr_pct:>5.0f}%{r.bytes_per_token:>9.2f}"
                  f"{r.x_pickle:>9.1f}x{r.x_memcpy:>9.2f}x")


def per_call(repeat: int, round_s: float) -> list[Result]:
    """Per-call overhead: a 16-id frame (list in, TokenVector out), rows of group `PER_CALL`."""
    lst = token_stream(PER_CALL_IDS).tolist()
    frame = tokenwire.encode(lst)
    methods = [Method("encode(list of 16)", {"time": lambda: tokenwire.encode(lst)}, PER_CALL),
               Method("decode(16-id frame)", {"time": lambda: tokenwire.decode(frame)}, PER_CALL),
               Method("pickle.dumps(list of 16)", {"time": lambda: pickle.dumps(lst, 5)}, PER_CALL)]
    return measure(methods, PER_CALL_IDS, repeat, round_s)


def _rate(description: str, name: str, op: str, least: float) -> Target:
    """At least `least` G ids per second for one operation of a row: an absolute speed (the
    x memcpy targets are the machine-independent ones)."""
    return Target(description, lambda f: f.isl / f.us(name, op) / 1e3, lambda v: v >= least,
                  lambda f, v: f"{v:.2f} G/s", miss="an absolute speed, missed first on a slower "
                  "or busy CPU; see the x memcpy column")


def _vs_memcpy(description: str, name: str, op: str, most: float, miss: str) -> Target:
    """At most `most` times one memcpy of the ids for one operation of a row."""
    return Target(description, lambda f: f.us(name, op) / f.us(MEMCPY, "encode"),
                  lambda v: v <= most, lambda f, v: f"{v:.2f}x memcpy", miss=miss)


def _per_call(name: str) -> Target:
    return Target(f"16-id frame {name} <= 1 µs", lambda f: f.us(name, isl=PER_CALL_IDS),
                  lambda t: t <= 1.0, lambda f, t: f"{t:.3f} µs",
                  miss="a short request's fixed cost is over 1 µs here; the per-call line "
                       "below compares it with pickle.dumps")


TARGETS: list[Target] = [
    _rate("packed decode >= 3 G tokens/s", PACKED, "decode", 3.0),
    _vs_memcpy("packed decode <= 3x memcpy", PACKED, "decode", 3.0,
               "decoding packed costs over 3 copies of the ids here: where bytes are cheap, "
               "use raw"),
    _rate("packed encode >= 1.2 G tokens/s (max scan incl.)", PACKED, "encode", 1.2),
    _rate("u16 encode >= 5 G tokens/s", U16, "encode", 5.0),
    _rate("u16 decode >= 5 G tokens/s", U16, "decode", 5.0),
    _vs_memcpy("raw encode <= 2x memcpy", RAW, "encode", 2.0,
               "a raw frame costs over 2 copies of its ids here (it should cost one; noise on a "
               "busy machine)"),
    _per_call("encode(list of 16)"),
    _per_call("decode(16-id frame)"),
]


def payload_target(streams: dict[int, np.ndarray]) -> Target:
    """The packed frame is exactly header + ceil(n * width / 8) bytes (width of the run's ids at
    the target ISL, `streams`); the value is the difference in bytes."""
    def expected(f: Figures) -> int:
        return 16 + -(-f.isl * int(streams[f.isl].max()).bit_length() // 8)

    return Target("packed payload == ceil(n*w/8)",
                  lambda f: float((f.row(PACKED).nbytes or 0) - expected(f)),
                  lambda diff: diff == 0,
                  lambda f, diff: f"{f.row(PACKED).nbytes} bytes, {expected(f)} expected "
                                  f"(16-byte header + ceil(n * width / 8))")


# The plot shows a few series, each once: peers muted and dashed, tokenwire strong and solid.
PLOT_PEERS = [PICKLE_LIST, "msgspec.msgpack(list[int])", "zstd-1(int32 bytes)",
              "ndarray.tobytes / np.frombuffer"]
PLOT_TOKENWIRE = ["tokenwire GenerationRequest pickle", "tokenwire auto, from list",
                  "tokenwire packed", "tokenwire raw"]
_PEER_GREYS = ["#555555", "#7a7a7a", "#9a9a9a", "#bbbbbb"]
_TW_COLOURS = ["#d62728", "#ff7f0e", "#1f77b4", "#2ca02c"]


def plot(rows: Sequence[Row], path: str, title: str) -> None:
    """A PNG for people: (1) time per request against ISL, a few peers muted and tokenwire
    bold; (2) the speed-up over pickle(list) at each ISL, labelled; (3) bytes per id."""
    plt = pyplot()
    by = {(r.name, r.isl): r for r in rows}
    isls = sorted({r.isl for r in rows})
    peers = [n for n in PLOT_PEERS if (n, isls[0]) in by]
    ours = [n for n in PLOT_TOKENWIRE if (n, isls[0]) in by]
    fig, (ax_t, ax_x, ax_b) = plt.subplots(1, 3, figsize=(17, 5.8),
                                           gridspec_kw={"width_ratios": [1.15, 1.1, 0.9]})

    def line(name: str, **style: Any) -> None:
        """A row's encode + decode time against ISL on the first panel."""
        ax_t.plot(isls, [by[(name, i)].encode.median_us + by[(name, i)].decode.median_us
                         for i in isls], marker="o", **{"label": name, **style})

    for name, grey in zip(peers, _PEER_GREYS):
        line(name, color=grey, linestyle="--", linewidth=1.4, markersize=4)
    for name, colour in zip(ours, _TW_COLOURS):
        line(name, color=colour, linewidth=2.6, markersize=6)
    # Two copies (np.copyto each way); raw's decode is a view, so raw can sit below it.
    line(MEMCPY, color="black", linestyle=":", linewidth=1.2, markersize=0,
         label="memcpy, each way (raw decodes as a view)")
    ax_t.set(xscale="log", yscale="log", xlabel="ISL (ids per request)",
             ylabel="encode + decode per request (µs, log)",
             title="Time per request (lower is better)")
    ax_t.grid(True, which="major", alpha=0.3)
    ax_t.legend(fontsize=8, loc="upper left", frameon=False)

    # The headline: how many times faster than pickle(list), per ISL, one bar group per ISL.
    width = 0.8 / max(1, len(ours))
    for k, (name, colour) in enumerate(zip(ours, _TW_COLOURS)):
        xs = [j + (k - (len(ours) - 1) / 2) * width for j in range(len(isls))]
        ys = [by[(name, i)].x_pickle for i in isls]
        bars = ax_x.bar(xs, ys, width * 0.92, color=colour, label=name)
        ax_x.bar_label(bars, labels=[f"{y:.0f}×" if y >= 10 else f"{y:.1f}×" for y in ys],
                       fontsize=7, padding=2)
    ax_x.axhline(1.0, color="#555555", linestyle="--", linewidth=1.2,
                 label="pickle(list[int]) = 1×")
    ax_x.set(yscale="log", xticks=range(len(isls)), xticklabels=[f"{i:,}" for i in isls],
             xlabel="ISL (ids per request)", ylabel="times faster than pickle(list[int]) (log)",
             title="Speed-up over pickle(list[int]), encode + decode")
    ax_x.set_ylim(0.5, max([r.x_pickle for r in rows if r.name in ours] + [2.0]) * 4)
    ax_x.grid(True, axis="y", which="major", alpha=0.3)
    ax_x.legend(fontsize=8, loc="upper left", frameon=False)

    # Wire size at the largest ISL: every codec once, peers grey, tokenwire coloured.
    big = isls[-1]
    sizes = sorted(((r.bytes_per_token, r.name) for r in rows
                    if r.isl == big and r.name != MEMCPY and r.bytes_per_token > 0), reverse=True)
    colours = [(_TW_COLOURS[ours.index(n)] if n in ours else "#d08080")
               if n.startswith("tokenwire") else "#aaaaaa" for _, n in sizes]
    bars = ax_b.barh([n for _, n in sizes], [b for b, _ in sizes], color=colours)
    ax_b.bar_label(bars, labels=[f"{b:.2f}" for b, _ in sizes], fontsize=7, padding=2)
    ax_b.set(xlabel="bytes per id on the wire", title=f"Wire size at ISL {big:,} (lower is better)")
    ax_b.set_xlim(0, max([b for b, _ in sizes] + [4.0]) * 1.18)
    ax_b.tick_params(axis="y", labelsize=7)
    from matplotlib.patches import Patch
    ax_b.legend(handles=[Patch(color=c, label=n) for n, c in zip(ours, _TW_COLOURS)]
                + [Patch(color="#d08080", label="other tokenwire codecs"),
                   Patch(color="#aaaaaa", label="peers")],
                fontsize=7, loc="upper center", bbox_to_anchor=(0.4, -0.12), ncol=2,
                frameon=False)
    ax_b.grid(True, axis="x", alpha=0.3)

    fig.suptitle(title, fontsize=8, color="#444444")
    save_plot(fig, path)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="measure only rows whose name contains one of these (pickle(list) and "
                        "memcpy are always kept: the ratios need them)")
    p.add_argument("--ids", metavar="I32_FILE",
                   help="real ids: a raw little-endian int32 file (bench/pfor_ids.py writes "
                        "them), repeated up to each ISL")
    p.add_argument("--plot", metavar="PNG", help="also draw time and size against ISL")


def _source(args: argparse.Namespace) -> str:
    """Where the run's ids come from, as its header and JSON name it."""
    return f"ids from {args.ids}" if args.ids else \
        f"Zipf stream over a {VOCABS['qwen']:,}-id vocabulary"


def _header(args: argparse.Namespace) -> str:
    return (f"tokenwire bench — {machine()}\nids: {_source(args)}; CRC-32C hardware: "
            f"{tokenwire._core.CRC32C_HARDWARE}")


def main(argv: list[str] | None = None) -> int:
    streams: dict[int, np.ndarray] = {}     # the run's ids by ISL, seeded or a file's

    def methods(n: int, args: argparse.Namespace) -> list[Method]:
        streams[n] = load_ids(n, args.ids)
        return [m for m in methods_for(streams[n], token_stream(n, VOCABS["llama2"], seed=1))
                if not args.only or m.name in (PICKLE_LIST, MEMCPY)
                or any(o.lower() in m.name.lower() for o in args.only)]

    def after(results: Sequence[Result], args: argparse.Namespace) -> None:
        small = [r for r in results if r.group == PER_CALL]
        print("\nper call (16 ids): " + ", ".join(f"{r.name} {r.total_us():.3f} µs" for r in small))
        if args.plot:
            plot(rows_of(results), args.plot, _header(args))

    return suite_main(argv, Suite(
        name="codec", prog="python -m bench", doc=__doc__ or "", methods=methods,
        targets=[*TARGETS, payload_target(streams)], repeat=11, round_ms=10.0,
        table=lambda results: print_rows(rows_of(results)),
        extra=lambda args: per_call(*((5, 0.003) if args.quick
                                      else (args.repeat, args.round_ms / 1e3))),
        after=after, add_arguments=_add_arguments, header=_header,
        json_meta=lambda args, results: {"source": _source(args)}))


if __name__ == "__main__":
    sys.exit(main())
