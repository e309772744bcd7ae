/* fuzz/run.sh's check that the sanitizer runtime reaches the fuzz processes (docs/fuzzing.md).
 *
 * Built as a shared library with the flags the extension is built with
 * (-fsanitize=fuzzer-no-link,address), loaded by ctypes into a Python process started exactly
 * as the atheris targets are (the same LD_PRELOAD, PYTHONMALLOC and ASAN_OPTIONS), and called
 * on a small bytes object: it reads the byte after the object's terminating NUL. That read must
 * end the process with an ASan heap-buffer-overflow report. If the runtime were missing, or the
 * object lay in a pymalloc arena that ASan cannot see into, the call would return and run.sh
 * stops before fuzzing: a fuzz run whose memory errors go unreported would prove nothing. */
#include <stddef.h>

int tw_selfcheck_read_past(const char *data, size_t len) {
    volatile const char *p = data;
    return p[len + 1];   /* data[len] is the NUL a bytes object keeps; data[len + 1] is past it */
}
