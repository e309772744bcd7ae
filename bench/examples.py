"""examples/' modules, loaded from the clone for the benchmarks that measure what they show.

`before` and `after` are examples/before|after/serving_requests.py: the request classes of two
serving stacks, unmodified and after adopting tokenwire (bench/request.py times the ~30-field
dataclass of both). `worker_submit` is examples/worker_submit.py, whose `native_request_ctor` is
the engine stand-in (a 1-D int32 buffer is one memcpy, a list is cast id by id).

Each is registered in sys.modules under its own name, so that its classes pickle.
"""

from __future__ import annotations

import os
from types import ModuleType

from bench import ROOT
from bench.harness import load_module


def _load(name: str, *path: str) -> ModuleType:
    return load_module(name, os.path.join(ROOT, "examples", *path))


before = _load("bench.examples.before", "before", "serving_requests.py")
after = _load("bench.examples.after", "after", "serving_requests.py")
worker_submit = _load("bench.examples.worker_submit", "worker_submit.py")
