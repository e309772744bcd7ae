"""What every atheris target of fuzz/ shares: its command line and the libFuzzer run, its
progress lines, where an exception was raised, and the one edit of a frame's bytes.

    def main() -> int:
        return fuzz_main(__doc__, test_one_input, "msgspec", seconds=60, max_len=4096)

`--seconds` (the target's default) and libFuzzer's own arguments after `--`; a fresh corpus
directory, which `seed(corpus)` may fill first; `fixed_seed` runs with -seed=1 unless another
seed is given, so CI's short run replays the same inputs every time.
"""

from __future__ import annotations

import argparse
import pathlib
import struct
import sys
import tempfile
import traceback
from types import CodeType
from typing import Callable, Dict, Optional, Sequence

import atheris


def fuzz_main(doc: Optional[str], test_one_input: Callable[[bytes], None], name: str, *,
              seconds: int, max_len: int, fixed_seed: bool = False,
              seed: Optional[Callable[[pathlib.Path], None]] = None) -> int:
    p = argparse.ArgumentParser(description=(doc or name).split("\n\n")[0])
    p.add_argument("--seconds", type=int, default=seconds, help="how long to fuzz")
    p.add_argument("libfuzzer_args", nargs="*", help="extra libFuzzer arguments (after --)")
    args = p.parse_args()
    corpus = tempfile.mkdtemp(prefix=f"tokenwire-fuzz-{name}-")
    if seed is not None:
        seed(pathlib.Path(corpus))
    fixed = ["-seed=1"] if fixed_seed and not any(a.startswith("-seed=")
                                                  for a in args.libfuzzer_args) else []
    argv = [sys.argv[0], f"-max_total_time={args.seconds}", f"-max_len={max_len}",
            "-rss_limit_mb=2048", *fixed, *args.libfuzzer_args, corpus]
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()
    return 0


def count_input(name: str, stats: Dict[str, int], line: Callable[[], str],
                first: int = 1 << 14) -> None:
    """Count one input in ``stats["inputs"]`` and, at each power of two from `first`, print
    ``tokenwire fuzz: NAME N inputs, LINE`` to stderr (libFuzzer exits without running Python's
    atexit, so a target reports as it goes)."""
    stats["inputs"] += 1
    count = stats["inputs"]
    if count >= first and count & (count - 1) == 0:
        print(f"tokenwire fuzz: {name} {count} inputs, {line()}", file=sys.stderr, flush=True)


def raised_in(e: BaseException, code: CodeType) -> bool:
    """Was `e` raised while `code` (a function's ``__code__``) ran?"""
    return any(frame.f_code is code for frame, _ in traceback.walk_tb(e.__traceback__))


@atheris.instrument_func
def edit_bytes(fdp: atheris.FuzzedDataProvider, data: bytes, *, words: Sequence[int],
               small: int = 0, align: int = 1, max_insert: int = 16) -> bytes:
    """One edit of a frame: a bit flipped, a byte set, a little-endian 64-bit word written at a
    multiple of `align` (one of `words`, a random one, or with `small` one in [0, small]: the
    counts, lengths and indices a decoder must bound), a cut, or an insert of 1 to `max_insert`
    bytes. `words` empty: no word edits (then that choice inserts)."""
    b = bytearray(data)
    op = fdp.ConsumeIntInRange(0, 4)
    if op == 0 and b:
        b[fdp.ConsumeIntInRange(0, len(b) - 1)] ^= 1 << fdp.ConsumeIntInRange(0, 7)
    elif op == 1 and b:
        b[fdp.ConsumeIntInRange(0, len(b) - 1)] = fdp.ConsumeIntInRange(0, 255)
    elif op == 2 and len(b) >= 8 and words:
        at = align * fdp.ConsumeIntInRange(0, (len(b) - 8) // align)
        choices = [*words, fdp.ConsumeIntInRange(0, 2**64 - 1)]
        if small:
            choices.append(fdp.ConsumeIntInRange(0, small))
        struct.pack_into("<Q", b, at, choices[fdp.ConsumeIntInRange(0, len(choices) - 1)])
    elif op == 3:
        del b[fdp.ConsumeIntInRange(0, len(b)):]
    else:
        at = fdp.ConsumeIntInRange(0, len(b))
        b[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, max_insert))
    return bytes(b)
