/* Compiler portability: the one home of every compiler-specific spelling the C kernels and the
 * C++ headers use outside a code path that is itself guarded (an x86 target attribute, an
 * intrinsic under __x86_64__ && __GNUC__).
 *
 *   TW_INLINE            static, always inlined (GCC/clang attribute, MSVC __forceinline)
 *   TW_RESTRICT          C99's restrict, spelled __restrict in C++ (GCC, clang, MSVC)
 *   tw_bswap16/32/64     byte swaps
 *   tw_clz32(v)          leading zero bits of v, v != 0
 *   tw_ctz64(v)          trailing zero bits of v, v != 0
 *   tw_popcount64(v)     bits set in v (the instruction where the target has it)
 *   tw_popcount64_swar   the same without a popcount instruction or a library call
 *   tw_ptr_load_acquire  a pointer slot read by threads that another thread may fill
 *   tw_ptr_publish(s, p) fill an empty (NULL) slot with p once: the value it holds after
 *   tw_ptr_cas(s, e, p)  replace e in a slot by p once (the same, from another value)
 *   tw_size_load_relaxed / tw_size_store_relaxed   a process-wide setting or counter word
 *                        that threads read while another may write it (no ordering)
 *
 * Each has a GCC/clang builtin, an MSVC intrinsic and a plain C fallback, so the headers build
 * with GCC, clang, MSVC and any C99 or C++11 compiler. C99 (or later), C++11 (or later).
 */
#ifndef TOKENWIRE_COMPAT_H
#define TOKENWIRE_COMPAT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#  define TW_GNUC 1
#else
#  define TW_GNUC 0
#endif

#if !TW_GNUC && defined(_MSC_VER)
#  define TW_MSVC 1
#  include <intrin.h>   /* _BitScanReverse, _BitScanForward(64) */
#  include <stdlib.h>   /* _byteswap_ushort, _byteswap_ulong, _byteswap_uint64 */
#else
#  define TW_MSVC 0
#endif

#if TW_GNUC
#  define TW_INLINE static inline __attribute__((always_inline))
/* A static function kept out of line (unused: a header's includer may not call it). */
#  define TW_NOINLINE __attribute__((noinline, unused))
#elif TW_MSVC
#  define TW_INLINE static __forceinline
#  define TW_NOINLINE __declspec(noinline)
#else
#  define TW_INLINE static inline
#  define TW_NOINLINE
#endif

#if defined(__cplusplus)
#  if TW_GNUC || TW_MSVC
#    define TW_RESTRICT __restrict
#  else
#    define TW_RESTRICT
#  endif
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#  define TW_RESTRICT restrict
#elif TW_MSVC
#  define TW_RESTRICT __restrict
#else
#  define TW_RESTRICT
#endif

/* ---- byte swaps ---------------------------------------------------------------------------- */

#if TW_GNUC
TW_INLINE uint16_t tw_bswap16(uint16_t x) { return __builtin_bswap16(x); }
TW_INLINE uint32_t tw_bswap32(uint32_t x) { return __builtin_bswap32(x); }
TW_INLINE uint64_t tw_bswap64(uint64_t x) { return __builtin_bswap64(x); }
#elif TW_MSVC
TW_INLINE uint16_t tw_bswap16(uint16_t x) { return _byteswap_ushort(x); }
TW_INLINE uint32_t tw_bswap32(uint32_t x) { return _byteswap_ulong(x); }
TW_INLINE uint64_t tw_bswap64(uint64_t x) { return _byteswap_uint64(x); }
#else
TW_INLINE uint16_t tw_bswap16(uint16_t x) { return (uint16_t)((x >> 8) | (x << 8)); }
TW_INLINE uint32_t tw_bswap32(uint32_t x) {
    return (x >> 24) | ((x >> 8) & 0xFF00u) | ((x << 8) & 0xFF0000u) | (x << 24);
}
TW_INLINE uint64_t tw_bswap64(uint64_t x) {
    return (uint64_t)tw_bswap32((uint32_t)x) << 32 | tw_bswap32((uint32_t)(x >> 32));
}
#endif

/* ---- bit scans and counts ------------------------------------------------------------------ */

/* Leading zero bits of v; v != 0. */
TW_INLINE unsigned tw_clz32(uint32_t v) {
#if TW_GNUC
    return (unsigned)__builtin_clz(v);          /* unsigned int is 32 bits wherever GCC runs */
#elif TW_MSVC
    unsigned long i;
    _BitScanReverse(&i, v);
    return 31u - (unsigned)i;
#else
    unsigned n = 0;
    if (!(v & 0xFFFF0000u)) { n += 16; v <<= 16; }
    if (!(v & 0xFF000000u)) { n += 8; v <<= 8; }
    if (!(v & 0xF0000000u)) { n += 4; v <<= 4; }
    if (!(v & 0xC0000000u)) { n += 2; v <<= 2; }
    if (!(v & 0x80000000u)) { n += 1; }
    return n;
#endif
}

/* Trailing zero bits of v; v != 0. */
TW_INLINE unsigned tw_ctz64(uint64_t v) {
#if TW_GNUC
    return (unsigned)__builtin_ctzll(v);
#elif TW_MSVC && (defined(_M_X64) || defined(_M_ARM64))
    unsigned long i;
    _BitScanForward64(&i, v);
    return (unsigned)i;
#elif TW_MSVC
    unsigned long i;
    if (_BitScanForward(&i, (unsigned long)v)) return (unsigned)i;
    _BitScanForward(&i, (unsigned long)(v >> 32));
    return 32u + (unsigned)i;
#else
    unsigned n = 0;
    if (!(v & 0xFFFFFFFFu)) { n += 32; v >>= 32; }
    if (!(v & 0xFFFFu)) { n += 16; v >>= 16; }
    if (!(v & 0xFFu)) { n += 8; v >>= 8; }
    if (!(v & 0xFu)) { n += 4; v >>= 4; }
    if (!(v & 0x3u)) { n += 2; v >>= 2; }
    if (!(v & 0x1u)) { n += 1; }
    return n;
#endif
}

/* Bits set in v, by SWAR: baseline x86-64 (no popcnt instruction) gets no library call. */
TW_INLINE unsigned tw_popcount64_swar(uint64_t v) {
    v = v - ((v >> 1) & 0x5555555555555555ull);
    v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
    v = (v + (v >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (unsigned)((v * 0x0101010101010101ull) >> 56);
}

/* Bits set in v: GCC/clang's builtin, one instruction inside a function whose target has one
 * (target("popcnt"), aarch64's cnt); MSVC's __popcnt64 would fault on CPUs without POPCNT, so
 * MSVC gets the SWAR count. */
TW_INLINE unsigned tw_popcount64(uint64_t v) {
#if TW_GNUC
    return (unsigned)__builtin_popcountll(v);
#else
    return tw_popcount64_swar(v);
#endif
}

/* A slot of pointers that threads fill lazily and never change afterwards (the int table of
 * tolist): `tw_ptr_load_acquire` reads it (a plain load on x86; everything the filling thread
 * wrote before publishing is visible once the pointer is), `tw_ptr_publish` fills an empty
 * slot with one compare-and-swap and returns what the slot holds afterwards: `p` for the
 * thread that filled it, the winner's pointer for one that lost the race (which then drops
 * its own object). Without the GIL two threads may fill one slot at once; this is the one
 * atomic step that publishes it once. GCC/clang builtins; MSVC's interlocked intrinsics (the
 * loads through volatile with a barrier: x86 orders them, ARM64's /volatile:iso does not, so
 * ARM64 uses its acquire load); C11 <stdatomic.h> elsewhere. */
#if !TW_GNUC && TW_MSVC
#  include <intrin.h>
#elif !TW_GNUC && !defined(__cplusplus) && defined(__STDC_VERSION__) && \
    __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_ATOMICS__)
#  include <stdatomic.h>
#  define TW_C11_ATOMICS 1
#endif

TW_INLINE void *tw_ptr_load_acquire(void *const *slot) {
#if TW_GNUC
    return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
#elif TW_MSVC && defined(_M_ARM64)
    return (void *)__ldar64((unsigned __int64 volatile *)slot);
#elif TW_MSVC
    void *p = *(void *const volatile *)slot;
    _ReadWriteBarrier();
    return p;
#elif defined(TW_C11_ATOMICS)
    return atomic_load_explicit((void *_Atomic const *)slot, memory_order_acquire);
#else
    return *(void *const volatile *)slot;        /* a compiler with no atomics: GIL builds only */
#endif
}

/* Replace `expected` in *slot by `desired` with one compare-and-swap; returns what the slot holds
 * afterwards (`desired` when this call replaced it, the other thread's value otherwise). */
TW_INLINE void *tw_ptr_cas(void **slot, void *expected, void *desired) {
#if TW_GNUC
    if (__atomic_compare_exchange_n(slot, &expected, desired, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return desired;
    return expected;
#elif TW_MSVC
    void *was = _InterlockedCompareExchangePointer(slot, desired, expected);
    return was == expected ? desired : was;
#elif defined(TW_C11_ATOMICS)
    if (atomic_compare_exchange_strong_explicit((void *_Atomic *)slot, &expected, desired,
                                                memory_order_acq_rel, memory_order_acquire))
        return desired;
    return expected;
#else
    if (*slot == expected) *slot = desired;      /* a compiler with no atomics: GIL builds only */
    return *slot;
#endif
}

TW_INLINE void *tw_ptr_publish(void **slot, void *p) {
    return tw_ptr_cas(slot, 0, p);
}

/* A size_t word of process-wide state (a threshold, a high-water mark) that threads read while
 * another may store it: atomic, relaxed (one plain load or store on every target), so that
 * without the GIL it is no data race; the value itself orders nothing else. */
TW_INLINE size_t tw_size_load_relaxed(const size_t *word) {
#if TW_GNUC
    return __atomic_load_n(word, __ATOMIC_RELAXED);
#elif defined(TW_C11_ATOMICS)
    return atomic_load_explicit((const _Atomic size_t *)word, memory_order_relaxed);
#else
    return *(const volatile size_t *)word;       /* MSVC: an aligned word's volatile load */
#endif
}

TW_INLINE void tw_size_store_relaxed(size_t *word, size_t value) {
#if TW_GNUC
    __atomic_store_n(word, value, __ATOMIC_RELAXED);
#elif defined(TW_C11_ATOMICS)
    atomic_store_explicit((_Atomic size_t *)word, value, memory_order_relaxed);
#else
    *(volatile size_t *)word = value;
#endif
}

#endif /* TOKENWIRE_COMPAT_H */
