#!/usr/bin/env bash
# Coverage-guided fuzzing with the C code instrumented (docs/fuzzing.md).
#
#   fuzz/run.sh PYTHON SECONDS [TARGET[:SECONDS]...] [libFuzzer args...]
#
# TARGETs: decode (fuzz/fuzz_decode.py, the default), msgspec (fuzz/fuzz_msgspec.py), base64
# (fuzz/fuzz_base64.py); each runs for its own SECONDS or the common one, one after the other,
# against one build. Copies the tracked tree to build/fuzz (or $TOKENWIRE_FUZZ_DIR), builds the
# extension there with clang and -fsanitize=fuzzer-no-link,address (TOKENWIRE_FUZZ=1,
# TOKENWIRE_SANITIZE=address), and runs each target under atheris' ASan+libFuzzer runtime.
# PYTHON is an interpreter with Cython, numpy, zstandard and atheris installed (atheris built
# against the same clang: CLANG_BIN=$(command -v clang) pip install atheris; msgspec for the
# msgspec target, pybase64 for the base64 one). Exits non-zero on any crash, sanitizer report,
# leak or failed property.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$1; seconds=$2; shift 2
targets=()
while (($#)) && [[ $1 != -* ]]; do targets+=("$1"); shift; done
((${#targets[@]})) || targets=(decode)
[[ ${1:-} == -- ]] && shift
for spec in "${targets[@]}"; do
  [[ -f fuzz/fuzz_${spec%%:*}.py ]] || { echo "fuzz/run.sh: no target ${spec%%:*}" >&2; exit 2; }
done
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
for spec in "${targets[@]}"; do
  name=${spec%%:*}; secs=$seconds
  [[ $spec == *:* ]] && secs=${spec#*:}
  echo "== fuzz/run.sh: $name for $secs s" >&2
  LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
      PYTHONPATH="$PWD" "$py" "fuzz/fuzz_$name.py" --seconds "$secs" -- "$@"
done
