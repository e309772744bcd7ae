"""The wire readers and writers (tokenwire/include/tokenwire/wires.h) through their C test
program, on this host.

tests/c/wires_test.c writes arrays of every length 0..300 in four mixes of ids with the kernels
and compares them byte for byte with plain reference encoders (msgpack, protobuf, JSON), reads
them back, and checks a few exact error messages: with the path tww_init picks (x86-64: the SSSE3
steps where the CPU has them), then with the portable loops alone. .ci/cross runs the same
program under qemu-aarch64 and qemu-s390x (big-endian).
"""

from __future__ import annotations

import pathlib
import platform

import pytest

from support.cpp_harness import run_c_test

pytestmark = pytest.mark.integration

SOURCE = pathlib.Path(__file__).resolve().parent / "c" / "wires_test.c"


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_kernels_agree_with_the_reference_encoders(tmp_path: pathlib.Path,
                                                   compiler: str) -> None:
    lines = run_c_test(SOURCE, tmp_path, compiler)
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if platform.machine() == "x86_64" and cpuinfo.exists() and " ssse3" in cpuinfo.read_text():
        assert lines[0] == "wires: ssse3", lines
