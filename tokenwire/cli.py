"""The `tokenwire` command (also `python -m tokenwire`).

  tokenwire bench     codec benchmark against pickle, msgspec, numpy, zstd, lz4 (table + plot);
                      --suite core|request|msgspec for the grouped suites
  tokenwire inspect   print and validate a frame's header
  tokenwire e2e       proxy process -> worker process over pyzmq (and Ray), submit latency + GIL
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _inspect(argv: list[str]) -> int:
    import tokenwire

    p = argparse.ArgumentParser(prog="tokenwire inspect",
                                description="Print a frame's header and validate the whole frame.")
    p.add_argument("file", help="a file holding one frame, or - for standard input")
    p.add_argument("--vocab-size", type=int, default=None, help="also check every id is below this")
    p.add_argument("--show", type=int, default=8, metavar="N", help="print the first N ids of each sequence")
    args = p.parse_args(argv)
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else open(args.file, "rb").read()
    except OSError as e:
        print(f"tokenwire inspect: {e}", file=sys.stderr)
        return 2
    try:
        info = tokenwire.frame_info(data)
        seqs = tokenwire.decode_many(data, vocab_size=args.vocab_size)
    except tokenwire.WireFormatError as e:
        print(f"tokenwire inspect: invalid frame ({len(data)} bytes): {e}", file=sys.stderr)
        return 1
    total = sum(info.counts)
    print(f"frame:     {info.nbytes} bytes, version {info.version}")
    print(f"codec:     {info.codec}, {info.width} bits per id")
    print(f"sequences: {len(info.counts)} ({', '.join(f'{c:,}' for c in info.counts)} ids; {total:,} in all)")
    print(f"checksum:  {'present, verified' if info.checksum else 'none'}")
    if total:
        print(f"size:      {info.nbytes / total:.3f} bytes per id (raw int32: 4)")
    for i, s in enumerate(seqs):
        head = ", ".join(str(v) for v in s[: args.show])
        more = ", ..." if len(s) > args.show else ""
        print(f"  [{i}] [{head}{more}]")
    print("valid")
    return 0


#: `tokenwire bench --suite NAME`: the module whose main() runs that suite (codec by default).
BENCH_SUITES = {
    "codec": "tokenwire.benchmarks.codec",
    "core": "tokenwire.benchmarks.core",
    "request": "tokenwire.benchmarks.request",
    "msgspec": "tokenwire.benchmarks.msgspec_json",
}


def _bench(argv: list[str]) -> int:
    import importlib

    suite = "codec"
    for i, arg in enumerate(argv):
        if arg == "--suite" or arg.startswith("--suite="):
            suite = arg.partition("=")[2] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            del argv[i: i + (1 if "=" in arg else 2)]
            break
    if suite not in BENCH_SUITES:
        print(f"tokenwire bench: unknown suite {suite!r} (choose from {', '.join(BENCH_SUITES)})",
              file=sys.stderr)
        return 2
    main: Any = importlib.import_module(BENCH_SUITES[suite]).main
    return int(main(argv))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"bench", "inspect", "e2e"}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print(__doc__.strip(), file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\ntokenwire: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "bench":
        return _bench(rest)
    if cmd == "e2e":
        from tokenwire.benchmarks.e2e import main as e2e_main
        return e2e_main(rest)
    return _inspect(rest)


if __name__ == "__main__":
    sys.exit(main())
