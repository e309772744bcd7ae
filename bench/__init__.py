"""tokenwire's benchmarks, run from a clone's root against the tokenwire installed in the
environment: `python -m bench --help` lists them, docs/benchmarks.md describes them.

The modules: `harness` (measurement, processes, tables, targets, the suites' command line),
`data` (ids and the plain-list baseline request), `engine` (the C++ engine stand-in); each other
module is a suite (bench/__main__.py maps them), `e2e` also
the proxy -> worker pair over zmq and shared memory that `load` runs on.
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
