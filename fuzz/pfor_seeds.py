"""Seed corpus for fuzz/pfor_paths.c from the pfor frames in tests/fixtures (not part of pytest).

    python fuzz/pfor_seeds.py DIR

For each pfor frame: its payload behind its id count as 2 little-endian bytes (how the harness
reads an input first), and its ids as int32 bytes (how it reads an input second). Inputs longer
than 8192 bytes (the target's -max_len) are cut."""

from __future__ import annotations

import pathlib
import struct
import sys

import tokenwire

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures"
MAX_LEN = 8192


def payload(frame: bytes, info: tokenwire.FrameInfo) -> bytes:
    """The pfor payload: the L bytes after the frame's u64 L, before the checksum trailer."""
    end = len(frame) - (4 if info.checksum else 0)
    for size in range(end - 8, -1, -1):
        if struct.unpack_from("<Q", frame, end - size - 8)[0] == size:
            return frame[end - size:end]
    raise ValueError("no pfor length prefix")


def main() -> int:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(FIXTURES.glob("*pfor*.bin")):
        frame = path.read_bytes()
        info = tokenwire.frame_info(frame)
        ids = [i for seq in tokenwire.decode_many(frame) for i in seq.tolist()]
        seeds = {"ids": struct.pack(f"<{len(ids)}i", *ids)}
        if len(ids) < 1 << 16:
            seeds["payload"] = struct.pack("<H", len(ids)) + payload(frame, info)
        for kind, data in seeds.items():
            (out / f"{path.stem}-{kind}").write_bytes(data[:MAX_LEN])
    return 0


if __name__ == "__main__":
    sys.exit(main())
