"""codec="zstd" against zstd level 1 over the plain int32 bytes and OpenZL, on real token ids.

Reads the `{tokenizer}_{corpus}.i32` files bench/pfor_ids.py writes and prints, per stream and
length, bytes per id and the median encode and decode times as ratios to zstd-1 over the int32
bytes (every row interleaved, one call a sample):

    python bench/pfor_ids.py /tmp/ids
    python -m bench.codec_zstd /tmp/ids [--isl 1000,8000,40000,131072] [--streams qwen_text ...]
                                        [--below-65536]

Rows: zstd levels 1 and 3 over the int32, u16 (when every id fits) and packed payloads,
tokenwire's codec="zstd" (decoded by tokenwire.decode), and OpenZL's field-aware LZ when the
`openzl` package is installed (in no extra).
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

import tokenwire
from bench.harness import Method, codec_method, ints, measure


def openzl_codec() -> Optional[Tuple[Callable[[np.ndarray], bytes], Callable[[bytes], np.ndarray]]]:
    """OpenZL's field-aware LZ graph over one numeric (int32) input as (encode, decode), or
    None when the `openzl` package is not installed (bench/codec.py's optional row too)."""
    import importlib

    try:
        ext: Any = importlib.import_module("openzl.ext")
        graphs: Any = importlib.import_module("openzl.ext.graphs")
    except ImportError:
        return None
    compressor = ext.Compressor()
    compressor.select_starting_graph(graphs.FieldLz()(compressor))
    cctx = ext.CCtx()
    cctx.ref_compressor(compressor)
    cctx.set_parameter(ext.CParam.StickyParameters, 1)
    cctx.set_parameter(ext.CParam.FormatVersion, ext.MAX_FORMAT_VERSION)
    dctx = ext.DCtx()

    def enc(ids: np.ndarray) -> bytes:
        return bytes(cctx.compress([ext.Input(ext.Type.Numeric, ids)]))

    def dec(blob: bytes) -> np.ndarray:
        return np.asarray(dctx.decompress(blob)[0].content.as_nparray())

    enc.compressor = compressor      # type: ignore[attr-defined]  # kept alive with cctx
    return enc, dec


def methods_for(ids: np.ndarray) -> list[Method]:
    """zstd levels 1 and 3 over the int32, u16 (when every id fits) and packed payloads
    (decoded to bytes), tokenwire's codec="zstd" and OpenZL when installed."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    sources: list[tuple[str, Any]] = [("int32", ids)]
    if ids.min() >= 0 and ids.max() < 65536:
        sources.append(("u16", ids.astype("<u2")))
    sources.append(("packed", tokenwire.encode(ids, codec="packed")[16:]))

    def zstd(level: int, src: Any) -> Callable[[], Any]:
        cctx = zstandard.ZstdCompressor(level=level)
        return lambda: cctx.compress(src)

    out = [codec_method(f"zstd-{level}({name})", zstd(level, src),
                        lambda b: lambda: dctx.decompress(b))
           for level in (1, 3) for name, src in sources]
    out.append(codec_method("tokenwire zstd", lambda: tokenwire.encode(ids, codec="zstd"),
                            lambda b: lambda: tokenwire.decode(b)))
    oz = openzl_codec()
    if oz is not None:
        oz_enc, oz_dec = oz
        out.append(codec_method("openzl FieldLz", lambda: oz_enc(ids),
                                lambda b: lambda: oz_dec(b)))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids_dir", type=pathlib.Path, help="bench/pfor_ids.py's output")
    ap.add_argument("--isl", default="1000,8000,40000,131072")
    ap.add_argument("--streams", nargs="+", default=["qwen_text", "qwen_code", "cl100k_text",
                                                      "cl100k_code"])
    ap.add_argument("--below-65536", action="store_true",
                    help="drop the ids >= 65,536 from each stream (the u16 rows then apply)")
    args = ap.parse_args(argv)
    for stream in args.streams:
        path = args.ids_dir / f"{stream}.i32"
        if not path.exists():
            print(f"skip {stream}: no {path}")
            continue
        every = np.fromfile(path, dtype="<i4")
        if args.below_65536:
            every = every[every < 65536]
        for n in ints(args.isl):
            ids = np.ascontiguousarray(every[:n])
            # One call a sample, the rows interleaved: a call's window is short on a busy machine.
            rows = measure(methods_for(ids), n, max(11, min(201, 4_000_000 // n)), 0)
            enc, dec = (rows[0].stats[op].median_us for op in ("encode", "decode"))
            print(f"\n{stream}, {ids.size:,} ids (max {ids.max():,})      B/id   "
                  f"encode us  x zstd-1   decode us  x zstd-1")
            for r in rows:
                te, td = r.stats["encode"].median_us, r.stats["decode"].median_us
                print(f"  {r.name:20s} {(r.nbytes or 0) / ids.size:6.3f} {te:10.1f} "
                      f"{te / enc:8.2f} {td:11.1f} {td / dec:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
