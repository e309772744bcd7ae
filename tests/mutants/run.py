#!/usr/bin/env python3
"""The standing mutation check: plant each bug of tests/mutants/table.py in a copy of the tree,
run the tests named to kill it, and fail on any that survives or no longer applies.

    python tests/mutants/run.py                 # every mutant (CONTRIBUTING.md: when to)
    python tests/mutants/run.py --rotate 6      # 6 of them, a different 6 each day (CI)
    python tests/mutants/run.py --only NAME ... # these
    python tests/mutants/run.py --list          # names, files and tests

Run it with the interpreter of a development install (`.venv/bin/python`: Cython, setuptools,
pytest, hypothesis and the extras the named tests need). The working tree is never written:
the tracked and untracked (not ignored) files are copied to a temporary directory, the
extension is built there once (`--opt`: the optimisation level of that build and of every
rebuild, 1 by default, to keep rebuilds cheap), and the tests run against that copy
(PYTHONPATH). Each mutant is a file, an exact snippet of it that must occur exactly once, and
its replacement, so edits elsewhere in the file leave it applicable. Pure-Python mutants run
first on the unmutated build; a mutant of a .pyx, .pxi, .pxd or header rebuilds the extension
(a header's reuses the unmutated generated C, so only the compiler runs), each in the one
build directory. Before any mutant the named tests must pass on the unmutated copy.

A mutant is killed when its tests fail (pytest exit status 1) or crash the interpreter; it
survives when they pass. A snippet found other than once, a build that fails, or tests that
cannot be collected (exit status 2-5: a renamed test) fail the check as well: fix the table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from table import MUTANTS, Mutant  # noqa: E402

#: Sources compiled into the extension: a mutant of one rebuilds it.
COMPILED = {".pyx", ".pxi", ".pxd", ".h", ".hpp", ".c"}
#: Of those, the ones the generated C includes rather than contains.
HEADERS = {".h", ".hpp", ".c"}


def problems(mutants: list[Mutant], root: Path) -> list[str]:
    """What keeps each mutant from applying to the tree at `root`."""
    out = []
    seen: set[str] = set()
    for m in mutants:
        if m.name in seen:
            out.append(f"{m.name}: named twice")
        seen.add(m.name)
        path = root / m.path
        if not path.is_file():
            out.append(f"{m.name}: no file {m.path}")
            continue
        found = path.read_text().count(m.old)
        if found != 1:
            out.append(f"{m.name}: its snippet occurs {found} times in {m.path}, not once")
        if m.old == m.new or not m.tests:
            out.append(f"{m.name}: changes nothing or names no test")
    return out


def copy_tree(dest: Path) -> None:
    """The tracked and untracked, not ignored, files of the working tree, as they are now."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, check=True, capture_output=True).stdout
    for name in listed.decode().split("\0"):
        src = ROOT / name
        if name and src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def compiler_wrapper(where: Path, opt: int) -> str:
    """A C compiler command that builds at -O`opt` without debug info: setup.py's -O3 comes
    after CC and CFLAGS on the command line, so the wrapper rewrites it."""
    cc = os.environ.get("CC", "cc").split()
    script = where / "cc"
    script.write_text(
        "#!/bin/sh\n"
        "for a do\n"
        "  shift\n"
        "  case $a in -O0|-O1|-O2|-O3|-g) ;; *) set -- \"$@\" \"$a\" ;; esac\n"
        "done\n"
        f"exec {' '.join(cc)} -O{opt} \"$@\"\n")
    script.chmod(0o755)
    return str(script)


class Tree:
    """The copy the mutants are planted in, with its build."""

    def __init__(self, base: Path, opt: int) -> None:
        self.path = base / "tree"
        self.path.mkdir()
        copy_tree(self.path)
        self.build_temp = base / "build"
        self.cc = compiler_wrapper(base, opt)
        self.env = dict(os.environ, PYTHONPATH=str(self.path), CC=self.cc, COLUMNS="200")
        self.env.pop("PYTEST_ADDOPTS", None)
        self.env.setdefault("HYPOTHESIS_PROFILE", "dev")    # not CI's deep search
        self.generated: bytes = b""

    def build(self, keep_generated: bool = False) -> subprocess.CompletedProcess[str]:
        """Build the extension in place: the C compiler always runs; Cython too unless
        `keep_generated` (a header changed: the unmutated generated C is put back)."""
        pkg = self.path / "tokenwire"
        for so in pkg.glob("_core.*.so"):
            so.unlink()
        if keep_generated:
            (pkg / "_core.c").write_bytes(self.generated)      # newer than every source
        else:
            (pkg / "_core.c").unlink(missing_ok=True)
        r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace",
                            "--build-temp", str(self.build_temp)],
                           cwd=self.path, env=self.env, capture_output=True, text=True)
        if r.returncode == 0 and not self.generated:
            self.generated = (pkg / "_core.c").read_bytes()
        return r

    def imported_from_here(self) -> bool:
        code = "import tokenwire._core as c, tokenwire as t; print(c.__file__); print(t.__file__)"
        r = subprocess.run([sys.executable, "-c", code], cwd=self.path / "tests", env=self.env,
                           capture_output=True, text=True)
        return r.returncode == 0 and all(line.startswith(str(self.path))
                                         for line in r.stdout.split())

    def pytest(self, tests: tuple[str, ...], timeout: float) -> tuple[str, str]:
        """('passed' | 'failed' | 'crashed' | 'timeout' | 'error', the report's last lines)."""
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               "--no-header", *tests]
        try:
            r = subprocess.run(cmd, cwd=self.path, env=self.env, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", f"no result in {timeout:.0f} s"
        lines = (r.stdout + r.stderr).strip().splitlines()
        failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        detail = "\n".join((failed or lines[-3:])[:3])
        if r.returncode == 0:
            return "passed", detail
        if r.returncode == 1:
            return "failed", detail
        if r.returncode < 0 or r.returncode > 5:
            return "crashed", f"exit status {r.returncode}\n" + "\n".join(lines[-3:])
        return "error", f"pytest exit status {r.returncode}\n" + "\n".join(lines[-5:])


def rotation(mutants: list[Mutant], k: int, day: datetime.date) -> list[Mutant]:
    """`k` mutants for `day`: consecutive in the table's order from an offset that moves by `k`
    a day, so every mutant runs within ceil(len / k) days."""
    n = len(mutants)
    start = day.toordinal() * k % n
    return [mutants[(start + i) % n] for i in range(min(k, n))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants")
    ap.add_argument("--rotate", type=int, metavar="K", help="run K mutants, chosen by the day")
    ap.add_argument("--day", type=datetime.date.fromisoformat, default=datetime.date.today(),
                    help="the day --rotate chooses for (YYYY-MM-DD, default today)")
    ap.add_argument("--opt", type=int, default=1, choices=range(4),
                    help="optimisation level of the mutated builds (default 1)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per mutant's tests")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = ap.parse_args()

    if args.list:
        for m in MUTANTS:
            print(f"{m.name}\n    {m.path}\n    " + "\n    ".join(m.tests))
        return 0
    # Every mutant must still apply, whichever run: a stale entry fails the check at once.
    stale = problems(MUTANTS, ROOT)
    if stale:
        print("mutants that no longer apply:\n  " + "\n  ".join(stale))
        return 1
    chosen = list(MUTANTS)
    if args.only:
        unknown = set(args.only) - {m.name for m in MUTANTS}
        if unknown:
            print(f"unknown mutants: {', '.join(sorted(unknown))}")
            return 2
        chosen = [m for m in MUTANTS if m.name in args.only]
    elif args.rotate:
        chosen = rotation(chosen, args.rotate, args.day)
        print(f"rotation for {args.day}: {', '.join(m.name for m in chosen)}")
    # Pure Python first: they run on the unmutated build, before any rebuild.
    chosen.sort(key=lambda m: Path(m.path).suffix in COMPILED)

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tokenwire-mutants-") as tmp:
        tree = Tree(Path(tmp), args.opt)
        r = tree.build()
        if r.returncode != 0:
            print(f"the unmutated tree does not build:\n{r.stdout}{r.stderr}")
            return 1
        if not tree.imported_from_here():
            print("the tests would not import the copy's tokenwire (check PYTHONPATH)")
            return 1
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        outcome, detail = tree.pytest(tests, args.timeout)
        print(f"unmutated: {len(tests)} test ids {outcome} "
              f"({time.monotonic() - t0:.0f} s with the build)")
        if outcome != "passed":
            print(detail)
            return 1

        bad = []
        rebuilt = False
        for m in chosen:
            t = time.monotonic()
            path = tree.path / m.path
            original = path.read_text()
            path.write_text(original.replace(m.old, m.new))
            try:
                suffix = Path(m.path).suffix
                if suffix in COMPILED:
                    r = tree.build(keep_generated=suffix in HEADERS)
                    rebuilt = True
                    if r.returncode != 0:
                        log = (r.stdout + r.stderr)[-800:]
                        outcome, detail = "error", "does not build:\n" + log
                    else:
                        outcome, detail = tree.pytest(m.tests, args.timeout)
                else:
                    assert not rebuilt
                    outcome, detail = tree.pytest(m.tests, args.timeout)
            finally:
                path.write_text(original)
            verdict = {"failed": "killed", "crashed": "killed", "timeout": "killed",
                       "passed": "SURVIVED", "error": "ERROR"}[outcome]
            print(f"{verdict:8} {time.monotonic() - t:6.1f} s  {m.name}  ({outcome})")
            print("         " + detail.replace("\n", "\n         ")[:600])
            if verdict != "killed":
                bad.append(f"{m.name}: {verdict}")
            sys.stdout.flush()
    took = time.monotonic() - t0
    print(f"{len(chosen)} mutants, {len(chosen) - len(bad)} killed, {len(bad)} not, "
          f"in {took:.0f} s")
    for line in bad:
        print("  " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
