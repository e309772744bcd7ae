"""Benchmark tokenwire's core conversions against numpy and array.array, side by side.

    python bench/bench_core.py                      # ISL 1k / 40k / 128k, table + target check
    python bench/bench_core.py --isl 40000 --json out.json --repeat 31

The measurement code lives in the package (tokenwire/benchmarks/) so that the installed
`tokenwire bench` command runs the same thing; this script is its standalone entry point.
"""

import sys

from tokenwire.benchmarks.core import main

if __name__ == "__main__":
    sys.exit(main())
