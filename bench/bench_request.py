"""Benchmark tokenwire.GenerationRequest against the same request holding a plain list field.

    python bench/bench_request.py                         # ISL 40k: table + the issue's targets
    python bench/bench_request.py --isl 1000,40000,128000 --json out.json --repeat 31

The code lives in tokenwire/benchmarks/request.py; this is its standalone entry point.
"""

import sys

from tokenwire.benchmarks.request import main

if __name__ == "__main__":
    sys.exit(main())
