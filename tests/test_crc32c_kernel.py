"""CRC-32C (tokenwire/include/tokenwire/crc32c.h) through its C test program, on this host.

tests/c/crc32c_test.c compares the path twcrc_init picks (here: x86-64's SSE4.2 CRC32 where the
CPU has it) with the portable table path and a bit-at-a-time reference over every length
0..1100 at every start offset 0..15. .ci/cross runs the same program under qemu-aarch64 (the
ARMv8 CRC32 path, required there) and qemu-s390x (big-endian).
"""

from __future__ import annotations

import pathlib

import pytest

from support.cpp_harness import run_c_test

pytestmark = pytest.mark.integration

SOURCE = pathlib.Path(__file__).resolve().parent / "c" / "crc32c_test.c"


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_picked_path_agrees_with_the_portable_one(tmp_path: pathlib.Path, compiler: str) -> None:
    lines = run_c_test(SOURCE, tmp_path, compiler)
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():                # Linux: the path follows the CPU's flags
        flags = cpuinfo.read_text()
        hw = ("sse4_2" in flags) or (" crc32" in flags)
        assert lines[0] == f"crc32c: {'hw' if hw else 'portable'}", lines
