"""python -m bench [SUBCOMMAND] [OPTIONS]: tokenwire's benchmarks, run from a clone's root.

`python -m bench SUBCOMMAND --help` describes a subcommand's options, docs/benchmarks.md its run.
They measure the tokenwire installed in this environment: install it with the benchmark peers
first, `pip install '.[bench]'`.

Exit codes: 0 success; 1 a target missed with --check-targets, or ids that arrived wrong (e2e,
load, net, mpi); 2 a usage error.
"""

from __future__ import annotations

import importlib
import sys

import bench  # noqa: F401  (first: the installed tokenwire before the checkout's sources)

#: subcommand -> (the module whose main(argv) runs it, its --help line).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "codec": ("bench.codec", "the default: wire codecs against pickle, msgspec, numpy, zstd"),
    "core": ("bench.core", "as_tokens / tolist against numpy and array.array"),
    "request": ("bench.request", "request objects against a plain-list request; HMAC signing"),
    "msgspec": ("bench.msgspec_json", "vLLM's msgspec Struct (also over zmq) and JSON bodies: "
                "list[int] vs TokenVector"),
    "wires": ("bench.wires", "msgpack / JSON / protobuf ids: each stack's path vs tokenwire.wires"),
    "cpp": ("bench.engine", "the C++ hand-off (to_vector, decode) against memcpy and nanobind"),
    "e2e": ("bench.e2e", "proxy -> worker over pyzmq (and Ray): submit, GIL held, trip p50/p99"),
    "load": ("bench.load", "proxy -> worker under load: requests/s, CPU/request, p50/p99 latency"),
    "shm": ("bench.bench_shm", "the shared-memory channel against in-band and out-of-band frames"),
    "malloc": ("bench.malloc", "peak and final RSS with tokenwire's malloc settling on and off"),
    "net": ("bench.net", "proxy and worker in two network namespaces over TCP, rate-limited"),
    "threads": ("bench.threads", "1 thread against N on a free-threaded CPython: ops/s, scaling"),
    "mpi": ("bench.mpi", "rank 0 broadcasting each iteration's new requests to the other ranks"),
}


def usage() -> str:
    """The docstring's first line, a line per subcommand, then the rest of the docstring."""
    first, _, rest = (__doc__ or "").partition("\n\n")
    width = max(map(len, SUBCOMMANDS))
    table = [f"  python -m bench {name:<{width}}  {text}"
             for name, (_, text) in SUBCOMMANDS.items()]
    return "\n".join([first, "", *table, "", rest])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(usage())
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
    return int(importlib.import_module(SUBCOMMANDS[name][0]).main(rest))


if __name__ == "__main__":
    sys.exit(main())
