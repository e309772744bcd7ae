#!/usr/bin/env bash
# Coverage-guided fuzzing with the C code instrumented (docs/fuzzing.md).
#
#   fuzz/run.sh PYTHON SECONDS [TARGET[:SECONDS]...] [libFuzzer args...]
#
# TARGETs: decode (fuzz/fuzz_decode.py, the default), msgspec (fuzz/fuzz_msgspec.py), base64
# (fuzz/fuzz_base64.py), shm_loads (fuzz/fuzz_shm_loads.py), pickle (fuzz/fuzz_pickle.py),
# signed (fuzz/fuzz_signed.py), msgpack_ids / json_ids / protobuf_ids (fuzz/fuzz_*_ids.py), and
# pfor (fuzz/pfor_paths.c, a libFuzzer program); each runs for its own SECONDS or the common one, one after the other,
# against one build. Copies the tracked tree to build/fuzz (or $TOKENWIRE_FUZZ_DIR), builds the
# extension there with clang and -fsanitize=fuzzer-no-link,address (TOKENWIRE_FUZZ=1,
# TOKENWIRE_SANITIZE=address), and runs each Python target under atheris' ASan+libFuzzer runtime
# (asan_with_fuzzer.so, LD_PRELOAD) with PYTHONMALLOC=malloc, after checking that a planted read
# past a bytes object in code built the same way is reported (fuzz/asan_selfcheck.c). pfor is
# built with -fsanitize=fuzzer,address,undefined (-O0 unless $TOKENWIRE_PFOR_OPT says otherwise:
# at -O1 its unrolled kernels take minutes to compile). PYTHON is an interpreter with Cython,
# numpy, zstandard and atheris installed (the `fuzz` extra); msgspec for the msgspec target,
# pybase64 for the base64 one. Exits non-zero on any crash, sanitizer report, leak or failed
# property.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$1; seconds=$2; shift 2
targets=()
while (($#)) && [[ $1 != -* ]]; do targets+=("$1"); shift; done
((${#targets[@]})) || targets=(decode)
[[ ${1:-} == -- ]] && shift
for spec in "${targets[@]}"; do
  name=${spec%%:*}
  [[ $name == pfor || -f fuzz/fuzz_$name.py ]] \
    || { echo "fuzz/run.sh: no target $name" >&2; exit 2; }
done
command -v clang >/dev/null || { echo "fuzz/run.sh: clang is not installed" >&2; exit 2; }
dir=${TOKENWIRE_FUZZ_DIR:-build/fuzz}
rm -rf "$dir" && mkdir -p "$dir"
git ls-files -z | xargs -0 tar cf - | tar xf - -C "$dir"
cd "$dir"
# pfor's program builds beside the extension (one core each).
pfor_pid=
if [[ " ${targets[*]} " == *" pfor"[:\ ]* ]]; then
  pfor_flags="${TOKENWIRE_PFOR_OPT:--O0} -g -std=c11 -fno-sanitize-recover=undefined"
  pfor_flags+=" -I tokenwire/include"
  (clang -fsanitize=fuzzer-no-link,address,undefined $pfor_flags -DTWPF_PORTABLE \
       -c fuzz/pfor_paths.c -o pfor_portable.o &&
   clang -fsanitize=fuzzer,address,undefined $pfor_flags fuzz/pfor_paths.c pfor_portable.o \
       -o pfor_paths) >pfor-build.log 2>&1 &
  pfor_pid=$!
fi
(CC=clang CXX=clang++ LDSHARED="clang -shared" TOKENWIRE_FUZZ=1 TOKENWIRE_SANITIZE=address \
    "$py" setup.py -q build_ext --inplace >build.log 2>&1) || { cat build.log >&2; exit 1; }
if [[ -n $pfor_pid ]]; then
  wait "$pfor_pid" || { cat pfor-build.log >&2; exit 1; }
fi
runtime=$("$py" -c "import atheris, os; print(os.path.join(atheris.path(), 'asan_with_fuzzer.so'))")
[[ -f $runtime ]] || { echo "fuzz/run.sh: atheris ships no $runtime" >&2; exit 1; }
# How every Python target runs. PYTHONMALLOC=malloc: each bytes object (a frame) is an
# allocation of its own that ASan guards, not a slot of a pymalloc arena it cannot see into.
# detect_leaks=0: CPython keeps memory alive until exit on purpose (see docs/fuzzing.md).
pyrun() {
  LD_PRELOAD="$runtime" PYTHONMALLOC=malloc PYTHONPATH="$PWD" \
      ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$py" "$@"
}
# The proof that memory errors are reported: a read past a 16-byte bytes object, in a library
# built with the extension's flags and loaded the same way, must end that process with an ASan
# report (fuzz/asan_selfcheck.c).
clang -shared -fPIC -fsanitize=fuzzer-no-link,address -g fuzz/asan_selfcheck.c -o asan_selfcheck.so
if pyrun -c "import ctypes; lib = ctypes.CDLL('./asan_selfcheck.so')
lib.tw_selfcheck_read_past(b'x' * 16, ctypes.c_size_t(16))" 2>selfcheck.log \
    || ! grep -q "ERROR: AddressSanitizer: heap-buffer-overflow" selfcheck.log; then
  cat selfcheck.log >&2
  echo "fuzz/run.sh: a read past a bytes object went unreported: ASan does not reach the fuzz" \
       "processes" >&2
  exit 1
fi
echo "== fuzz/run.sh: ASan self-check: a planted read past a bytes object is reported" >&2
for spec in "${targets[@]}"; do
  name=${spec%%:*}; secs=$seconds
  [[ $spec == *:* ]] && secs=${spec#*:}
  echo "== fuzz/run.sh: $name for $secs s" >&2
  if [[ $name == pfor ]]; then
    rm -rf pfor-corpus && pyrun fuzz/pfor_seeds.py pfor-corpus
    UBSAN_OPTIONS=print_stacktrace=1 ./pfor_paths -max_total_time="$secs" -max_len=8192 \
        -rss_limit_mb=2048 "$@" pfor-corpus
  else
    pyrun "fuzz/fuzz_$name.py" --seconds "$secs" -- "$@"
  fi
done
