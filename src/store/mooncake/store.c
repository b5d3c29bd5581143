/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c — the Mooncake Store (scheme "mooncake"), through its client
 * library, loaded at open with dlopen: kvlink builds and runs without
 * Mooncake, and only opening a mooncake:// store needs the library.
 *
 * URI: mooncake://MASTER_HOST[:PORT][?options] (see docs/mooncake.md).
 *
 * One kvlink object is one Mooncake object under the same key. Gets and
 * puts take one of two ways (mooncake.h):
 *  - byte ranges (ranges.c), when the library carries kvlink's shim
 *    (shim.h, built with the library: docs/mooncake.md): each layer's
 *    bytes move alone, straight between registered memory and the pool,
 *    inside get sessions that the linker holds for a batch
 *    (kvl__store_hold); the store then reads layer by layer;
 *  - whole objects (whole.c), through Mooncake's C API (store_c.h) alone:
 *    the store sets caps.whole_reads, and the linker then reads every
 *    layer of a page with its first layer, so that each object crosses
 *    the network once per load instead of once per layer.
 * The store is never trusted: kvlink verifies payload checksums on reads.
 *
 * Staging: `staging` bytes in two halves, each used by one call at a time,
 * so the loader and the offloader (and engine threads) run concurrently.
 * Mooncake's client is thread-safe; counters are atomics.
 */
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "store/mooncake/mooncake.h"
#include "store/mooncake/shim.h"

/* ------------------------------------------------------------ staging */

unsigned kvl__mc_half_take(struct mstore *m)
{
	for (unsigned i = 0; i < 2; i++)
		if (pthread_mutex_trylock(&m->half_mu[i]) == 0)
			return i;
	unsigned i = atomic_fetch_add(&m->next_half, 1) & 1;
	pthread_mutex_lock(&m->half_mu[i]);
	return i;
}

void kvl__mc_half_give(struct mstore *m, unsigned i)
{
	pthread_mutex_unlock(&m->half_mu[i]);
}

int kvl__mc_registered(struct mstore *m, const void *p, size_t len)
{
	uintptr_t lo = (uintptr_t)p, hi = lo + len;
	int found = 0;
	pthread_rwlock_rdlock(&m->reg_mu);
	for (size_t i = 0; i < m->n_regions && !found; i++)
		found = lo >= m->regions[i].lo && hi <= m->regions[i].hi;
	pthread_rwlock_unlock(&m->reg_mu);
	return found;
}

void kvl__mc_keyset_clear(kvl__mc_keyset *ks)
{
	memset(ks->slot, 0xff, sizeof ks->slot);
}

int kvl__mc_keyset_add(kvl__mc_keyset *ks, const char *const *keys, size_t i)
{
	uint32_t h = 2166136261u;
	for (const char *c = keys[i]; *c; c++)
		h = (h ^ (uint8_t)*c) * 16777619u;
	size_t at = h % (2 * MC_GROUP);
	while (ks->slot[at] >= 0 && strcmp(keys[ks->slot[at]], keys[i]) != 0)
		at = (at + 1) % (2 * MC_GROUP);
	if (ks->slot[at] >= 0)
		return ks->slot[at];
	ks->slot[at] = (short)i;
	return -1;
}

/* ------------------------------------------------------------- results */

/* Each operation counts its failed keys from its results at the end. */
int kvl__mc_fail(kvl_store *store, const char *op, const char *key,
                 int64_t code)
{
	if (code == MC_NO_AVAILABLE_HANDLE || code == MC_SEGMENT_NOT_FOUND)
		return kvl__fail(&store->err, KVL_EFULL,
		                 "mooncake: %s %s: no segment has room (Mooncake "
		                 "error %lld); add memory with segment= here or "
		                 "in another client",
		                 op, key, (long long)code);
	if (code == MC_LEASE_EXPIRED)
		return kvl__fail(&store->err, KVL_EIO,
		                 "mooncake: %s %s: the read lease expired before "
		                 "the transfer finished, read alone too (raise "
		                 "the master's default_kv_lease_ttl)",
		                 op, key);
	return kvl__fail(&store->err, KVL_EIO,
	                 "mooncake: %s %s: Mooncake error %lld", op, key,
	                 (long long)code);
}

void kvl__mc_count_gets(struct mstore *m, const int *results, size_t n)
{
	for (size_t j = 0; j < n; j++) {
		if (results[j] == KVL_ENOTFOUND)
			atomic_fetch_add(&m->misses, 1);
		else if (results[j] >= 0)
			atomic_fetch_add(&m->hits, 1);
		else
			atomic_fetch_add(&m->errors, 1);
	}
}

/* ---------------------------------------------------------------- exists */

static int mc_exists(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	const char *const *keys = b->keys;
	size_t n = b->n;
	int *results = b->results;
	for (size_t i = 0; i < n; i += MC_GROUP) {
		size_t g = n - i < MC_GROUP ? n - i : MC_GROUP;
		if (m->api.batch_is_exist(m->client, (const char **)keys + i, g,
		                          results + i) != 0)
			return kvl__fail(&store->err, KVL_EIO,
			                 "mooncake: exists: the call failed");
		size_t failed = 0;
		for (size_t k = i; k < i + g; k++) {
			if (results[k] == 1) {
				atomic_fetch_add(&m->hits, 1);
			} else if (results[k] == 0 || kvl__mc_absent(results[k])) {
				results[k] = 0;
				atomic_fetch_add(&m->misses, 1);
			} else {
				results[k] = kvl__mc_fail(store, "exists",
				                     keys[k], results[k]);
				failed++;
			}
		}
		atomic_fetch_add(&m->errors, failed);
		/* Every key failed: the master is unreachable, and the call
		 * says so rather than each key. */
		if (failed == g) {
			char last[KVL__ERRMSG_MAX];
			snprintf(last, sizeof last, "%s",
			         kvl_store_errmsg(store));
			return kvl__fail(&store->err, KVL_EIO,
			                 "mooncake: exists: no key answered; "
			                 "last: %s",
			                 last);
		}
	}
	return 0;
}
/* ---------------------------------------------------------------- remove */

static int mc_remove(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	const char *const *keys = b->keys;
	size_t n = b->n;
	int *results = b->results;
	for (size_t i = 0; i < n; i++) {
		/* Not forced: a reader's lease keeps the object's memory from
		 * reuse under its transfer, so wait for the lease to end
		 * (the master's default_kv_lease_ttl) up to remove_wait_ms. */
		int r;
		uint64_t waited = 0;
		while ((r = m->api.remove(m->client, keys[i], 0)) ==
		               MC_OBJECT_HAS_LEASE &&
		       waited < m->remove_wait_ms) {
			struct timespec ts = {0, 20 * 1000000};
			nanosleep(&ts, NULL);
			waited += 20;
		}
		if (r == MC_OBJECT_HAS_LEASE)
			results[i] = kvl__fail(&store->err, KVL_EIO,
			                       "mooncake: remove %s: still read "
			                       "under a lease after %llu ms",
			                       keys[i],
			                       (unsigned long long)waited);
		else
			results[i] = r == 0       ? 1
			             : kvl__mc_absent(r) ? 0
			                         : kvl__mc_fail(store, "remove",
			                                   keys[i], r);
		if (results[i] < 0)
			atomic_fetch_add(&m->errors, 1);
	}
	return 0;
}

/* ------------------------------------------------- get, put, holds */

static int mc_get(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	return m->ranges ? kvl__mc_get_ranges(store, m, b)
	                 : kvl__mc_get_whole(store, m, b);
}

static int mc_put(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	return m->ranges ? kvl__mc_put_ranges(store, m, b)
	                 : kvl__mc_put_whole(store, m, b);
}

/* Holds are get sessions of the shim (its master's leases); without the
 * shim each whole read takes its own lease and nothing is held. */
static int mc_hold(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	int res[MC_GROUP];
	for (size_t i = 0; i < b->n; i++)
		b->results[i] = 0;
	for (size_t i = 0; m->ranges && i < b->n; i += MC_GROUP) {
		size_t g = b->n - i < MC_GROUP ? b->n - i : MC_GROUP;
		int call = m->shim.hold(m->client, b->keys + i, g, res);
		for (size_t k = 0; k < g; k++) {
			int *out = &b->results[i + k];
			if (call != 0)
				*out = kvl__fail(&store->err, KVL_EIO,
				                 "mooncake: hold: the shim's call "
				                 "failed");
			else if (res[k] == 0)
				*out = 1;
			else if (!kvl__mc_absent(res[k]))
				*out = kvl__mc_fail(store, "hold",
				                    b->keys[i + k], res[k]);
		}
	}
	return 0;
}

static int mc_unhold(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	(void)store;
	for (size_t i = 0; i < b->n; i++)
		b->results[i] = 0;
	if (m->ranges)
		m->shim.release(m->client, b->keys, b->n);
	return 0;
}

/* --------------------------------------------------------- the rest */

static int mc_reg(kvl_store *store, void *impl, void *addr, size_t len,
                  kvl_mem_kind mem)
{
	struct mstore *m = impl;
	if (mem != KVL_MEM_HOST)
		return 0; /* moved through host staging: nothing to do */
	int r = m->api.register_buffer(m->client, addr, len);
	if (r != 0)
		return kvl__fail(&store->err, KVL_EIO,
		                 "mooncake: register %zu bytes at %p: Mooncake "
		                 "error %d",
		                 len, addr, r);
	pthread_rwlock_wrlock(&m->reg_mu);
	if (m->n_regions < MC_REGIONS) {
		m->regions[m->n_regions].lo = (uintptr_t)addr;
		m->regions[m->n_regions++].hi = (uintptr_t)addr + len;
	}
	pthread_rwlock_unlock(&m->reg_mu);
	return 0;
}

static void mc_unreg(kvl_store *store, void *impl, void *addr)
{
	struct mstore *m = impl;
	(void)store;
	pthread_rwlock_wrlock(&m->reg_mu);
	for (size_t i = 0; i < m->n_regions; i++)
		if (m->regions[i].lo == (uintptr_t)addr) {
			m->regions[i] = m->regions[--m->n_regions];
			break;
		}
	pthread_rwlock_unlock(&m->reg_mu);
	m->api.unregister_buffer(m->client, addr);
}

static void mc_stats(void *impl, kvl_store_stats *out)
{
	struct mstore *m = impl;
	/* Objects, bytes and capacity live in the master: not reported. */
	out->hits = atomic_load(&m->hits);
	out->misses = atomic_load(&m->misses);
	out->puts = atomic_load(&m->puts);
	out->errors = atomic_load(&m->errors);
}

/* Which way the store moves bytes, and how much went each way. */
static void mc_render(void *impl, kvl__cursor *c, kvl_stats_format format)
{
	struct mstore *m = impl;
	unsigned long long direct = atomic_load(&m->direct_bytes);
	unsigned long long staged = atomic_load(&m->staged_bytes);
	if (format == KVL_STATS_PROMETHEUS)
		kvl__put(c,
		         "# HELP kvlink_store_mooncake_ranges 1: byte ranges "
		         "through kvlink's shim, 0: whole objects through "
		         "Mooncake's C API\n# TYPE kvlink_store_mooncake_ranges "
		         "gauge\nkvlink_store_mooncake_ranges %d\n"
		         "# HELP kvlink_store_mooncake_read_bytes_total bytes "
		         "of ranges read, straight into registered memory "
		         "(direct) or through staging\n# TYPE "
		         "kvlink_store_mooncake_read_bytes_total counter\n"
		         "kvlink_store_mooncake_read_bytes_total{way=\"direct\"} "
		         "%llu\nkvlink_store_mooncake_read_bytes_total{way="
		         "\"staged\"} %llu\n",
		         m->ranges, direct, staged);
	else
		kvl__put(c,
		         ",\"mooncake\":{\"api\":\"%s\",\"groups\":%s,"
		         "\"read_bytes_direct\":%llu,\"read_bytes_staged\":%llu}",
		         m->ranges ? "ranges" : "whole",
		         m->ranges && m->groups ? "true" : "false", direct, staged);
}

static void mc_close(void *impl)
{
	struct mstore *m = impl;
	if (!m)
		return;
	if (m->client && m->shim.forget)
		m->shim.forget(m->client);
	if (m->client)
		m->api.destroy(m->client);
	free(m->staging);
	pthread_mutex_destroy(&m->half_mu[0]);
	pthread_mutex_destroy(&m->half_mu[1]);
	pthread_rwlock_destroy(&m->reg_mu);
	/* The library stays loaded: its threads and static destructors may
	 * outlive the client, and dlclose under them is not safe. */
	free(m);
}

/* ------------------------------------------------------------------ open */

/* The library a store opens without lib=. */
static const char *default_lib(void)
{
	const char *lib = getenv("KVL_MOONCAKE_LIB");
	return lib && *lib ? lib : "libmooncake_store.so";
}

int kvl__mc_shim_available(void)
{
	void *h = dlopen(default_lib(), RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return 0;
	int (*version)(void) = NULL;
	void *f = dlsym(h, "kvl_mc_shim_version");
	memcpy(&version, &f, sizeof f);
	/* The library stays loaded, as for a store (mc_close says why). */
	return version && version() == KVL_MC_SHIM_VERSION;
}

/* Loads the library and its functions; 0 or KVL_ENOTSUP naming what is
 * missing. */
static int mc_load(struct mstore *m, const char *lib, char *errbuf,
                   size_t errlen)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return kvl__fail_buf(
			errbuf, errlen, KVL_ENOTSUP,
			"mooncake: cannot load Mooncake Store's C library "
			"(libmooncake_store.so, built with "
			"WITH_STORE_C_SHARED=ON): %s; give its path with "
			"?lib= or KVL_MOONCAKE_LIB",
			dlerror());
	static const struct {
		const char *name;
		size_t at;
	} fns[] = {
#define MC_FN(f) {"mooncake_store_" #f, offsetof(struct mc_api, f)}
		MC_FN(create),         MC_FN(destroy),
		MC_FN(setup),          MC_FN(batch_put_from),
		MC_FN(batch_get_into), MC_FN(batch_is_exist),
		MC_FN(get_size),       MC_FN(remove),
		MC_FN(register_buffer), MC_FN(unregister_buffer),
#undef MC_FN
	};
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
		void *f = dlsym(h, fns[i].name);
		if (!f)
			return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
			                     "mooncake: %s has no %s: not a "
			                     "Mooncake Store C library kvlink "
			                     "can use",
			                     lib, fns[i].name);
		memcpy((char *)&m->api + fns[i].at, &f, sizeof f);
	}
	/* The shim: all of its functions, of this version, or none. */
	static const struct {
		const char *name;
		size_t at;
	} shim[] = {
#define MC_FN(f) {"kvl_mc_" #f, offsetof(struct mc_shim, f)}
		MC_FN(shim_version), MC_FN(hold),       MC_FN(release),
		MC_FN(get_ranges),   MC_FN(put_ranges), MC_FN(forget),
#undef MC_FN
	};
	struct mc_shim found = {0};
	size_t n_found = 0;
	for (size_t i = 0; i < sizeof shim / sizeof shim[0]; i++) {
		void *f = dlsym(h, shim[i].name);
		n_found += f != NULL;
		memcpy((char *)&found + shim[i].at, &f, sizeof f);
	}
	if (n_found == sizeof shim / sizeof shim[0] &&
	    found.shim_version() == KVL_MC_SHIM_VERSION)
		m->shim = found;
	return 0;
}

/* Connects to the master's address ("host:port") within `ms`: Mooncake's
 * setup keeps retrying an absent master for about 90 s, so kvlink asks
 * first. 0, or -1 with the reason in why. */
static int probe_master(const char *master, uint64_t ms, char *why,
                        size_t why_len)
{
	char host[256];
	const char *colon = strrchr(master, ':');
	size_t hl = (size_t)(colon - master);
	if (hl >= sizeof host)
		hl = sizeof host - 1;
	memcpy(host, master, hl);
	host[hl] = '\0';
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	int e = getaddrinfo(host, colon + 1, &hints, &ai);
	if (e) {
		snprintf(why, why_len, "%s", gai_strerror(e));
		return -1;
	}
	snprintf(why, why_len, "no address");
	int ok = 0;
	for (struct addrinfo *a = ai; a && !ok; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK,
		                a->ai_protocol);
		if (fd < 0)
			continue;
		int rc = connect(fd, a->ai_addr, a->ai_addrlen);
		if (rc < 0 && errno == EINPROGRESS) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int err = ETIMEDOUT;
			socklen_t el = sizeof err;
			if (poll(&p, 1, (int)ms) == 1)
				getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
			rc = err ? -1 : 0;
			errno = err;
		}
		if (rc == 0)
			ok = 1;
		else
			snprintf(why, why_len, "%s", strerror(errno));
		close(fd);
	}
	freeaddrinfo(ai);
	return ok ? 0 : -1;
}

static int mc_open(kvl_store *store, kvl__uri *uri, void **impl,
                   kvl__store_caps *caps, char *errbuf, size_t errlen)
{
	const char *local = "127.0.0.1", *metadata = "P2PHANDSHAKE";
	const char *protocol = "tcp", *device = "", *api = "auto";
	const char *lib = default_lib();
	int groups = 1;
	uint64_t segment = 0, buffer = 64ull << 20, staging = 256ull << 20;
	uint64_t replicas = 1, connect_ms = 3000, remove_wait_ms = 15000;
	uint64_t layer_read_min = 64u << 10;
	int rc;
	kvl__uri_str(uri, "local", &local);
	kvl__uri_str(uri, "metadata", &metadata);
	kvl__uri_str(uri, "protocol", &protocol);
	kvl__uri_str(uri, "device", &device);
	kvl__uri_str(uri, "lib", &lib);
	kvl__uri_str(uri, "api", &api);
	if ((rc = kvl__uri_size(uri, "segment", &segment, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_bool(uri, "groups", &groups, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "layer_read_min", &layer_read_min, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "buffer", &buffer, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "staging", &staging, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "replicas", &replicas, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "connect_timeout_ms", &connect_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "remove_wait_ms", &remove_wait_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_check_unused(uri, errbuf, errlen)) < 0)
		return rc;
	if (strcmp(api, "auto") && strcmp(api, "ranges") && strcmp(api, "whole"))
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: api=%s: auto, ranges or whole",
		                     api);
	if (connect_ms < 1 || connect_ms > 600000)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: connect_timeout_ms=%llu: "
		                     "1..600000",
		                     (unsigned long long)connect_ms);
	if (replicas < 1 || replicas > 16)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: replicas=%llu: 1..16",
		                     (unsigned long long)replicas);
	if (staging < (2u << 20) || staging > (1ull << 40))
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: staging=%llu: 2 MiB..1 TiB",
		                     (unsigned long long)staging);
	const char *auth = uri->authority;
	if (!*auth || uri->path[0])
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: expected mooncake://MASTER_HOST"
		                     "[:PORT][?options], got host \"%s\" and "
		                     "path \"%s\"",
		                     auth, uri->path);
	char master[256];
	int len = snprintf(master, sizeof master,
	                   strchr(auth, ':') ? "%s" : "%s:50051", auth);
	if (len < 0 || (size_t)len >= sizeof master)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: master address too long");

	struct mstore *m = calloc(1, sizeof *m);
	if (!m)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "mooncake: out of memory");
	pthread_mutex_init(&m->half_mu[0], NULL);
	pthread_mutex_init(&m->half_mu[1], NULL);
	pthread_rwlock_init(&m->reg_mu, NULL);
	m->cfg.replica_num = (size_t)replicas;
	m->remove_wait_ms = remove_wait_ms;
	m->half = (size_t)(staging / 2) & ~(size_t)4095;
	if ((rc = mc_load(m, lib, errbuf, errlen)) < 0)
		goto fail;
	m->ranges = m->shim.shim_version && strcmp(api, "whole") != 0;
	m->groups = groups;
	if (!m->ranges && strcmp(api, "ranges") == 0) {
		rc = kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
		                   "mooncake: api=ranges: %s has no kvlink shim "
		                   "(of version %d); build the library with it "
		                   "(docs/mooncake.md) or use api=auto",
		                   lib, KVL_MC_SHIM_VERSION);
		goto fail;
	}
	rc = KVL_ENOMEM;
	if (posix_memalign((void **)&m->staging, 4096, 2 * m->half) ||
	    !(m->client = m->api.create())) {
		kvl__fail_buf(errbuf, errlen, rc, "mooncake: out of memory");
		goto fail;
	}
	rc = KVL_EIO;
	char why[128];
	if (probe_master(master, connect_ms, why, sizeof why)) {
		kvl__fail_buf(errbuf, errlen, rc,
		              "mooncake: no master answers at %s: %s; is "
		              "mooncake_master running there?",
		              master, why);
		goto fail;
	}
	int r = m->api.setup(m->client, local, metadata, segment, buffer,
	                     protocol, device, master);
	if (r != 0) {
		kvl__fail_buf(errbuf, errlen, rc,
		              "mooncake: setup with master %s (local %s, "
		              "metadata %s, protocol %s) failed: Mooncake error "
		              "%d; is mooncake_master running there?",
		              master, local, metadata, protocol, r);
		goto fail;
	}
	r = m->api.register_buffer(m->client, m->staging, 2 * m->half);
	if (r != 0) {
		kvl__fail_buf(errbuf, errlen, rc,
		              "mooncake: registering %zu bytes of staging "
		              "failed: Mooncake error %d",
		              2 * m->half, r);
		goto fail;
	}
	(void)store;
	/* Without ranges each read moves the whole object: the linker then
	 * reads every layer of a page with its first. */
	caps->whole_reads = !m->ranges;
	/* A range costs Mooncake's transfer a fixed cost, which over TCP is
	 * worth ~64 KiB (docs/benchmarks.md): smaller layers are read with
	 * the first. */
	caps->layer_read_min = m->ranges ? layer_read_min : 0;
	caps->remote = 1;
	*impl = m;
	return 0;
fail:
	mc_close(m);
	return rc;
}

const kvl__store_ops kvl__store_mooncake_ops = {
	.scheme = "mooncake",
	.open = mc_open,
	.close = mc_close,
	.exists = mc_exists,
	.get = mc_get,
	.put = mc_put,
	.remove = mc_remove,
	.reg = mc_reg,
	.unreg = mc_unreg,
	.hold = mc_hold,
	.unhold = mc_unhold,
	.stats = mc_stats,
	.render = mc_render,
};
