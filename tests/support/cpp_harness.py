"""Build and drive the C++ side of the tests: the conformance server (conformance.cpp) and the
pybind11 engine (pybind_engine.cpp); the nanobind engine is bench/engine.py.

Compiler: $CXX or g++. Extra flags from $TOKENWIRE_CXXFLAGS (.ci/run's sanitizer build sets
-fsanitize=address,undefined there). zstd support is compiled in when zstd.h is available; the
`cpp` fixture's server built without it skips each test that asks it about a zstd frame
(tests/support/system.py, "zstd.h").
$TOKENWIRE_CXX_RUNNER runs the conformance server through a command (.ci/cross: a cross
compiler as $CXX, -static, and qemu-aarch64-static or qemu-s390x-static as the runner).
$TOKENWIRE_CPP_CACHE, when set, names a directory where each build is kept under the hash of its
inputs (the command, the compiler's version, the source and tokenwire's headers), so that runs
in a row (.ci/stress) build once.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shlex
import struct
import subprocess
import sysconfig

import tokenwire

from support import system
from support.system import cxx
from support.wait import WAIT_S

HERE = pathlib.Path(__file__).resolve().parent.parent / "cpp"  # the C++ sources
CODEC_IDS = {"auto": 0, "raw": 1, "u16": 2, "packed": 3, "zstd": 4, "pfor": 5, None: 255}


def extra_flags() -> list[str]:
    return shlex.split(os.environ.get("TOKENWIRE_CXXFLAGS", ""))


def have_zstd_header() -> bool:
    """Whether the compiler finds zstd.h (and TOKENWIRE_WITHOUT does not hide it)."""
    return system.have("zstd.h")


def _build(cmd: list[str], target: pathlib.Path, source: pathlib.Path,
           *, also: str = "") -> pathlib.Path:
    """Run the compiler command `cmd`, which writes `target`; with $TOKENWIRE_CPP_CACHE set, take
    the build from the cache when its inputs (and `also`, e.g. a library's version) are
    unchanged, else build it there and keep it."""
    cache = os.environ.get("TOKENWIRE_CPP_CACHE")
    if not cache:
        subprocess.run(cmd, check=True)
        return target
    key = hashlib.sha256()
    compiler = subprocess.run([cxx(), "--version"], check=True, capture_output=True).stdout
    # The command without the output's directory (a fresh temporary one each run).
    named = [target.name if arg == str(target) else arg for arg in cmd]
    for part in [*named, also, compiler, source.read_bytes()]:
        key.update(part if isinstance(part, bytes) else part.encode())
    for header in sorted(pathlib.Path(tokenwire.get_include()).rglob("*")):
        if header.is_file():
            key.update(str(header.name).encode() + header.read_bytes())
    kept = pathlib.Path(cache) / key.hexdigest()[:32] / target.name
    if not kept.exists():
        # Built beside its final name and renamed into place: a run in parallel never sees
        # half a file.
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f"{target.name}.{os.getpid()}.partial")
        subprocess.run([str(partial) if arg == str(target) else arg for arg in cmd], check=True)
        os.replace(partial, kept)
    return kept


def compile_conformance(out_dir: pathlib.Path, *, zstd: bool) -> pathlib.Path:
    exe = out_dir / ("conformance-zstd" if zstd else "conformance")
    cmd = [cxx(), "-std=c++17", "-O2", "-g1", "-Wall", "-Wextra", "-Werror",
           "-I", tokenwire.get_include(), str(HERE / "conformance.cpp"), "-o", str(exe),
           *extra_flags()]
    if zstd:
        cmd[1:1] = ["-DTOKENWIRE_WITH_ZSTD"]
        cmd.append("-lzstd")
    return _build(cmd, exe, HERE / "conformance.cpp")


def compile_race_count_table(out_dir: pathlib.Path) -> pathlib.Path:
    """race_count_table.cpp: decode_many / frame_info while a thread rewrites the count table
    (-pthread; under .ci/run's flags, with AddressSanitizer)."""
    exe = out_dir / "race-count-table"
    return _build([cxx(), "-std=c++17", "-O2", "-g1", "-Wall", "-Wextra", "-Werror", "-pthread",
                   "-I", tokenwire.get_include(), str(HERE / "race_count_table.cpp"),
                   "-o", str(exe), *extra_flags()], exe, HERE / "race_count_table.cpp")


def compile_pybind_engine(out_dir: pathlib.Path) -> pathlib.Path:
    """The pybind11 flavour of the engine stand-in, with the compiler directly (no CMake)."""
    import pybind11

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = out_dir / f"_tokenwire_pybind_engine{suffix}"
    cmd = [cxx(), "-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden",
           "-I", tokenwire.get_include(), "-I", pybind11.get_include(),
           "-I", sysconfig.get_paths()["include"],
           str(HERE / "pybind_engine.cpp"), "-o", str(target), *extra_flags()]
    return _build(cmd, target, HERE / "pybind_engine.cpp", also=pybind11.__version__)


class CppError(Exception):
    """What the C++ side threw: kind is wire, checksum, invalid or length."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


#: What a server built without zstd answers about a zstd frame (decode; encode).
NO_ZSTD = ("but zstd support is not compiled in", "codec 'zstd' needs zstd support compiled in")


class Conformance:
    """The conformance server as a long-lived subprocess (one per test session).

    skip_zstd: the server lacks zstd only because the machine lacks zstd.h, so a test that
    asks it about a zstd frame skips (system.require) instead of failing on that answer.
    """

    def __init__(self, exe: pathlib.Path, *, skip_zstd: bool = False) -> None:
        self.skip_zstd = skip_zstd
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        runner = shlex.split(os.environ.get("TOKENWIRE_CXX_RUNNER", ""))
        self.proc = subprocess.Popen([*runner, str(exe)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=WAIT_S)
        self.proc.stdout.close()
        assert rc == 0, f"conformance server exited with {rc}"

    def _call(self, op: bytes, data: bytes, codec: str | None = None, checksum: bool = False,
              vocab_size: int | None = None) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(op + bytes([CODEC_IDS[codec], int(checksum), vocab_size is not None])
                              + struct.pack("<qQ", vocab_size or 0, len(data)) + data)
        self.proc.stdin.flush()
        head = self.proc.stdout.read(8)
        if len(head) != 8:
            raise RuntimeError(f"conformance server died (exit {self.proc.wait(timeout=WAIT_S)})")
        (n,) = struct.unpack("<Q", head)
        text = self.proc.stdout.read(n).decode()
        self._skip_if_no_zstd(text)
        if text.startswith("error "):
            kind, _, message = text[6:].partition("\n")
            raise CppError(kind, message)
        return text

    def _skip_if_no_zstd(self, text: str) -> None:
        if self.skip_zstd and any(m in text for m in NO_ZSTD):
            system.require("zstd.h")

    @staticmethod
    def _ids(text: str) -> tuple[list[list[int]], bytes | None]:
        lines = text.splitlines()
        nseq = int(lines[0].split()[1])
        seqs = [[int(x) for x in line.split()[1:]] for line in lines[1:1 + nseq]]
        frame = None
        if len(lines) > 1 + nseq:
            frame = bytes.fromhex(lines[1 + nseq].split()[1])
        return seqs, frame

    def decode(self, frame: bytes, *, vocab_size: int | None = None, reencode: str | None = None,
               checksum: bool = False) -> tuple[list[int], bytes | None]:
        seqs, again = self._ids(self._call(b"d", frame, reencode, checksum, vocab_size))
        return seqs[0], again

    def decode_many(self, frame: bytes, *, vocab_size: int | None = None, reencode: str | None = None,
                    checksum: bool = False) -> tuple[list[list[int]], bytes | None]:
        return self._ids(self._call(b"m", frame, reencode, checksum, vocab_size))

    def frame_info(self, frame: bytes) -> dict[str, object]:
        lines = self._call(b"i", frame).splitlines()
        _, version, codec, width, checksum, nbytes = lines[0].split()
        return {"version": int(version), "codec": codec, "width": int(width),
                "checksum": checksum == "1", "nbytes": int(nbytes),
                "counts": tuple(int(c) for c in lines[1:])}

    def on_file(self, path: os.PathLike[str] | str,
                fns: tuple[str, ...] = ("decode", "decode_many", "frame_info")
                ) -> list[tuple[str, str]]:
        """What each of `fns` (decode, decode_many, frame_info) gives on the bytes of the file
        at `path`, which the server reads once itself: a frame of hundreds of MiB (check 9 on a
        MULTI frame) is not sent through the pipe. Each answer is ("ok", the answer's text) or
        (the error kind, its message)."""
        ops = b"".join({"decode": b"d", "decode_many": b"m", "frame_info": b"i"}[fn]
                       for fn in fns)
        text = self._call(b"f", ops + b"\0" + os.fsencode(path))
        out = []
        while text:
            size, _, text = text.partition("\n")
            part, text = text[:int(size)], text[int(size):]
            kind, _, message = part[6:].partition("\n")
            out.append((kind, message) if part.startswith("error ") else ("ok", part))
        return out

    def zstd_version(self) -> tuple[int, ...] | None:
        """The libzstd version the server was compiled against (None: built without zstd)."""
        v = self._call(b"v", b"").split()[1]
        return None if v == "none" else tuple(int(x) for x in v.split("."))

    def encode(self, ids: list[int], codec: str = "auto", checksum: bool = False) -> bytes:
        data = struct.pack(f"<I{len(ids)}i", len(ids), *ids)
        return bytes.fromhex(self._call(b"e", data, codec, checksum).split()[1])

    def encode_many(self, seqs: list[list[int]], codec: str = "auto",
                    checksum: bool = False) -> bytes:
        data = struct.pack("<I", len(seqs)) + b"".join(
            struct.pack(f"<I{len(s)}i", len(s), *s) for s in seqs)
        return bytes.fromhex(self._call(b"E", data, codec, checksum).split()[1])


def run_c_test(source: pathlib.Path, out_dir: pathlib.Path, compiler: str,
               timeout: float = WAIT_S) -> list[str]:
    """A C test program of tests/c (a kernel header against its reference), built by `compiler`
    (gcc or clang; clang skips where missing) with ASan and UBSan, run: its output lines, after
    checking that it exited 0 with "ok" last."""
    if compiler == "clang":
        system.require("clang")
    exe = out_dir / source.stem
    subprocess.run([compiler, "-std=c11", "-O2", "-Wall", "-Wextra", "-pedantic", "-Werror",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-I", tokenwire.get_include(), str(source), "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "ok", proc.stdout
    return proc.stdout.splitlines()


def require_compiler() -> None:
    """Skip, naming g++, where there is no C++ compiler (a failure in CI: its skips are strict)."""
    system.require("g++")


__all__ = ["CppError", "Conformance", "compile_conformance", "compile_pybind_engine",
           "compile_race_count_table", "cxx",
           "have_zstd_header", "require_compiler", "run_c_test"]
