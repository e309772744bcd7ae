"""The pfor kernel (tokenwire/include/tokenwire/pfor.h) through its C test program.

tests/c/pfor_test.c round-trips ids of every width 0..32 (negative ids included) at block
boundaries, checks every block's width against the encoder rule written from the spec, reads
every payload with a bit-by-bit reader of the spec, pins the byte layout (exception bitmap and
high bytes included), hits every decoder error with a hand-made payload, runs a seeded fuzz loop
over mangled payloads and races the encoder against a writer thread. Here it is compiled with
gcc under AddressSanitizer + UndefinedBehaviorSanitizer (every read past the payload or write
past the ids aborts it) and run once per path: the best the CPU has (AVX-512 VBMI2, else AVX2,
else SSE2), AVX2 (noavx512) and SSE2 (noavx2) from one build (the program picks its path at
run time), plain C (-DTWPF_PORTABLE) from a second; once more at -O3 without them; and the
header is compiled as C++17 on its own. Each build is made once per test run (module-scoped
fixtures), since a sanitizer build takes most of a test's time.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import subprocess

import pytest

import tokenwire
from support.wait import WAIT_S

pytestmark = pytest.mark.integration

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "c" / "pfor_test.c"
WARNINGS = ["-Wall", "-Wextra", "-Werror", "-Wno-unused-function"]


def _cc() -> str:
    cc = os.environ.get("CC") or "gcc"
    if shutil.which(cc) is None:
        raise RuntimeError(f"no C compiler ({cc}); install gcc (Debian: build-essential)")
    return cc


def _build(out: pathlib.Path, flags: list[str]) -> pathlib.Path:
    cmd = [_cc(), "-std=c99", *WARNINGS, *flags, "-I", tokenwire.get_include(), str(SOURCE),
           "-o", str(out), "-lpthread",
           *shlex.split(os.environ.get("TOKENWIRE_CFLAGS", ""))]
    subprocess.run(cmd, check=True)
    return out


def _run(exe: pathlib.Path, seed: int, iterations: int, *extra: str) -> str:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    proc = subprocess.run([str(exe), str(seed), str(iterations), *extra], capture_output=True,
                          text=True, env=env, timeout=WAIT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "ok", proc.stdout
    return proc.stdout


SANITIZE = ["-O1", "-g1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer"]


@pytest.fixture(scope="module")
def sanitized_exe(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The program under the sanitizers, with every run-time path the CPU has."""
    return _build(tmp_path_factory.mktemp("pfor") / "pfor_test_asan", SANITIZE)


@pytest.fixture(scope="module")
def portable_exe(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The program under the sanitizers with the plain C paths only (-DTWPF_PORTABLE)."""
    return _build(tmp_path_factory.mktemp("pfor") / "pfor_test_portable",
                  [*SANITIZE, "-DTWPF_PORTABLE"])


@pytest.mark.parametrize("seed", [1, 20240229])
def test_kernel_under_sanitizers(sanitized_exe: pathlib.Path, seed: int) -> None:
    out = _run(sanitized_exe, seed, 10_000)
    # the fuzz loop reached every outcome (the program checks it too; shown here on failure)
    assert all(not line.endswith(": 0") for line in out.splitlines() if "outcome" in line), out


def test_kernel_optimized(tmp_path: pathlib.Path) -> None:
    _run(_build(tmp_path / "pfor_test_o3", ["-O3", "-march=native"]), 3, 5_000)


def test_kernel_avx2_paths(sanitized_exe: pathlib.Path) -> None:
    """The run-time AVX-512 VBMI2 paths switched off: the AVX2 unpack with the shuffle patch,
    the AVX2 gather of high parts and width counts (what a CPU without AVX-512 runs), under the
    sanitizers. On a CPU without AVX2 this covers the SSE2 paths once more."""
    out = _run(sanitized_exe, 7, 3_000, "noavx512")
    assert out.splitlines()[0] in ("paths: avx2", "paths: sse2"), out


def test_kernel_sse2_paths(sanitized_exe: pathlib.Path) -> None:
    """The run-time AVX2 and AVX-512 paths switched off: the SSE2 unpack, patch and width
    counts a CPU without AVX2 runs, under the sanitizers."""
    out = _run(sanitized_exe, 5, 3_000, "noavx2")
    assert out.splitlines()[0] == "paths: sse2", out


def test_kernel_portable_paths(portable_exe: pathlib.Path) -> None:
    """The plain C paths (big-endian hosts, non-x86) against the same checks and the spec's
    bit-by-bit reader, under the sanitizers."""
    out = _run(portable_exe, 11, 3_000)
    assert out.splitlines()[0] == "paths: portable", out


def test_header_compiles_as_cpp17(tmp_path: pathlib.Path) -> None:
    """The header alone in a C++ unit (compat.h spells C99's restrict for C++)."""
    src = tmp_path / "use.cpp"
    src.write_text(
        '#include "tokenwire/pfor.h"\n'
        "int main() {\n"
        "    int32_t ids[3] = {1, 2, 3}, back[3];\n"
        "    uint8_t buf[16];\n"
        "    size_t n = twpf_encode(ids, 3, buf);\n"
        "    twpf_error err;\n"
        "    return twpf_decode(buf, n, back, 3, &err) == TWPF_OK && back[2] == 3 ? 0 : 1;\n"
        "}\n")
    cxx = os.environ.get("CXX") or "g++"
    exe = tmp_path / "use"
    subprocess.run([cxx, "-std=c++17", "-O2", *WARNINGS, "-I", tokenwire.get_include(),
                    str(src), "-o", str(exe)], check=True)
    assert subprocess.run([str(exe)]).returncode == 0
