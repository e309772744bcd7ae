"""Benchmark tokenwire's wire codecs against pickle, msgspec, numpy, zstd and lz4, side by side.

    python bench/bench_codec.py                      # ISL 1k / 40k / 128k, table + target check
    python bench/bench_codec.py --isl 40000 --json out.json --plot out.png

The same as the installed `tokenwire bench` (tokenwire/benchmarks/codec.py); this is its
standalone entry point.
"""

import sys

from tokenwire.benchmarks.codec import main

if __name__ == "__main__":
    sys.exit(main())
