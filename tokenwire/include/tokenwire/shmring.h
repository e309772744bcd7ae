/* The shared-memory ring's atomics (tokenwire.shm, through tokenwire/_shmring.pxi).
 *
 * A slot's state word is an aligned 8-byte word that two processes change: the sender takes a
 * FREE slot and makes it FULL, the receiver (or the sender taking a slot back) makes a FULL slot
 * FREE. Every transition the other side can race with is one compare-and-swap from the state
 * the caller saw, so a late transition never overwrites a newer one. The reader's copy out of a
 * slot is a seqlock read: acquire-load the word, copy, then the compare-and-swap that frees the
 * slot succeeds only if the word never changed (generations never repeat); being sequentially
 * consistent, it cannot be reordered before the copy. The writer marks a slot WRITING with a
 * compare-and-swap, which its stores of the bytes cannot move ahead of, and publishes FULL with
 * a release store.
 *
 * Linux only in use (tokenwire.shm.available()); the other platforms compile stubs that fail.
 */
#ifndef TOKENWIRE_SHMRING_H
#define TOKENWIRE_SHMRING_H

/* The wait's clock is POSIX's clock_gettime(CLOCK_MONOTONIC), which a strict C mode (-std=c11,
 * __STRICT_ANSI__) hides unless a feature macro asks for it. A feature macro only works before
 * the first system header, so it is defined here only in a strict C mode, when no feature macro
 * was chosen and no C library header has been included yet (glibc and musl define _FEATURES_H
 * in the first one): then this header is the first include and POSIX.1-2008 only adds names.
 * Otherwise the includer chooses; a strict-mode includer that already included system headers
 * must define _POSIX_C_SOURCE >= 199309L itself (Python.h does: pyconfig.h sets 200809L), and
 * the #error below says so instead of an implicit declaration. GNU modes and C++ see POSIX by
 * default. */
#if defined(__linux__) && defined(__STRICT_ANSI__) && !defined(__cplusplus) && \
    !defined(_FEATURES_H) && !defined(_POSIX_C_SOURCE) && !defined(_XOPEN_SOURCE) && \
    !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE)
#  define _POSIX_C_SOURCE 200809L
#endif

#include <stdint.h>

#if defined(__linux__)
#  include <time.h>
#  if !defined(CLOCK_MONOTONIC)
#    error "tokenwire/shmring.h needs clock_gettime: define _POSIX_C_SOURCE 200809L"
#  endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#  define TW_SHM_ATOMICS 1
#else
#  define TW_SHM_ATOMICS 0
#endif

static inline uint64_t tw_shm_load(const uint64_t *word) {
#if TW_SHM_ATOMICS
    return __atomic_load_n(word, __ATOMIC_ACQUIRE);
#else
    return *(const volatile uint64_t *)word;
#endif
}

static inline void tw_shm_store(uint64_t *word, uint64_t value) {
#if TW_SHM_ATOMICS
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
#else
    *(volatile uint64_t *)word = value;
#endif
}

/* 1 when *word was `expect` and is now `desired`, 0 when it held something else. Sequentially
   consistent, so both acquire and release: the loads and stores before it (a slot's bytes
   copied out, the WRITING state) complete before it, those after it start after it. */
static inline int tw_shm_cas(uint64_t *word, uint64_t expect, uint64_t desired) {
#if TW_SHM_ATOMICS
    return __atomic_compare_exchange_n(word, &expect, desired, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST) ? 1 : 0;
#else
    if (*(volatile uint64_t *)word != expect) return 0;   /* not used: shm is Linux only */
    *(volatile uint64_t *)word = desired;
    return 1;
#endif
}

static inline void tw_shm_cpu_relax(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_ia32_pause();
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A mapping's users: every access to the mapping enters (tw_shm_enter) and leaves
 * (tw_shm_leave); tw_shm_close marks it closing and returns once no access is in progress, so
 * the caller may then unmap. An access that enters after the mark is refused (0). Both sides
 * are sequentially consistent: either the access sees `closing`, or the close sees the access. */
typedef struct {
    int64_t users;
    int32_t closing;
} tw_shm_guard;

static inline int tw_shm_closing(const tw_shm_guard *g) {
#if TW_SHM_ATOMICS
    return __atomic_load_n(&g->closing, __ATOMIC_SEQ_CST);
#else
    return *(const volatile int32_t *)&g->closing;
#endif
}

static inline int tw_shm_enter(tw_shm_guard *g) {
#if TW_SHM_ATOMICS
    __atomic_fetch_add(&g->users, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&g->closing, __ATOMIC_SEQ_CST)) {
        __atomic_fetch_sub(&g->users, 1, __ATOMIC_SEQ_CST);
        return 0;
    }
    return 1;
#else
    if (g->closing) return 0;     /* not used: shm is Linux only */
    ++g->users;
    return 1;
#endif
}

static inline void tw_shm_leave(tw_shm_guard *g) {
#if TW_SHM_ATOMICS
    __atomic_fetch_sub(&g->users, 1, __ATOMIC_SEQ_CST);
#else
    --g->users;
#endif
}

/* 1 for the caller that marked the guard closing (it waited for every access to leave), 0 when
 * another caller had marked it already. Callers run it without the GIL. */
static inline int tw_shm_close(tw_shm_guard *g) {
#if TW_SHM_ATOMICS
    int32_t open = 0;
    if (!__atomic_compare_exchange_n(&g->closing, &open, 1, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return 0;
    while (__atomic_load_n(&g->users, __ATOMIC_SEQ_CST) != 0)
        tw_shm_cpu_relax();
    return 1;
#else
    if (g->closing) return 0;
    g->closing = 1;
    return 1;
#endif
}

/* Spin (without sleeping) until *word == value or `timeout_ns` have passed: 1 if it holds the
 * value, 0 on timeout, -1 when `guard` was marked closing meanwhile (the caller entered it, so
 * the mapping stays until it leaves). Callers run it without the GIL. */
static inline int tw_shm_wait(const uint64_t *word, uint64_t value, int64_t timeout_ns,
                              const tw_shm_guard *guard) {
#if defined(__linux__)
    struct timespec t0, t;
    unsigned spins = 0;
    if (tw_shm_load(word) == value) return 1;
    if (timeout_ns <= 0) return 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        tw_shm_cpu_relax();
        if (tw_shm_load(word) == value) return 1;
        if (tw_shm_closing(guard)) return -1;
        if ((++spins & 63) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((int64_t)(t.tv_sec - t0.tv_sec) * 1000000000 + (t.tv_nsec - t0.tv_nsec)
                    >= timeout_ns)
                return tw_shm_load(word) == value;
        }
    }
#else
    (void)timeout_ns;
    (void)guard;
    return tw_shm_load(word) == value;
#endif
}

#endif /* TOKENWIRE_SHMRING_H */
