"""The `tokenwire` command (also `python -m tokenwire`).

  tokenwire inspect FILE     print a frame's header and validate the whole frame

`tokenwire COMMAND --help` describes each command's options. (The benchmarks are not installed:
they run from a clone, `python -m bench --help`.)

Exit codes: 0 success; 1 the command ran and found a problem (inspect: an invalid frame); 2 a
usage error or an unreadable file.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable


def _positive(text: str) -> int:
    """An argparse type: a whole number above 0 (a vocabulary size)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number above 0, not {text!r}")
    return n


def _inspect(argv: list[str]) -> int:
    import tokenwire

    p = argparse.ArgumentParser(prog="tokenwire inspect",
                                description="Print a frame's header and validate the whole frame.")
    p.add_argument("file", help="a file holding one frame, or - for standard input")
    p.add_argument("--vocab-size", type=_positive, default=None, help="also check every id is below this")
    p.add_argument("--show", type=int, default=8, metavar="N", help="print the first N ids of each sequence")
    args = p.parse_args(argv)
    try:
        if args.file == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(args.file, "rb") as f:
                data = f.read()
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


#: command -> the function that runs it on the rest of the command line (its help line is in the
#: docstring above).
COMMANDS: dict[str, Callable[[list[str]], int]] = {"inspect": _inspect}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tokenwire", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        # Each command parses its own options (and its own --help); the epilog lists them.
        sub.add_parser(name, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not argv:
        parser.print_help(sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        parser.print_usage(sys.stderr)
        print(f"tokenwire: unknown command {cmd!r} (choose from {', '.join(COMMANDS)})",
              file=sys.stderr)
        return 2
    return COMMANDS[cmd](rest)


if __name__ == "__main__":
    sys.exit(main())
