"""What every atheris target of fuzz/ shares: its command line and the libFuzzer run, its
progress lines, and where an exception was raised.

    def main() -> int:
        return fuzz_main(__doc__, test_one_input, "msgspec", seconds=60, max_len=4096)

`--seconds` (the target's default) and libFuzzer's own arguments after `--`; a fresh corpus
directory, which `seed(corpus)` may fill first; `fixed_seed` runs with -seed=1 unless another
seed is given, so CI's short run replays the same inputs every time.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import traceback
from types import CodeType
from typing import Callable, Dict, Optional

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
