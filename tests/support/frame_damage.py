"""How a valid frame gets damaged: the one set of edits the hypothesis tests (tests/support/strategies.py:
`damaged_frames`, `damage_frame`) and the atheris fuzzer (fuzz/fuzz_decode.py) apply.

The edits are aimed at every field of docs/wire-format.md: a bit flip anywhere, a header byte,
the 64-bit count, a cut, bytes appended or inserted; in a zstd frame a byte of the zstd section,
the length prefix (alone, or with the section cut or extended to match) and its first block
header; in a pfor frame the same edits of its length prefix and payload (block headers,
bitmaps and high parts are bytes of it); and a fresh checksum over the damage, so a checksummed frame reaches the checks after it. Where the choices come
from is a `Chooser`: a seeded `random.Random`, a hypothesis `draw` (so failures shrink) or
atheris' `FuzzedDataProvider` (so libFuzzer steers them). No dependency beyond the standard
library, so the fuzzer can import it as is.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Protocol

#: Byte 7 (flags): bit 0 a CRC-32C trailer, bit 1 a count table, bit 2 the payload region is a
#: zstd section (8-byte length, then the zstd frame).
FLAG_CHECKSUM, FLAG_MULTI, FLAG_ZSTD = 0x01, 0x02, 0x04
#: A 64-bit count worth trying: empty, tiny, just past 32 bits, the 2**58 limit, the maximum.
INTERESTING_COUNTS = [0, 1, 2, 3, 7, 2**32, 2**58, 2**64 - 1]
EDITS = 11
#: Byte 5 (codec) of a pfor frame, whose payload region is an 8-byte length, then the payload.
CODEC_PFOR = 3


class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""

    def raw(self, n: int) -> bytes:
        """n bytes (a fuzzer may return fewer when its input runs out)."""


class RandomChooser:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def raw(self, n: int) -> bytes:
        return bytes(self.rng.randrange(256) for _ in range(n))


class DrawChooser:
    """Choices drawn by hypothesis (`draw` of a composite strategy or `data.draw`)."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def integer(self, lo: int, hi: int) -> int:
        return int(self.draw(self.st.integers(lo, hi)))

    def raw(self, n: int) -> bytes:
        return bytes(self.draw(self.st.binary(min_size=n, max_size=n)))


class FuzzChooser:
    """Choices from atheris' FuzzedDataProvider."""

    def __init__(self, fdp: Any) -> None:
        self.fdp = fdp

    def integer(self, lo: int, hi: int) -> int:
        return int(self.fdp.ConsumeIntInRange(lo, hi))

    def raw(self, n: int) -> bytes:
        return bytes(self.fdp.ConsumeBytes(n))


def _zstd_section(buf: bytearray) -> int:
    """Where the zstd length prefix of a zstd frame starts (after the header and any count
    table), or -1 when `buf` is not a zstd frame with a whole prefix and a frame header."""
    if len(buf) < 16 or not buf[7] & FLAG_ZSTD:
        return -1
    off = 16
    if buf[7] & FLAG_MULTI:
        count = int.from_bytes(buf[8:16], "little")
        if count > len(buf):
            return -1
        off += (count * 4 + 7) // 8 * 8
    return off if len(buf) >= off + 8 + 5 else -1


def _pfor_section(buf: bytearray) -> int:
    """Where the length prefix of a pfor frame starts, or -1 when `buf` is not a pfor frame with
    a whole prefix and at least one payload byte."""
    if len(buf) < 16 or buf[5] != CODEC_PFOR or buf[7] & FLAG_ZSTD:
        return -1
    off = 16
    if buf[7] & FLAG_MULTI:
        count = int.from_bytes(buf[8:16], "little")
        if count > len(buf):
            return -1
        off += (count * 4 + 7) // 8 * 8
    return off if len(buf) >= off + 8 + 1 else -1


def edit(buf: bytearray, c: Chooser) -> None:
    """One edit of `buf` in place (some edits do nothing on a frame too short for them)."""
    z = _zstd_section(buf)
    pfor = z < 0 and _pfor_section(buf) >= 0
    if pfor:
        z = _pfor_section(buf)
    # half the edits of a zstd or pfor frame go to its section, which most edits never reach
    op = (c.integer(6, 8 if pfor else 9) if z >= 0 and c.integer(0, 1)
          else c.integer(0, EDITS - 1))
    if op == 0 and buf:                                     # flip one bit anywhere
        buf[c.integer(0, len(buf) - 1)] ^= 1 << c.integer(0, 7)
    elif op == 1 and buf:                                   # overwrite a header / table byte
        buf[c.integer(0, min(len(buf), 40) - 1)] = c.integer(0, 255)
    elif op == 2 and len(buf) >= 16:                        # the 64-bit count
        k = c.integer(0, len(INTERESTING_COUNTS))
        count = INTERESTING_COUNTS[k] if k < len(INTERESTING_COUNTS) else c.integer(0, 2**64 - 1)
        buf[8:16] = count.to_bytes(8, "little")
    elif op == 3 and buf:                                   # cut the frame short
        del buf[c.integer(0, len(buf) - 1):]
    elif op == 4:                                           # bytes appended
        buf += c.raw(c.integer(1, 8))
    elif op == 5:                                           # bytes inserted
        i = c.integer(0, len(buf))
        buf[i:i] = c.raw(c.integer(1, 8))
    elif op == 6 and z >= 0:                # a byte of the section, often of its (first) header
        hi = len(buf) - 1 if c.integer(0, 1) else min(len(buf) - 1, z + 8 + 13)
        buf[c.integer(z + 8, hi)] = c.integer(0, 255)
    elif op == 7 and z >= 0:                                # the zstd length prefix, off by a few
        clen = int.from_bytes(buf[z:z + 8], "little") + c.integer(-3, 3)
        buf[z:z + 8] = min(max(0, clen), 2**64 - 1).to_bytes(8, "little")
    elif op == 8 and z >= 0:                                # the zstd section cut or extended,
        clen = int.from_bytes(buf[z:z + 8], "little")       # its length prefix to match
        end = min(z + 8 + clen, len(buf))
        if c.integer(0, 1):
            cut = min(c.integer(1, 8), end - z - 8)
            del buf[end - cut:end]
            clen -= cut
        else:
            extra = c.raw(c.integer(1, 8))
            buf[end:end] = extra
            clen += len(extra)
        buf[z:z + 8] = min(max(0, clen), 2**64 - 1).to_bytes(8, "little")
    elif op == 9 and z >= 0 and not pfor:                   # the first zstd block header
        fhd = buf[z + 12]
        fcs = (0, 2, 4, 8)[fhd >> 6] or (1 if fhd & 0x20 else 0)
        at = z + 13 + (0 if fhd & 0x20 else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
        if at + 3 <= len(buf):
            size, btype, last = c.integer(0, (1 << 17) - 1), c.integer(0, 3), c.integer(0, 1)
            buf[at:at + 3] = ((size << 3) | (btype << 1) | last).to_bytes(3, "little")
    elif op == 10 and len(buf) >= 20 and buf[7] & FLAG_CHECKSUM:
        # a new checksum over the damaged bytes, so that the checks after it are reached
        from tokenwire import _core

        buf[-4:] = _core._crc32c(bytes(buf[:-4])).to_bytes(4, "little")


def damage(frame: bytes, c: Chooser, *, min_edits: int = 1, max_edits: int = 4) -> bytes:
    """`frame` after min_edits..max_edits edits."""
    buf = bytearray(frame)
    for _ in range(c.integer(min_edits, max_edits)):
        edit(buf, c)
    return bytes(buf)
