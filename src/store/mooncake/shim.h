/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shim.h — the C functions of kvlink's Mooncake shim (shim.cpp): byte
 * ranges, get sessions and put sessions of Mooncake's C++ client, which
 * its C API (store_c.h) does not offer. The shim is built into one library
 * with Mooncake's client archives (docs/mooncake.md), beside the C API;
 * store.c finds these functions there at open and falls back to whole
 * objects through the C API when they are absent.
 *
 * `client` is the handle mooncake_store_create gave. Codes in results are
 * Mooncake's ErrorCode values (negative); a call returns 0 when it was
 * carried out, -1 when it failed whole (the shim caught an exception).
 * Every function is thread-safe.
 */
#ifndef KVL_MOONCAKE_SHIM_H
#define KVL_MOONCAKE_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a signature below changes; store.c uses a shim of its own
 * version only. */
#define KVL_MC_SHIM_VERSION 1

int kvl_mc_shim_version(void);

/* Holds n keys for a batch: a get session each, which takes the master's
 * lease on the object (and on its group's objects) so that it is not
 * evicted or removed while the batch reads it. Holds are counted per key
 * and client: a key held twice stays held until released twice. A hold
 * of a key already held renews its lease. [out] results[i]: 0, or a
 * Mooncake error (OBJECT_NOT_FOUND: absent; the key is not held). */
int kvl_mc_hold(void *client, const char *const *keys, size_t n,
                int *results);

/* Releases keys that kvl_mc_hold held (results[i] == 0 there). */
void kvl_mc_release(void *client, const char *const *keys, size_t n);

/* Reads counts[i] ranges of key i: range j of all, in order, moves lens[j]
 * bytes from offset offs[j] of the object into bufs[j], which must lie in
 * memory registered with the client. Keys not held are held for the
 * call; a read whose lease ran out is renewed and read once more. Keys
 * must be distinct. [out] results[i]: bytes read, or a Mooncake error
 * (INVALID_PARAMS: a range beyond the object). */
int kvl_mc_get_ranges(void *client, const char *const *keys, size_t n,
                      const size_t *counts, void *const *bufs,
                      const size_t *lens, const uint64_t *offs,
                      int64_t *results);

/* Puts n objects of sizes[i] bytes, each from counts[i] pieces: piece j of
 * all moves lens[j] bytes from bufs[j] (registered memory) to offset
 * offs[j] of its object. groups: NULL, or each key's Mooncake group ("":
 * none). An object is visible once all its pieces are written; one whose
 * write failed is revoked. Keys must be distinct. [out] results[i]: 0, or
 * a Mooncake error (OBJECT_ALREADY_EXISTS: kept as it was). */
int kvl_mc_put_ranges(void *client, const char *const *keys, size_t n,
                      const uint64_t *sizes, const char *const *groups,
                      size_t replicas, const size_t *counts,
                      void *const *bufs, const size_t *lens,
                      const uint64_t *offs, int *results);

/* Forgets the holds of a client about to be destroyed. */
void kvl_mc_forget(void *client);

#ifdef __cplusplus
}
#endif

#endif /* KVL_MOONCAKE_SHIM_H */
