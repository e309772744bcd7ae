"""The shipped C and C++ headers as MSVC x64 sees them: what GNU-only text is left.

Each header is run through the GNU preprocessor with every predefined macro removed (`-undef`:
no __GNUC__, __clang__, __x86_64__, __SSE2__, __BYTE_ORDER__) and MSVC's defined instead
(_MSC_VER, _WIN32, _WIN64, _M_X64, _M_AMD64). System and library headers are empty stand-ins
(`-nostdinc`, a directory of empty files under the names the headers include), so the output is
the headers' own text on the branches MSVC compiles, whatever the host. The scan reports every
GNU-only construct left in it: builtins, __int128, GNU keywords (__attribute__, __asm__,
__typeof__, __extension__ and every other lowercase __word__), asm, typeof, statement
expressions, `#pragma GCC`, and x86 intrinsic headers included (they may only be included
under a guard that MSVC does not take).

`python tests/support/msvc_view.py [include_dir]` prints the findings per header.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tempfile

MSVC_DEFINES = ["-D_MSC_VER=1930", "-D_MSC_FULL_VER=193000000", "-D_WIN32", "-D_WIN64",
                "-D_M_X64", "-D_M_AMD64"]

# Text that only GCC and clang accept (matched on code with string literals removed).
GNU_ONLY = re.compile(
    r"\b__builtin_\w+"
    r"|\b__int128\b"
    r"|\b__[a-z][a-z_]*__\b"          # __attribute__, __asm__, __typeof__, __extension__, ...
    r"|\b(?:asm|typeof|__asm|__typeof|__auto_type|__label__)\b"
    r"|\(\s*\{"                        # statement expression ({ ... })
    r"|^\s*#\s*pragma\s+GCC\b"
    r"|\b_Pragma\s*\(\s*\"GCC")

# Intrinsic headers of GCC/clang (or x86 headers a portable path must not need).
GNU_INTRINSIC_HEADERS = {"x86intrin.h", "immintrin.h", "emmintrin.h", "xmmintrin.h",
                         "pmmintrin.h", "tmmintrin.h", "smmintrin.h", "nmmintrin.h",
                         "wmmintrin.h", "cpuid.h", "arm_acle.h", "arm_neon.h"}

_INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]+)>', re.M)
_LINEMARKER = re.compile(r'^# (\d+) "([^"]*)"')
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')


def _stub_dir(include_dir: pathlib.Path, root: pathlib.Path) -> pathlib.Path:
    """Empty stand-ins for every <...> header the shipped headers include."""
    stubs = root / "stubs"
    for header in (include_dir / "tokenwire").iterdir():
        for name in _INCLUDE.findall(header.read_text()):
            if not name.startswith("tokenwire/"):
                path = stubs / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    stubs.mkdir(exist_ok=True)
    return stubs


def preprocess(header: pathlib.Path, include_dir: pathlib.Path, root: pathlib.Path,
               cpp: str = "gcc") -> str:
    """The header alone in a translation unit, preprocessed as MSVC x64 would (C for .h, C++17
    for .hpp), with line markers."""
    lang = ["-x", "c++", "-D__cplusplus=201703L"] if header.suffix == ".hpp" else ["-x", "c"]
    unit = root / f"unit_{header.name}"
    unit.write_text(f"#include <tokenwire/{header.name}>\n")
    cmd = [cpp, "-E", "-undef", "-nostdinc", *lang, "-Wno-builtin-macro-redefined",
           *MSVC_DEFINES, "-I", str(_stub_dir(include_dir, root)), "-I", str(include_dir),
           str(unit)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def gnu_only(preprocessed: str, include_dir: pathlib.Path) -> list[str]:
    """Every GNU-only construct in the shipped headers' lines of `preprocessed`, as
    "file:line: text"."""
    own = str((include_dir / "tokenwire").resolve())
    found: list[str] = []
    current, line = "", 0
    for text in preprocessed.splitlines():
        marker = _LINEMARKER.match(text)
        if marker:
            line, current = int(marker.group(1)), marker.group(2)
            name = pathlib.PurePath(current).name
            if name in GNU_INTRINSIC_HEADERS and "/stubs/" in current:
                found.append(f"{name}: x86/ARM intrinsic header included")
            continue
        if str(pathlib.Path(current).resolve()).startswith(own):
            for match in GNU_ONLY.finditer(_STRING.sub('""', text)):
                found.append(f"{pathlib.PurePath(current).name}:{line}: {match.group(0)}")
        line += 1
    return sorted(set(found), key=found.index)


def headers(include_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in (include_dir / "tokenwire").iterdir() if p.suffix in (".h", ".hpp"))


def scan(include_dir: pathlib.Path, header: pathlib.Path) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        return gnu_only(preprocess(header, include_dir, pathlib.Path(tmp)), include_dir)


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        include_dir = pathlib.Path(argv[1])
    else:
        import tokenwire
        include_dir = pathlib.Path(tokenwire.get_include())
    everything: set[str] = set()
    for header in headers(include_dir):
        found = scan(include_dir, header)
        everything.update(found)
        print(f"{header.name}: {len(found)}")
        for item in found:
            print(f"    {item}")
    print(f"distinct GNU-only constructs in the MSVC view: {len(everything)}")
    return 1 if everything else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
