"""tokenwire's benchmarks. They are not installed with tokenwire: run them from a clone's root,
against the tokenwire installed in the environment (`pip install '.[bench]'`)::

    python -m bench --plot bench.png        # the codec table (bench/codec.py)
    python -m bench e2e --engine nanobind   # proxy -> worker, into a real C++ Request
    python -m bench --help                  # every subcommand

  __main__      the command line: `python -m bench [SUBCOMMAND] [OPTIONS]`
  harness       measurement (interleaved rounds, median and spread), machine description, JSON,
                tables, targets
  data          seeded, realistic token streams
  baseline      the request as serving stacks held it before tokenwire (a plain list field)
  examples      examples/'s request classes and engine stand-in, shared with the benchmarks
  codec         every wire codec against pickle, msgspec, numpy, zstd, lz4 (`python -m bench`)
  core          as_tokens / tolist against numpy and array.array
  request       request objects against the same request holding a plain list
  transport     what HMAC signing adds to an out-of-band round trip
  msgspec_json  TokenVector through msgspec hooks / out-of-band frames / base64 JSON against
                list[int]
  cpp, engine   the C++ hand-off, in a nanobind engine stand-in built from engine_src/
  e2e           proxy process -> worker process over pyzmq (and Ray), in-band, out-of-band and
                through the shared-memory channel
  load          proxy -> worker under load: closed loop and Poisson arrivals (`python -m bench load`)
  bench_shm     the shared-memory channel by size, and a slot against memcpy (`python -m bench
                shm`)
  malloc        RSS of a torch-like process with tokenwire's glibc malloc settling on and off
                (`python -m bench malloc`)
  mpi           rank 0 broadcasting each iteration's new requests to MPI ranks (`python -m bench
                mpi`, under mpiexec)
"""

from __future__ import annotations

import os
import sys

#: The clone's root, which holds bench/ (and tokenwire/'s sources, examples/).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _installed_tokenwire_first() -> None:
    """`python -m bench` puts the working directory -- the clone's root -- first on sys.path,
    where the checkout's tokenwire/ (sources without the compiled extension, unless built in
    place) would shadow the installed package. The root moves to the end: the installed
    tokenwire is the one imported, and bench/ is still found, also by the e2e benchmark's worker
    processes (multiprocessing's spawn starts them with this sys.path)."""
    here = [p for p in sys.path if os.path.abspath(p or os.curdir) == ROOT]
    if here:
        sys.path[:] = [p for p in sys.path if p not in here] + [ROOT]


_installed_tokenwire_first()
