/* Byte order: tokenwire's one set of little-endian loads and stores (all wire data is
 * little-endian), shared by the C kernels (bitpack.h, crc32c.h), the C++ header (wire.hpp,
 * python.hpp) and Cython (tokenwire/_byteorder.pxd), after asyncpg's hton.pxd.
 *
 * Loads and stores go through memcpy, so any address is fine and compilers emit one (unaligned)
 * load or store; on a little-endian host (every platform LLM serving runs on) there is no swap.
 * Written without casts so that it compiles cleanly as strict C++ too.
 */
#ifndef TOKENWIRE_BYTEORDER_H
#define TOKENWIRE_BYTEORDER_H

#include <stdint.h>
#include <string.h>

#include "compat.h"   /* TW_INLINE, tw_bswap16/32/64 */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#  define TW_HOST_BIG_ENDIAN 1
#else
#  define TW_HOST_BIG_ENDIAN 0
#endif

TW_INLINE uint32_t tw_load_le32(const void *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
#if TW_HOST_BIG_ENDIAN
    v = tw_bswap32(v);
#endif
    return v;
}

TW_INLINE uint64_t tw_load_le64(const void *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if TW_HOST_BIG_ENDIAN
    v = tw_bswap64(v);
#endif
    return v;
}

TW_INLINE void tw_store_le32(void *p, uint32_t v) {
#if TW_HOST_BIG_ENDIAN
    v = tw_bswap32(v);
#endif
    memcpy(p, &v, sizeof v);
}

TW_INLINE void tw_store_le64(void *p, uint64_t v) {
#if TW_HOST_BIG_ENDIAN
    v = tw_bswap64(v);
#endif
    memcpy(p, &v, sizeof v);
}

#endif /* TOKENWIRE_BYTEORDER_H */
