"""Whether the C++ header and the extension agree on a frame: the rule of docs/wire-format.md
("Which frames libzstd decides") and the helpers that apply it, for tests/test_cpp_wire.py and
the codec harness (tests/support/codec_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import tokenwire
from tokenwire import WireFormatError
from tokenwire.errors import ChecksumError

from support.cpp_harness import Conformance, CppError


def python_outcome(frame: bytes, *, many: bool,
                   vocab_size: int | None = None) -> tuple[str, object]:
    """What the Python extension does with `frame`: ("ok", sequences) or (error kind, message)."""
    kw = {} if vocab_size is None else {"vocab_size": vocab_size}
    try:
        if many:
            return "ok", [v.tolist() for v in tokenwire.decode_many(frame, **kw)]
        return "ok", [tokenwire.decode(frame, **kw).tolist()]
    except ChecksumError as e:
        return "checksum", str(e)
    except WireFormatError as e:
        return "wire", str(e)
    except ValueError as e:                 # a bad vocab_size (C++: std::invalid_argument)
        return "invalid", str(e)


def cpp_outcome(cpp: Conformance, frame: bytes, *, many: bool,
                vocab_size: int | None = None) -> tuple[str, object]:
    try:
        if many:
            return "ok", cpp.decode_many(frame, vocab_size=vocab_size)[0]
        return "ok", [cpp.decode(frame, vocab_size=vocab_size)[0]]
    except CppError as e:
        return e.kind, e.message


#: The answers that only libzstd gives (docs/wire-format.md, rules 22 and 23): a refusal of the
#: compressed content. Everything else a decoder says is tokenwire's own and the same everywhere.
LIBZSTD_REFUSALS = ("zstd payload is corrupt: zstd decompress error: ",
                    "zstd payload decompresses to")


def libzstd_text(outcome: tuple[str, object]) -> tuple[str, object]:
    """libzstd's own text after "zstd payload is corrupt: zstd decompress error: " differs between
    releases (docs/wire-format.md): conformance compares up to that prefix."""
    kind, value = outcome
    prefix = LIBZSTD_REFUSALS[0]
    if kind == "wire" and isinstance(value, str) and value.startswith(prefix):
        return kind, prefix
    return outcome


def libzstd_decided(frame: bytes, outcome: tuple[str, object]) -> bool:
    """Whether `outcome` is one libzstd decides: a zstd frame decoded to ids, or refused by
    libzstd (every check before that -- the checksum, the sizes, the walk -- is tokenwire's)."""
    kind, value = outcome
    if len(frame) < 8 or not frame[7] & 0x04:
        return False
    return kind == "ok" or (kind == "wire" and isinstance(value, str)
                            and value.startswith(LIBZSTD_REFUSALS))


def agree(frame: bytes, py: tuple[str, object], cc: tuple[str, object]) -> bool:
    """The rule of docs/wire-format.md ("Which frames libzstd decides"): C++ and Python give the
    same answer (the same ids, or the same error class and message up to libzstd's text) on
    every frame, except that a zstd frame whose compressed content is damaged may be accepted by
    one libzstd release and refused by another, or decoded to different ids: both answers then
    come from libzstd. A frame without the ZSTD flag, and a checksummed frame damaged after it
    was written (check 16 refuses it before any zstd check), must agree exactly."""
    if libzstd_text(py) == libzstd_text(cc):
        return True
    return libzstd_decided(frame, py) and libzstd_decided(frame, cc)


def assert_agree(cpp: Conformance, frame: bytes, vocab_size: int | None = None) -> None:
    for many in (False, True):
        py = python_outcome(frame, many=many, vocab_size=vocab_size)
        cc = cpp_outcome(cpp, frame, many=many, vocab_size=vocab_size)
        assert agree(frame, py, cc), (frame.hex(), py, cc)


def damaged_variants(frame: bytes) -> Iterator[bytes]:
    """`frame` cut at every length (every 97th past 40 bytes of a long frame), with bytes
    appended, and with single bits flipped in its first 48 bytes and its last byte."""
    cuts = range(len(frame)) if len(frame) <= 160 else [*range(40), *range(40, len(frame), 97)]
    for n in cuts:
        yield frame[:n]
    yield frame + b"\0"
    yield frame + b"\x01\x02\x03"
    for i in range(min(len(frame), 48)):
        for bit in (0x01, 0x80):
            yield frame[:i] + bytes([frame[i] ^ bit]) + frame[i + 1:]
    if frame:
        yield frame[:-1] + bytes([frame[-1] ^ 0xFF])


def same_zstd(cpp: Conformance) -> bool:
    """Whether C++ and Python compress with the same libzstd release: only then must their zstd
    frames be byte-identical (any two releases read each other's frames)."""
    import zstandard

    return cpp.zstd_version() == tuple(zstandard.ZSTD_VERSION)


def assert_same_frame(cpp: Conformance, ours: bytes, theirs: bytes) -> None:
    if tokenwire.frame_info(theirs).compression == "zstd" and not same_zstd(cpp):
        assert tokenwire.frame_info(ours).compression == "zstd"
        assert [v.tolist() for v in tokenwire.decode_many(ours)] == \
            [v.tolist() for v in tokenwire.decode_many(theirs)]
    else:
        assert ours == theirs
