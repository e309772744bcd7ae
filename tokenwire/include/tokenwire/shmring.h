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

#include <stdint.h>

#if defined(__linux__)
#  include <time.h>
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

/* Spin (without sleeping) until *word == value or `timeout_ns` have passed: 1 if it holds the
 * value. Callers run it without the GIL. */
static inline int tw_shm_wait(const uint64_t *word, uint64_t value, int64_t timeout_ns) {
#if defined(__linux__)
    struct timespec t0, t;
    unsigned spins = 0;
    if (tw_shm_load(word) == value) return 1;
    if (timeout_ns <= 0) return 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        tw_shm_cpu_relax();
        if (tw_shm_load(word) == value) return 1;
        if ((++spins & 63) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((int64_t)(t.tv_sec - t0.tv_sec) * 1000000000 + (t.tv_nsec - t0.tv_nsec)
                    >= timeout_ns)
                return tw_shm_load(word) == value;
        }
    }
#else
    (void)timeout_ns;
    return tw_shm_load(word) == value;
#endif
}

#endif /* TOKENWIRE_SHMRING_H */
