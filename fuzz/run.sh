#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoder with the C code instrumented (docs/fuzzing.md).
#
#   fuzz/run.sh PYTHON SECONDS [libFuzzer args...]
#
# Copies the tracked tree to build/fuzz (or $TOKENWIRE_FUZZ_DIR), builds the extension there with clang and
# -fsanitize=fuzzer-no-link,address (TOKENWIRE_FUZZ=1, TOKENWIRE_SANITIZE=address), and runs
# fuzz/fuzz_decode.py under atheris' ASan+libFuzzer runtime for SECONDS. PYTHON is an interpreter
# with Cython, numpy, zstandard and atheris installed (atheris built against the same clang:
# CLANG_BIN=$(command -v clang) pip install atheris). Exits non-zero on any crash, sanitizer
# report, leak or failed property.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$1; seconds=$2; shift 2
command -v clang >/dev/null || { echo "fuzz/run.sh: clang is not installed" >&2; exit 2; }
dir=${TOKENWIRE_FUZZ_DIR:-build/fuzz}
rm -rf "$dir" && mkdir -p "$dir"
git ls-files -z | xargs -0 tar cf - | tar xf - -C "$dir"
(cd "$dir" && CC=clang CXX=clang++ LDSHARED="clang -shared" TOKENWIRE_FUZZ=1 \
    TOKENWIRE_SANITIZE=address "$py" setup.py -q build_ext --inplace >build.log 2>&1) \
    || { cat "$dir/build.log" >&2; exit 1; }
runtime=$("$py" -c "import atheris, os; print(os.path.join(atheris.path(), 'asan_with_fuzzer.so'))")
# detect_leaks=0: CPython keeps memory alive until exit on purpose (see docs/fuzzing.md).
cd "$dir"
LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
    PYTHONPATH="$PWD" "$py" fuzz/fuzz_decode.py --seconds "$seconds" -- "$@"
