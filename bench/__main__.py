"""python -m bench [SUBCOMMAND] [OPTIONS]: tokenwire's benchmarks, run from a clone's root.

  python -m bench            codec table: every wire codec against pickle, msgspec, numpy, zstd,
                             lz4 and memcpy (--quick, --plot PNG, --json PATH, --only, --tokenizer)
  python -m bench core       as_tokens / tolist against numpy and array.array
  python -m bench request    request objects against the same request holding a plain list
  python -m bench transport  what HMAC signing adds to an out-of-band request round trip
  python -m bench msgspec    msgspec Structs and JSON bodies: list[int] vs TokenVector, base64
  python -m bench wires      msgpack / JSON / protobuf id arrays: each stack's path against
                             tokenwire.wires (decode, encode, bytes/id, bytes/ns)
  python -m bench upstream   vLLM's engine-core request over zmq: list[int] against a TokenVector field
  python -m bench cpp        the C++ hand-off (to_vector, C++ decode) against memcpy and nanobind
  python -m bench e2e        proxy -> worker over pyzmq (and Ray): submit latency, GIL held,
                             whole trip (p50, p99); in-band, out-of-band, shared memory
  python -m bench load       proxy -> worker under load: requests/s, CPU/request, p50/p99 latency
  python -m bench shm        the shared-memory channel (tokenwire.shm) against in-band and
                             out-of-band frames, by size; a slot against memcpy (--quick)
  python -m bench malloc     peak and final RSS of a torch-like process, tokenwire's glibc malloc
                             settling on against off (tokenwire._core.malloc_settling)
  python -m bench net        proxy and worker in two network namespaces over TCP (rate-limited
                             with tbf): plain lists, in-band, out-of-band raw and coded
  python -m bench threads    1 thread against N on a free-threaded CPython: ops/s and scaling
  python -m bench mpi        rank 0 broadcasts each iteration's new requests to the other MPI
                             ranks (comm.bcast, pkl5): plain lists against tokenwire requests

`python -m bench SUBCOMMAND --help` describes a subcommand's options (`codec` names the default
one explicitly). They measure the tokenwire installed in this environment: install it with the
benchmark peers first, `pip install '.[bench]'`.

Exit codes: 0 success; 1 a target missed with --check-targets (e2e: also ids that arrived
wrong); 2 a usage error.
"""

from __future__ import annotations

import importlib
import sys

import bench  # noqa: F401  (first: the installed tokenwire before the checkout's sources)

#: subcommand -> "module" whose main(argv) runs it, or "module:function" (its help line is in
#: the docstring above).
SUBCOMMANDS: dict[str, str] = {
    "codec": "bench.codec",
    "core": "bench.core",
    "request": "bench.request",
    "transport": "bench.request:transport_main",
    "msgspec": "bench.msgspec_json",
    "wires": "bench.wires",
    "upstream": "bench.msgspec_json:upstream_main",
    "cpp": "bench.engine",
    "e2e": "bench.e2e",
    "load": "bench.load",
    "shm": "bench.bench_shm",
    "malloc": "bench.malloc",
    "mpi": "bench.mpi",
    "net": "bench.net",
    "threads": "bench.threads",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        print("Options of the codec table (python -m bench [codec]):\n")
        argv = ["codec", "--help"]
    elif not argv or argv[0].startswith("-"):
        argv = ["codec", *argv]
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"python -m bench: unknown subcommand {name!r} (choose from "
              f"{', '.join(SUBCOMMANDS)}; --help lists them)", file=sys.stderr)
        return 2
    try:
        import tokenwire  # noqa: F401
    except ImportError as e:
        print(f"python -m bench: cannot import tokenwire ({e}); install it first: "
              f"pip install '.[bench]'", file=sys.stderr)
        return 2
    module, _, function = SUBCOMMANDS[name].partition(":")
    return int(getattr(importlib.import_module(module), function or "main")(rest))


if __name__ == "__main__":
    sys.exit(main())
