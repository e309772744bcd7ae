"""Benchmark the C++ hand-off: tokenwire::to_vector / tokenwire::decode against memcpy and
nanobind's stock std::vector caster, in the nanobind engine stand-in (built on first use).

    python bench/bench_cpp.py                      # ISL 1k / 40k / 128k, table + target check
    python bench/bench_cpp.py --isl 40000 --json out.json

The measurement code lives in the package (tokenwire/benchmarks/cpp.py).
"""

import sys

from tokenwire.benchmarks.cpp import main

if __name__ == "__main__":
    sys.exit(main())
