"""Benchmark TokenVector in msgspec (msgpack hooks, out-of-band frames) and JSON (base64) stacks
against list[int], side by side.

    python bench/bench_msgspec.py                   # ISL 1k / 40k / 128k, table + target check
    python bench/bench_msgspec.py --isl 40000 --json out.json --repeat 31

Same as `tokenwire bench-msgspec`; the code lives in tokenwire/benchmarks/msgspec_json.py.
"""

import sys

from tokenwire.benchmarks.msgspec_json import main

if __name__ == "__main__":
    sys.exit(main())
