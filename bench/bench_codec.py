"""Benchmark tokenwire's wire codecs against the usual ways of shipping token ids, side by side.

    python bench/bench_codec.py                      # ISL 1k / 40k / 128k, table + target check
    python bench/bench_codec.py --isl 40000 --json out.json --repeat 31

Same method as bench_core.py (and its helpers): every encoder and decoder of an ISL is measured
in one process, interleaved round by round; figures are medians of `--repeat` rounds with the
interquartile range as spread. Ids are bench_core.token_stream: Zipf ranks through a shuffled
151,936-id vocabulary (Qwen2/3), so packed runs at 18 bits. The u16 rows need ids < 65,536 and use
the same generator over a 32,000-id vocabulary (Llama 2). Each peer starts from its natural
input (a list for pickle/msgpack of lists, an int32 ndarray otherwise) and decodes to its natural
output (list, ndarray, TokenVector). Ratios: `x pickle` = pickle(list) time / this time (> 1 is
faster); `x memcpy` = this time / np.copyto of the same ids as int32 (the floor; < 1 is possible
only for zero-copy decoders).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_core import Method, machine, measure, token_stream  # noqa: E402

import tokenwire  # noqa: E402

try:
    import msgspec
except ImportError:  # pragma: no cover - bench extra
    msgspec = None
try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None
try:
    import lz4.block as lz4_block
except ImportError:  # pragma: no cover
    lz4_block = None


@dataclass
class Peer:
    name: str
    encode: Callable[[], object]
    decode: Callable[[], object]
    nbytes: int                      # encoded size
    n: int


@dataclass
class Result:
    name: str
    isl: int
    encode_us: float
    encode_iqr_pct: float
    decode_us: float
    decode_iqr_pct: float
    bytes_per_token: float
    encode_x_pickle: float           # pickle(list) encode time / this encode time
    decode_x_pickle: float
    encode_x_memcpy: float           # this encode time / memcpy time
    decode_x_memcpy: float


def _peer(name: str, enc: Callable[[], object], dec_of: Callable[[object], Callable[[], object]],
          n: int) -> Peer:
    blob = enc()
    size = len(blob) if isinstance(blob, (bytes, bytearray)) else memoryview(blob).nbytes
    return Peer(name, enc, dec_of(blob), size, n)


def peers_for(n: int) -> list[Peer]:
    ids = token_stream(n)
    lst = ids.tolist()
    small = token_stream(n, vocab=32_000, seed=1)        # for u16 (ids < 65,536)
    dst = np.empty_like(ids)
    out: list[Peer] = [
        Peer("memcpy (np.copyto int32)", lambda: np.copyto(dst, ids), lambda: np.copyto(dst, ids),
             ids.nbytes, n),
        _peer("pickle(list[int])", lambda: pickle.dumps(lst, 5),
              lambda b: lambda: pickle.loads(b), n),
    ]
    if msgspec is not None:
        enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()
        out.append(_peer("msgspec.msgpack(list[int])", lambda: enc.encode(lst),
                         lambda b: lambda: dec.decode(b), n))
    out += [
        _peer("pickle(int32 ndarray)", lambda: pickle.dumps(ids, 5),
              lambda b: lambda: pickle.loads(b), n),
        _peer("ndarray.tobytes / np.frombuffer", lambda: ids.tobytes(),
              lambda b: lambda: np.frombuffer(b, np.int32), n),
    ]
    if zstandard is not None:
        for level in (1, 3):
            cctx, dctx = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
            out.append(_peer(f"zstd-{level}(int32 bytes)", lambda c=cctx: c.compress(ids),
                             lambda b, d=dctx: lambda: np.frombuffer(d.decompress(b), np.int32), n))
    if lz4_block is not None:
        out.append(_peer("lz4.block(int32 bytes)", lambda: lz4_block.compress(ids),
                         lambda b: lambda: np.frombuffer(lz4_block.decompress(b), np.int32), n))
    for codec in ("raw", "packed", "auto"):
        out.append(_peer(f"tokenwire {codec}", lambda c=codec: tokenwire.encode(ids, codec=c),
                         lambda b: lambda: tokenwire.decode(b), n))
    out.append(_peer("tokenwire u16 (32k vocab)", lambda: tokenwire.encode(small, codec="u16"),
                     lambda b: lambda: tokenwire.decode(b), n))
    out.append(_peer("tokenwire packed+crc32c", lambda: tokenwire.encode(ids, codec="packed", checksum=True),
                     lambda b: lambda: tokenwire.decode(b), n))
    out.append(_peer("tokenwire raw+crc32c", lambda: tokenwire.encode(ids, codec="raw", checksum=True),
                     lambda b: lambda: tokenwire.decode(b), n))
    if zstandard is not None:
        out.append(_peer("tokenwire zstd", lambda: tokenwire.encode(ids, codec="zstd"),
                         lambda b: lambda: tokenwire.decode(b), n))
    return out


def run_isl(n: int, repeat: int, round_s: float) -> list[Result]:
    peers = peers_for(n)
    methods = []
    for p in peers:
        methods.append(Method("encode", p.name, p.encode, baseline=p.name == "pickle(list[int])"))
        methods.append(Method("decode", p.name, p.decode, baseline=p.name == "pickle(list[int])"))
    rows = measure(methods, n, repeat, round_s)
    by = {(r.group, r.name): r for r in rows}
    memcpy = by[("encode", peers[0].name)].median_us
    pk_enc, pk_dec = by[("encode", "pickle(list[int])")].median_us, by[("decode", "pickle(list[int])")].median_us
    results = []
    for p in peers:
        e, d = by[("encode", p.name)], by[("decode", p.name)]
        results.append(Result(p.name, n, e.median_us, e.iqr_pct, d.median_us, d.iqr_pct,
                              p.nbytes / n, pk_enc / e.median_us, pk_dec / d.median_us,
                              e.median_us / memcpy, d.median_us / memcpy))
    return results


def run_small(repeat: int, round_s: float) -> dict[str, float]:
    """Per-call overhead: a 16-id frame (list in, TokenVector out)."""
    lst = token_stream(16).tolist()
    frame = tokenwire.encode(lst)
    methods = [
        Method("16 ids", "encode(list of 16)", lambda: tokenwire.encode(lst), True),
        Method("16 ids", "decode(16-id frame)", lambda: tokenwire.decode(frame)),
        Method("16 ids", "pickle.dumps(list of 16)", lambda: pickle.dumps(lst, 5)),
    ]
    return {r.name: r.median_us for r in measure(methods, 16, repeat, round_s)}


def print_results(results: list[Result]) -> None:
    for isl in sorted({r.isl for r in results}):
        print(f"\nISL {isl:,}")
        print(f"  {'method':<34}{'enc µs':>10}{'±IQR':>6}{'dec µs':>10}{'±IQR':>6}{'B/tok':>7}"
              f"{'enc x pickle':>14}{'dec x pickle':>14}{'enc x memcpy':>14}{'dec x memcpy':>14}"
              f"{'dec Gtok/s':>12}")
        for r in (r for r in results if r.isl == isl):
            print(f"  {r.name:<34}{r.encode_us:>10.2f}{r.encode_iqr_pct:>5.0f}%{r.decode_us:>10.2f}"
                  f"{r.decode_iqr_pct:>5.0f}%{r.bytes_per_token:>7.2f}{r.encode_x_pickle:>13.1f}x"
                  f"{r.decode_x_pickle:>13.1f}x{r.encode_x_memcpy:>13.2f}x{r.decode_x_memcpy:>13.2f}x"
                  f"{isl / r.decode_us / 1e3:>12.2f}")


def check_targets(results: list[Result], small: dict[str, float], isl: int) -> bool:
    by = {(r.name, r.isl): r for r in results}
    if ("tokenwire packed", isl) not in by:
        return True
    packed, u16, raw = by[("tokenwire packed", isl)], by[("tokenwire u16 (32k vocab)", isl)], by[("tokenwire raw", isl)]
    gtok = lambda us: isl / us / 1e3  # noqa: E731 - ids per µs / 1e3 = G ids/s
    checks = [
        ("packed decode >= 3 G tokens/s", gtok(packed.decode_us) >= 3.0, f"{gtok(packed.decode_us):.2f} G/s"),
        ("packed decode <= 3x memcpy", packed.decode_x_memcpy <= 3.0, f"{packed.decode_x_memcpy:.2f}x memcpy"),
        ("packed encode >= 1.2 G tokens/s (max scan incl.)", gtok(packed.encode_us) >= 1.2, f"{gtok(packed.encode_us):.2f} G/s"),
        ("u16 encode >= 5 G tokens/s", gtok(u16.encode_us) >= 5.0, f"{gtok(u16.encode_us):.2f} G/s"),
        ("u16 decode >= 5 G tokens/s", gtok(u16.decode_us) >= 5.0, f"{gtok(u16.decode_us):.2f} G/s"),
        ("raw encode <= 2x memcpy", raw.encode_x_memcpy <= 2.0, f"{raw.encode_x_memcpy:.2f}x memcpy"),
        ("packed payload == ceil(n*w/8)", packed.bytes_per_token * isl == 16 + -(-isl * 18 // 8),
         f"{packed.bytes_per_token * isl:.0f} bytes incl. 16-byte header"),
    ]
    for name, us in small.items():
        if not name.startswith("pickle"):
            checks.append((f"16-id frame {name} <= 1 µs", us <= 1.0, f"{us:.3f} µs"))
    print(f"\nTargets at ISL {isl:,} (from this run):")
    ok_all = True
    for desc, ok, shown in checks:
        ok_all &= ok
        print(f"  [{'ok' if ok else 'MISSED'}] {desc}: {shown}")
    return ok_all


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--isl", default="1000,40000,128000", help="comma-separated prompt lengths")
    p.add_argument("--repeat", type=int, default=15, help="timed rounds per method (median)")
    p.add_argument("--round-ms", type=float, default=20.0, help="target duration of one round")
    p.add_argument("--target-isl", type=int, default=40_000, help="ISL the targets are checked at")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    isls = [int(x) for x in args.isl.split(",") if x]
    print(f"# tokenwire codec benchmark — {machine()}")
    print(f"# CRC-32C hardware: {tokenwire._core.CRC32C_HARDWARE}; zstandard "
          f"{getattr(zstandard, '__version__', 'absent')}; median of {args.repeat} interleaved "
          f"rounds of ~{args.round_ms:g} ms")
    results: list[Result] = []
    for isl in isls:
        print(f"measuring ISL {isl:,} ...", file=sys.stderr, flush=True)
        results += run_isl(isl, args.repeat, args.round_ms / 1e3)
    small = run_small(args.repeat, args.round_ms / 1e3)
    print_results(results)
    print("\nPer-call (16 ids): " + ", ".join(f"{k} {v:.3f} µs" for k, v in small.items()))
    ok = check_targets(results, small, args.target_isl)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "results": [asdict(r) for r in results],
                       "small_us": small}, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
