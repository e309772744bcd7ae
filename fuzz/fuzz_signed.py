"""atheris fuzz target: signed out-of-band messages changed in transit (not part of pytest).

    python fuzz/fuzz_signed.py --seconds 60                # against the installed/in-place build
    fuzz/run.sh python 60 signed                           # the clang fuzzer+ASan build

A man in the middle of a signed link. Each input builds a real message with
`tokenwire.transport.dumps_oob(obj, key=KEY, codec=..., sign_buffers=...)` from fuzzed
parameters -- a dict of two token vectors (raw ids out of band, or wire frames of the fuzzed
codec behind a codec header), a raw buffer and an int -- and then changes it
without the key: bits and bytes of any frame, the codec header's counts, kinds and wire
headers, frames dropped, repeated, swapped or inserted, and, what the signature does not cover
by default, an encoded frame replaced by another valid one of the same length (pfor zeros: up
to 128 ids a byte, the same CRC-32C a forger recomputes) or by a frame of another codec. Some
inputs are signed again with the key instead (a key holder that sends garbage), so the checks
behind the signature are fuzzed too. Then ``loads_oob(frames, key=KEY, sign_buffers=...,
find_class=tokenwire.unpickle.find_class)``:

* an unchanged message loads to what was sent;
* a message changed without the key either is refused -- `AuthenticationError`, or another
  `TokenwireError` / `pickle.UnpicklingError` (a damaged buffer's bytes are not signed by
  default) -- or loads to vectors of exactly the id counts that were sent: a change the
  signature does not see can change ids, never how many (nor, with sign_buffers, anything);
* a message a key holder signed again raises only documented errors, or, once its pickle's own
  bytes changed, what `pickle.loads` raises for a corrupt pickle, from inside the unpickler.

Anything else -- another exception, a crash, a sanitizer report -- is a finding.
"""

from __future__ import annotations

import pickle
import struct
import sys

import atheris
from harness import count_input, edit_bytes, fuzz_main, raised_in

with atheris.instrument_imports():
    import numpy as np

    import tokenwire
    import tokenwire._oob as oob
    import tokenwire.transport as transport
    from tokenwire import TokenVector
    from tokenwire.errors import TokenwireError

KEY = bytes(range(1, 33))
FIND_CLASS = tokenwire.unpickle.find_class
try:
    import zstandard  # noqa: F401  (codec="zstd" needs it)
    CODECS = ["raw", "u16", "packed", "pfor", "auto", "zstd"]
except ImportError:
    CODECS = ["raw", "u16", "packed", "pfor", "auto"]
PICKLE_ERRORS = (pickle.UnpicklingError, AttributeError, EOFError, ImportError, IndexError,
                 ValueError, TypeError, KeyError, OverflowError, struct.error)
_stats = {"inputs": 0, "loaded": 0, "changed_loaded": 0}


@atheris.instrument_func
def build(fdp: atheris.FuzzedDataProvider):
    codec = CODECS[fdp.ConsumeIntInRange(0, len(CODECS) - 1)]
    obj = {}
    for name in ("a", "b"):
        n = fdp.ConsumeIntInRange(0, 3000)
        lo = fdp.ConsumeIntInRange(0, 70_000) if fdp.ConsumeBool() else -(2**31)
        span = fdp.ConsumeIntInRange(1, 2**16)
        if codec in ("u16", "packed"):             # ids the codec holds: [0, 65536), >= 0
            lo, span = min(max(lo, 0), 65_535), min(span, 65_536 - min(max(lo, 0), 65_535))
        obj[name] = TokenVector(np.random.default_rng(fdp.ConsumeIntInRange(0, 2**32 - 1))
                                .integers(lo, min(lo + span, 2**31 - 1), n, dtype=np.int64))
    obj["blob"] = pickle.PickleBuffer(bytes(fdp.ConsumeIntInRange(0, 1200)))   # a raw buffer
    obj["n"] = fdp.ConsumeIntInRange(0, 2**40)
    sign_buffers = fdp.ConsumeIntInRange(0, 5) == 0
    frames = transport.dumps_oob(obj, oob_threshold=fdp.ConsumeIntInRange(0, 2000), key=KEY,
                                 sign_buffers=sign_buffers, codec=codec)
    return obj, sign_buffers, [bytes(memoryview(f)) for f in frames]


def forged_frame(length: int, codec: str) -> bytes:
    """A valid checksummed frame of `length` bytes holding as many ids as fit (pfor zeros:
    16 + 8 + ceil(N/128) + 4 bytes), or of another codec, cut or padded to the length."""
    if codec == "pfor" and length >= 28:
        return tokenwire.encode(np.zeros(128 * (length - 28), np.int32), codec="pfor",
                                checksum=True)
    frame = tokenwire.encode(np.zeros(max(length // 2, 0), np.int32), codec=codec,
                             checksum=True)
    return (frame + bytes(length))[:length]


def edit(fdp: atheris.FuzzedDataProvider, data: bytes) -> bytes:
    return edit_bytes(fdp, data, words=(0, 1, 2**64 - 1))


@atheris.instrument_func
def damage(fdp: atheris.FuzzedDataProvider, frames: list):
    """Changes without the key: (frames, whether the pickle's bytes may have changed)."""
    parts = list(frames)
    has_header = len(parts) > 1 and parts[1].startswith(oob.CODEC_HEADER_MAGIC)
    head_at = 2 if has_header else 1
    pickle_changed = False
    for _ in range(fdp.ConsumeIntInRange(1, 3)):
        what = fdp.ConsumeIntInRange(0, 5)
        if what <= 1 and len(parts) > head_at + 1:                # a buffer frame
            i = fdp.ConsumeIntInRange(head_at + 1, len(parts) - 1)
            if fdp.ConsumeBool():
                parts[i] = forged_frame(len(parts[i]),
                                        CODECS[fdp.ConsumeIntInRange(0, len(CODECS) - 1)])
            else:
                parts[i] = edit(fdp, parts[i])
        elif what == 2 and has_header:                           # the codec header
            parts[1] = edit(fdp, parts[1])
            pickle_changed = True            # with its magic broken, it is read as the pickle
        elif what == 3 and parts:                                # any frame
            i = fdp.ConsumeIntInRange(0, len(parts) - 1)
            parts[i] = edit(fdp, parts[i])
            pickle_changed |= i in (1, head_at)
        elif what == 4:                                          # the frames themselves
            op = fdp.ConsumeIntInRange(0, 3)
            if op == 0 and parts:
                del parts[fdp.ConsumeIntInRange(0, len(parts) - 1)]
            elif op == 1 and parts:
                parts.insert(fdp.ConsumeIntInRange(0, len(parts)),
                             parts[fdp.ConsumeIntInRange(0, len(parts) - 1)])
            elif op == 2 and len(parts) >= 2:
                i = fdp.ConsumeIntInRange(0, len(parts) - 1)
                j = fdp.ConsumeIntInRange(0, len(parts) - 1)
                parts[i], parts[j] = parts[j], parts[i]
            else:
                parts.insert(fdp.ConsumeIntInRange(0, len(parts)),
                             fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 80)))
            pickle_changed = True
        elif parts:                                              # the signature
            parts[0] = edit(fdp, parts[0])
    return parts, pickle_changed


def in_unpickler(e: BaseException) -> bool:
    return raised_in(e, oob.unpickle.__code__)


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    count_input("signed", _stats, lambda: f"{_stats['loaded']} loaded, "
                                          f"{_stats['changed_loaded']} of them changed in transit",
                1 << 12)
    fdp = atheris.FuzzedDataProvider(raw)
    obj, sign_buffers, frames = build(fdp)
    mode = fdp.ConsumeIntInRange(0, 7)
    pristine, resigned, pickle_changed = mode == 0, mode == 1, False
    if not pristine:
        frames, pickle_changed = damage(fdp, frames)
        if resigned and len(frames) >= (3 if frames[1:2] and frames[1].startswith(
                oob.CODEC_HEADER_MAGIC) else 2):
            frames = [oob.sign_frames(KEY, frames[1:], sign_buffers), *frames[1:]]
    if not frames:
        return                       # no frame at all: a ValueError, the caller's mistake
    try:
        got = transport.loads_oob(frames, key=KEY, sign_buffers=sign_buffers,
                                  find_class=FIND_CLASS)
    except (TokenwireError, pickle.UnpicklingError) as e:
        assert not pristine, f"an unchanged message was refused: {e!r}"
        return
    except PICKLE_ERRORS as e:
        if pristine or not resigned or not pickle_changed or not in_unpickler(e):
            raise
        return
    _stats["loaded"] += 1
    if pristine:
        assert got.keys() == obj.keys() and all(
            got[k] == obj[k] for k in ("a", "b", "n")), "an unchanged message loaded to " \
            "something else"
        return
    if resigned:
        return
    _stats["changed_loaded"] += 1
    # Changed without the key and still accepted: only what the signature leaves out changed.
    assert type(got) is dict and got.keys() == obj.keys(), "the signed pickle changed"
    for name in ("a", "b"):
        assert type(got[name]) is TokenVector and len(got[name]) == len(obj[name]), (
            f"vector {name!r} came back with {len(got[name])} ids, {len(obj[name])} were sent: "
            f"the id count changed without the key")
    if sign_buffers:
        assert all(got[k] == obj[k] for k in ("a", "b", "n")), \
            "sign_buffers=True and the ids changed without the key"


def main() -> int:
    return fuzz_main(__doc__, test_one_input, "signed", seconds=60, max_len=1024,
                     fixed_seed=True)


if __name__ == "__main__":
    sys.exit(main())
