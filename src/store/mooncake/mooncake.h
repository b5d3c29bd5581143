/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake.h — the Mooncake store's parts (internal to src/store/mooncake/):
 * store.c opens the client and serves exists, remove and the rest; whole.c
 * moves whole objects through Mooncake's C API; ranges.c moves byte ranges
 * through kvlink's shim (shim.h), when the library carries it.
 */
#ifndef KVL_STORE_MOONCAKE_H
#define KVL_STORE_MOONCAKE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "store/backend.h"

/* Mooncake's ErrorCode values that kvlink tells apart (types.h). */
#define MC_BUFFER_OVERFLOW (-10)
#define MC_SEGMENT_NOT_FOUND (-101)
#define MC_NO_AVAILABLE_HANDLE (-200)
#define MC_INVALID_PARAMS (-600)
#define MC_INVALID_REPLICA (-702)
#define MC_REPLICA_IS_NOT_READY (-703)
#define MC_OBJECT_NOT_FOUND (-704)
#define MC_OBJECT_ALREADY_EXISTS (-705)
#define MC_OBJECT_HAS_LEASE (-706)
#define MC_LEASE_EXPIRED (-707)

/* Keys per Mooncake call (stack arrays, no allocation per call). */
#define MC_GROUP 256
/* Registered regions remembered for zero-copy moves; more are registered
 * with Mooncake but moved through staging. */
#define MC_REGIONS 64

typedef struct mc_replicate_config {
	size_t replica_num;
	int with_soft_pin;
	int with_hard_pin;
	const char **preferred_segments;
	size_t preferred_segments_count;
} mc_replicate_config;

/* The functions of store_c.h that kvlink calls. */
struct mc_api {
	void *(*create)(void);
	void (*destroy)(void *);
	int (*setup)(void *, const char *, const char *, uint64_t, uint64_t,
	             const char *, const char *, const char *);
	int (*batch_put_from)(void *, const char **, void **, const size_t *,
	                      size_t, const mc_replicate_config *, int *);
	int (*batch_get_into)(void *, const char **, void **, const size_t *,
	                      size_t, int64_t *);
	int (*batch_is_exist)(void *, const char **, size_t, int *);
	int64_t (*get_size)(void *, const char *);
	int (*remove)(void *, const char *, int);
	int (*register_buffer)(void *, void *, size_t);
	int (*unregister_buffer)(void *, void *);
};

/* The shim's functions (shim.h), all present or none. */
struct mc_shim {
	int (*shim_version)(void);
	int (*hold)(void *, const char *const *, size_t, int *);
	void (*release)(void *, const char *const *, size_t);
	int (*get_ranges)(void *, const char *const *, size_t, const size_t *,
	                  void *const *, const size_t *, const uint64_t *,
	                  int64_t *);
	int (*put_ranges)(void *, const char *const *, size_t,
	                  const uint64_t *, const char *const *, size_t,
	                  const size_t *, void *const *, const size_t *,
	                  const uint64_t *, int *);
	void (*forget)(void *);
};

struct mstore {
	struct mc_api api;
	struct mc_shim shim;
	int ranges; /* moves byte ranges through the shim */
	int groups; /* a page's objects share a Mooncake group (ranges only) */
	void *client;
	mc_replicate_config cfg;
	uint8_t *staging;
	size_t half; /* bytes in each half of staging */
	pthread_mutex_t half_mu[2];
	atomic_uint next_half;
	uint64_t remove_wait_ms;
	pthread_rwlock_t reg_mu;
	struct {
		uintptr_t lo, hi;
	} regions[MC_REGIONS]; /* (reg_mu) */
	size_t n_regions;      /* (reg_mu) */
	atomic_uint_fast64_t hits, misses, puts, errors;
	atomic_uint_fast64_t direct_bytes, staged_bytes; /* ranges moved */
};

/* ------------------------------------------------------------ store.c */

/* Takes a free half of staging (or waits for one); returns its index. */
unsigned kvl__mc_half_take(struct mstore *m);
void kvl__mc_half_give(struct mstore *m, unsigned i);

/* 1 if [p, p + len) lies in memory registered through kvl_store_register. */
int kvl__mc_registered(struct mstore *m, const void *p, size_t len);

/* A set of up to MC_GROUP keys of one Mooncake call, by index into the
 * caller's array. Mooncake's batch calls key their work by name, so a key
 * may appear once per call: a repeat would leave its buffer unwritten yet
 * reported read. */
typedef struct kvl__mc_keyset {
	short slot[2 * MC_GROUP]; /* open addressing, -1: empty */
} kvl__mc_keyset;

void kvl__mc_keyset_clear(kvl__mc_keyset *ks);
/* Adds keys[i]; returns the index of an equal key already there, or -1. */
int kvl__mc_keyset_add(kvl__mc_keyset *ks, const char *const *keys, size_t i);

/* A per-key failure of Mooncake as a kvlink code, with a message. */
int kvl__mc_fail(kvl_store *store, const char *op, const char *key,
                 int64_t code);

/* Codes that mean "not there (yet)": absent, or its replica still being
 * written (a get session finds no complete replica: INVALID_REPLICA). */
static inline int kvl__mc_absent(int64_t code)
{
	return code == MC_OBJECT_NOT_FOUND || code == MC_REPLICA_IS_NOT_READY ||
	       code == MC_INVALID_REPLICA;
}

/* Counts a get call's results as hits, misses and errors. */
void kvl__mc_count_gets(struct mstore *m, const int *results, size_t n);

/* ------------------------------------------------- whole.c, ranges.c */

int kvl__mc_get_whole(kvl_store *store, struct mstore *m,
                      const kvl__batch *b);
int kvl__mc_put_whole(kvl_store *store, struct mstore *m,
                      const kvl__batch *b);
int kvl__mc_get_ranges(kvl_store *store, struct mstore *m,
                       const kvl__batch *b);
int kvl__mc_put_ranges(kvl_store *store, struct mstore *m,
                       const kvl__batch *b);

#endif /* KVL_STORE_MOONCAKE_H */
