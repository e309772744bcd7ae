"""CRC-32C (tokenwire/include/tokenwire/crc32c.h) through its C test program, on this host.

tests/c/crc32c_test.c compares the path twcrc_init picks (here: x86-64's SSE4.2 CRC32 where the
CPU has it) with the portable table path and a bit-at-a-time reference over every length
0..1100 at every start offset 0..15. .ci/cross runs the same program under qemu-aarch64 (the
ARMv8 CRC32 path, required there) and qemu-s390x (big-endian).
"""

from __future__ import annotations

import pathlib
import subprocess

import pytest

import tokenwire
from support import system

pytestmark = pytest.mark.integration

SOURCE = pathlib.Path(__file__).resolve().parent / "c" / "crc32c_test.c"


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_picked_path_agrees_with_the_portable_one(tmp_path: pathlib.Path, compiler: str) -> None:
    if compiler == "clang":
        system.require("clang")
    exe = tmp_path / "crc32c_test"
    subprocess.run([compiler, "-std=c11", "-O2", "-Wall", "-Wextra", "-pedantic", "-Werror",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-I", tokenwire.get_include(), str(SOURCE), "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "ok", proc.stdout
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():                # Linux: the path follows the CPU's flags
        flags = cpuinfo.read_text()
        hw = ("sse4_2" in flags) or (" crc32" in flags)
        assert proc.stdout.splitlines()[0] == f"crc32c: {'hw' if hw else 'portable'}", proc.stdout
