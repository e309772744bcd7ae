"""atheris fuzz target: `check_pickle` against CPython's unpickler (not part of pytest).

    python fuzz/fuzz_pickle.py --seconds 60                # against the installed/in-place build
    fuzz/run.sh python 60 pickle                           # the clang fuzzer+ASan build

A differential target. Each input is a pickle: the fuzzer's bytes as they are, or one the
pickler wrote (request-shaped objects: GenerationRequest, token vectors, lists, dicts, bytes,
bytearrays, text; protocols 0 to 5, framed at 4 and 5) changed from the fuzzer's data: bytes
flipped, set, cut or inserted, a FRAME inserted anywhere with a length near an opcode boundary,
a memo put with a large index, a counted argument's length changed. Each goes through
`tokenwire.unpickle.check_pickle`. What it refuses (`pickle.UnpicklingError`) is done with;
what it passes is loaded three ways by a restricted unpickler (`tokenwire.unpickle.find_class`, the
request class allowed) inside `load_scope()`, as tokenwire's receivers load, from two kinds of
file: an `io.BytesIO` (what a restricted receiver reads) and an `io.BufferedReader` (a file
with `peek`: the unpickler's prefetching path). (`pickle.loads`, reading memory, takes no
`find_class`: a fuzzed pickle could name any global, so it is not run here; frames are only a
hint to it.) Each load may fail with any error a corrupt pickle raises, but

* its traced peak (tracemalloc) stays within the bound docs/security.md gives (load-memory):
  `RATIO` (256) times the pickle's size plus `SLACK` (256 KiB) for what CPython builds from a
  pickle the check passes (an EMPTY_SET byte making a set: 225x), plus `TOKEN_RATIO` times the
  bytes of its bytes arguments for the token data it decodes (a compact frame in a request's
  token field: up to 2,048x its bytes); a memo bomb or a counted argument that got past the
  check takes millions of times its size;
* it raises no MemoryError (an allocation the size of the pickle never fails here);

and the pure-Python unpickler (`pickle._Unpickler`, restricted the same way), which checks
frames as it reads, never finds an opcode that crosses the end of its frame or a frame inside
a frame in a pickle the check passed: the oracle for the check's frame rule.

A finding is a failed property, an uncaught exception from the check, a crash or a sanitizer
report. Every frame crossing that the check once let through was found here within seconds.
"""

from __future__ import annotations

import functools
import io
import pickle
import pickletools
import sys
import tracemalloc

import atheris
from harness import count_input, fuzz_main

with atheris.instrument_imports():

    import tokenwire
    import tokenwire.unpickle
    from tokenwire.request import GenerationRequest

# docs/security.md, load-memory: 256 times the pickle plus 256 KiB, plus what its compact token
# frames decode to (at most 2,048 times their bytes; in a pickle they are counted arguments).
RATIO = 256
TOKEN_RATIO = 2_048
SLACK = 256 << 10
ALLOW = {("tokenwire.request", "GenerationRequest"), ("copyreg", "__newobj__"),
         ("copyreg", "_reconstructor"), ("builtins", "object")}
FIND = functools.partial(tokenwire.unpickle.find_class, allow=ALLOW)


class Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        return FIND(module, name)


class PyRestricted(pickle._Unpickler):       # the pure-Python unpickler: frames checked
    def find_class(self, module: str, name: str) -> object:
        return FIND(module, name)


# What the pure-Python unpickler says of an opcode that crosses its frame's end, or a frame
# that starts inside another: a pickle check_pickle passed must never get either.
FRAME_ERRORS = ("pickle exhausted before end of frame",
                "beginning of a new frame before end of current frame")


def _seeds() -> list[bytes]:
    ids = [151_000, 7, 0, 2**31 - 1, 42] * 9
    objects = [
        GenerationRequest(ids),
        {"prompt": tokenwire.as_tokens(ids), "n": 3, "name": "req-1", "blob": b"\x01" * 40},
        [tokenwire.as_tokens(ids[:5]), bytearray(b"abcd" * 8), ("x", 1.5, None, True)],
        {"a": [1, 2, 3], "b": {"c": (4, 5)}, "s": {6, 7}, "f": frozenset({8})},
        [GenerationRequest([1, 2, 3])] * 2,
    ]
    out = []
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        for obj in objects:
            try:
                out.append(pickle.dumps(obj, protocol=protocol))
            except (pickle.PicklingError, TypeError):
                pass
    return out


SEEDS = _seeds()
_stats = {"inputs": 0, "passed": 0, "loaded": 0}


@atheris.instrument_func
def mutate(fdp: atheris.FuzzedDataProvider, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        op = fdp.ConsumeIntInRange(0, 6)
        at = fdp.ConsumeIntInRange(0, len(b))
        if op == 0 and at < len(b):
            b[at] ^= 1 << fdp.ConsumeIntInRange(0, 7)
        elif op == 1 and at < len(b):
            b[at] = fdp.ConsumeIntInRange(0, 255)
        elif op == 2:
            del b[at:at + fdp.ConsumeIntInRange(1, 16)]
        elif op == 3:
            b[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 16))
        elif op == 4:                # a FRAME whose end falls near an opcode boundary
            length = max(0, len(b) - at + fdp.ConsumeIntInRange(-24, 4))
            if fdp.ConsumeBool():
                length = fdp.ConsumeIntInRange(0, 64)
            b[at:at] = b"\x95" + length.to_bytes(8, "little")
        elif op == 5:                # a memo put of any index
            index = fdp.ConsumeIntInRange(0, 2**32 - 1)
            b[at:at] = (b"r" + index.to_bytes(4, "little") if fdp.ConsumeBool()
                        else b"p%d\n" % index)
        else:                        # a counted argument (BINBYTES, BINUNICODE, ...) of any size
            op_code = b"BXT\x8e\x8d\x96"[fdp.ConsumeIntInRange(0, 5)]
            width = 8 if op_code >= 0x8d else 4
            size = fdp.ConsumeIntInRange(0, 2**(8 * width) - 1)
            b[at:at] = bytes([op_code]) + size.to_bytes(width, "little")
    return bytes(b)


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    count_input("pickle", _stats,
                lambda: f"{_stats['passed']} passed the check, {_stats['loaded']} loaded")
    fdp = atheris.FuzzedDataProvider(raw)
    if fdp.ConsumeIntInRange(0, 3) == 0:
        data = fdp.ConsumeBytes(fdp.remaining_bytes())
    else:
        seed = SEEDS[fdp.ConsumeIntInRange(0, len(SEEDS) - 1)]
        data = mutate(fdp, seed)
    try:
        tokenwire.unpickle.check_pickle(data)
    except pickle.UnpicklingError:
        return
    _stats["passed"] += 1
    bound = RATIO * len(data) + TOKEN_RATIO * _bytes_arguments(data) + SLACK
    for how, file in (("BytesIO", io.BytesIO(data)),
                      ("BufferedReader", io.BufferedReader(io.BytesIO(data)))):
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        try:
            with tokenwire.unpickle.load_scope():
                Restricted(file).load()
            _stats["loaded"] += 1
        except MemoryError:
            raise AssertionError(f"{how}: MemoryError loading a {len(data)}-byte pickle that "
                                 f"check_pickle passed: {data!r}") from None
        except Exception:            # noqa: BLE001 -- a corrupt pickle may raise anything
            pass
        peak = tracemalloc.get_traced_memory()[1] - start
        assert peak <= bound, (f"{how}: {peak} bytes traced loading a {len(data)}-byte pickle "
                               f"that check_pickle passed (bound {bound}): {data!r}")
    try:
        with tokenwire.unpickle.load_scope():
            PyRestricted(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        assert str(e) not in FRAME_ERRORS, (f"check_pickle passed a pickle whose opcodes cross "
                                            f"a frame ({e}): {data!r}")
    except Exception:                # noqa: BLE001 -- a corrupt pickle may raise anything
        pass


def _bytes_arguments(data: bytes) -> int:
    """The bytes of the pickle's bytes arguments the unpickler reads (where a compact token
    frame can be), as far as the opcodes parse."""
    total = 0
    try:
        for _, arg, _ in pickletools.genops(data):
            if isinstance(arg, (bytes, bytearray)):
                total += len(arg)
    except Exception:                # noqa: BLE001 -- the unpickler stops there too
        pass
    return total


def main() -> int:
    tracemalloc.start()
    return fuzz_main(__doc__, test_one_input, "pickle", seconds=60, max_len=4096,
                     fixed_seed=True)


if __name__ == "__main__":
    sys.exit(main())
