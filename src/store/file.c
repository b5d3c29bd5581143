/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.c — the file store (scheme "file"): objects in a directory of a
 * local file system, shared by every process of the node that opens it,
 * kept across restarts. This file holds the design, the backend's table,
 * its open, close and stats, exists and remove, and the helpers the other
 * parts share: file_get.c (reads), file_put.c (publishing), file_evict.c
 * (victims: handed down to a tier below, unlinked), file_sweep.c
 * (leftovers of dead writers). file.h shows the directory and the store's
 * struct; file_index.c the shared index (keys, LRU order, capacity);
 * file_io.c the reads and writes.
 *
 * An object file is a header page (magic, version, generation, length,
 * the key and its 128-bit hash, one XXH3-64 sum per block of the payload,
 * the header's own sum), then the payload, padded to a page. Blocks are
 * 4 KiB, or the power of two that keeps the sums within the header page
 * (FILE_MAX_SUMS of them): a range is read as the blocks it touches (plus
 * the header page), each checked against its sum before any byte of the
 * key reaches the caller.
 *
 * Objects are immutable. A put writes the whole file under no name and
 * links it into place as data/XX/G, a name no other object ever had,
 * before entering it in the index, so no reader finds a partial object
 * (file_put.c). A get checks every block it hands out, and the header,
 * before any byte reaches the caller; an object that fails is taken out
 * and reads as absent (file_get.c). Eviction and removal take the entry
 * out of the index first and unlink the file after: a reader that already
 * found it still reads the same immutable bytes from the open file, or
 * misses (the name is gone). Crash leftovers are unnamed files (gone with
 * their writer), tmp/ files and data files no entry names: the first
 * process to open the directory alone sweeps the ones of generations
 * older than its open, in a background thread (file_sweep.c).
 *
 * Counters: objects, bytes and capacity are the directory's (every
 * process); hits, misses, puts, evictions and errors are this handle's.
 *
 * Threads: the index has its own lock (file_index.c), the rings theirs
 * (file_io.c), the bounce buffers `pool.mu`; counters are atomics; the
 * rest is immutable after open. The sweeper thread touches only the
 * directory and the index (under its lock).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "store/backend.h"
#include "store/file.h"

/* ------------------------------------------------------------- helpers */

void kvl__file_key_hash(const char *key, size_t len, uint64_t *h1,
                        uint64_t *h2)
{
	XXH128_hash_t h = XXH3_128bits(key, len);
	*h1 = h.low64;
	*h2 = h.high64;
}

void kvl__file_path(const struct file_store *f, uint64_t gen, char *out,
                    size_t len)
{
	snprintf(out, len, "%s/data/%02x/%016llx", f->dir,
	         (unsigned)(gen & 0xff), (unsigned long long)gen);
}

void kvl__file_unlink_gens(const struct file_store *f, const uint64_t *g,
                           size_t n)
{
	char p[PATH_MAX];
	for (size_t i = 0; i < n; i++) {
		kvl__file_path(f, g[i], p, sizeof p);
		unlink(p);
	}
}

uint64_t kvl__file_hdr_sum(uint8_t *page)
{
	file_hdr *h = (file_hdr *)(void *)page;
	uint64_t saved = h->hdr_sum;
	h->hdr_sum = 0;
	uint64_t s = XXH3_64bits(page, FILE_PAGE);
	h->hdr_sum = saved;
	return s;
}

const char *kvl__file_hdr_check(uint8_t *page, uint64_t gen, uint64_t len,
                                uint64_t h1, uint64_t h2, const char *key,
                                size_t kl)
{
	static const char other[] = "its header names another object";
	const file_hdr *h = (const file_hdr *)(void *)page;
	if (memcmp(h->magic, FILE_MAGIC, 8) || h->version != FILE_VERSION)
		return "not an object file of this version";
	if (kvl__file_hdr_sum(page) != h->hdr_sum)
		return "its header fails its checksum";
	if (h->gen != gen || h->len != len || h->h1 != h1 || h->h2 != h2 ||
	    h->block_shift != kvl__file_block_shift(h->len))
		return other;
	const char *at = (const char *)page + FILE_KEY_AT;
	if (key)
		return h->key_len == kl && !memcmp(at, key, kl) ? NULL : other;
	if (h->key_len == 0 || h->key_len >= KVL_KEY_MAX ||
	    memchr(at, 0, h->key_len))
		return other;
	uint64_t k1, k2;
	kvl__file_key_hash(at, h->key_len, &k1, &k2);
	return k1 == h1 && k2 == h2 ? NULL : other;
}

int kvl__file_blocks_ok(const uint8_t *page, uint64_t len, const uint8_t *p,
                        uint64_t b0, uint64_t end)
{
	const file_hdr *h = (const file_hdr *)(const void *)page;
	const uint64_t *sums =
		(const uint64_t *)(const void *)(page + FILE_SUMS_AT);
	uint64_t bs = 1ull << h->block_shift;
	for (uint64_t b = b0; b < end; b++) {
		uint64_t at = b * bs, n = len - at < bs ? len - at : bs;
		if (XXH3_64bits(p + (b - b0) * bs, (size_t)n) != sums[b])
			return 0;
	}
	return 1;
}

/* An aligned buffer of at least need bytes, from the pool or new. */
void *kvl__file_bounce(struct file_store *f, size_t need, size_t *cap)
{
	pthread_mutex_lock(&f->pool.mu);
	int best = -1;
	for (unsigned i = 0; i < FILE_POOL; i++)
		if (f->pool.p[i] && f->pool.cap[i] >= need &&
		    (best < 0 || f->pool.cap[i] < f->pool.cap[best]))
			best = (int)i;
	if (best >= 0) {
		void *p = f->pool.p[best];
		*cap = f->pool.cap[best];
		f->pool.p[best] = NULL;
		pthread_mutex_unlock(&f->pool.mu);
		return p;
	}
	pthread_mutex_unlock(&f->pool.mu);
	size_t c = FILE_PAGE * 16;
	while (c < need)
		c <<= 1;
	*cap = c;
	return aligned_alloc(FILE_PAGE, c);
}

void kvl__file_bounce_put(struct file_store *f, void *p, size_t cap)
{
	if (!p)
		return;
	pthread_mutex_lock(&f->pool.mu);
	int slot = -1;
	for (unsigned i = 0; i < FILE_POOL && cap <= FILE_POOL_MAX; i++)
		if (!f->pool.p[i] ||
		    (slot >= 0 && f->pool.p[slot] &&
		     f->pool.cap[i] < f->pool.cap[slot]) ||
		    (slot < 0 && f->pool.cap[i] < cap))
			slot = (int)i;
	void *drop = p;
	if (slot >= 0) {
		drop = f->pool.p[slot];
		f->pool.p[slot] = p;
		f->pool.cap[slot] = cap;
	}
	pthread_mutex_unlock(&f->pool.mu);
	free(drop);
}

/* Takes the index; a failure is the whole call's. */
int kvl__file_lock(kvl_store *store, struct file_store *f, const char *fn)
{
	int rc = kvl__fidx_lock(&f->ix);
	if (rc == KVL_EINVAL)
		return kvl__fail(&store->err, rc,
		                 "%s: file: %s: this store was opened by process "
		                 "%d; a forked child must open it itself",
		                 fn, f->dir, (int)f->ix.pid);
	if (rc < 0)
		return kvl__fail(&store->err, rc, "%s: file: %s: cannot lock "
		                 "the index: %s", fn, f->dir, strerror(errno));
	return 0;
}

size_t kvl__file_hash_chunk(const kvl__batch *b, size_t base,
                            file_hashes *hs)
{
	size_t cn = b->n - base < FILE_CHUNK ? b->n - base : FILE_CHUNK;
	for (size_t i = 0; i < cn; i++)
		kvl__file_key_hash(b->keys[base + i], strlen(b->keys[base + i]),
		                   &hs->h1[i], &hs->h2[i]);
	return cn;
}

/* A call that stopped at key `from`: the rest fail with rc; the call
 * fails whole when nothing was done. */
int kvl__file_fail_rest(const kvl__batch *b, size_t from, int rc)
{
	for (size_t i = from; i < b->n; i++)
		b->results[i] = rc;
	return from ? 0 : rc;
}

/* ---------------------------------------------------------------- exists */

static int file_exists(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	file_hashes hs;
	for (size_t base = 0; base < b->n; base += FILE_CHUNK) {
		size_t cn = kvl__file_hash_chunk(b, base, &hs);
		int rc = kvl__file_lock(store, f, b->fn);
		if (rc < 0)
			return kvl__file_fail_rest(b, base, rc);
		unsigned long long hits = 0;
		for (size_t i = 0; i < cn; i++) {
			uint32_t e = kvl__fidx_find(&f->ix, hs.h1[i], hs.h2[i]);
			b->results[base + i] = e != FIDX_NONE;
			if (e != FIDX_NONE) {
				kvl__fidx_touch(&f->ix, e);
				hits++;
			}
		}
		kvl__fidx_unlock(&f->ix);
		f->hits += hits;
		f->misses += cn - hits;
	}
	return 0;
}

/* The length of one object, for a tier: store that promotes it from here
 * (a query, not a use: the LRU order is left alone). */
static int file_size(kvl_store *store, void *impl, const char *key,
                     uint64_t *len)
{
	struct file_store *f = impl;
	uint64_t h1, h2;
	kvl__file_key_hash(key, strlen(key), &h1, &h2);
	int rc = kvl__file_lock(store, f, "kvl_store_get");
	if (rc < 0)
		return rc;
	uint32_t e = kvl__fidx_find(&f->ix, h1, h2);
	if (e != FIDX_NONE)
		*len = f->ix.e[e].len;
	kvl__fidx_unlock(&f->ix);
	return e != FIDX_NONE;
}

/* Victims go to hook from now (a tier: store spills them below). */
static int file_on_evict(kvl_store *store, void *impl,
                         const kvl__evict_hook *hook)
{
	(void)store;
	struct file_store *f = impl;
	f->hook = hook;
	return 0;
}

/* ---------------------------------------------------------------- remove */

static int file_remove(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	uint64_t gens[FILE_CHUNK];
	file_hashes hs;
	for (size_t base = 0; base < b->n; base += FILE_CHUNK) {
		size_t cn = kvl__file_hash_chunk(b, base, &hs), ng = 0;
		int rc = kvl__file_lock(store, f, b->fn);
		if (rc < 0)
			return kvl__file_fail_rest(b, base, rc);
		for (size_t i = 0; i < cn; i++) {
			uint32_t e = kvl__fidx_find(&f->ix, hs.h1[i], hs.h2[i]);
			b->results[base + i] = e != FIDX_NONE;
			if (e != FIDX_NONE)
				gens[ng++] = kvl__fidx_unlink(&f->ix, e);
		}
		kvl__fidx_unlock(&f->ix);
		kvl__file_unlink_gens(f, gens, ng);
	}
	return 0;
}

/* ------------------------------------------------------ open, close, stats */

/* Whether the file system takes O_TMPFILE and O_DIRECT (tmpfs refuses
 * O_DIRECT): a page written through a probe file. */
static void file_probe(struct file_store *f)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/data/00", f->dir);
	void *page = aligned_alloc(FILE_PAGE, FILE_PAGE);
	if (!page) {
		f->direct = 0;
		return;
	}
	memset(page, 0, FILE_PAGE);
	for (int direct = f->direct; direct >= 0; direct--) {
		int fl = O_WRONLY | O_CLOEXEC | (direct ? O_DIRECT : 0);
		int fd = open(p, O_TMPFILE | fl, 0644);
		if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
			atomic_store(&f->tmpfile, 0);
			char t[PATH_MAX];
			snprintf(t, sizeof t, "%s/tmp/probe.%d", f->dir,
			         (int)getpid());
			fd = open(t, O_CREAT | O_TRUNC | fl, 0644);
			unlink(t);
		}
		if (fd < 0)
			continue;
		int rc = kvl__fio_write(fd, page, FILE_PAGE, 0);
		close(fd);
		if (rc == 0) {
			f->direct = direct;
			break;
		}
	}
	free(page);
}

static void file_close(void *impl)
{
	struct file_store *f = impl;
	if (!f)
		return;
	if (f->sweeping) {
		atomic_store(&f->stop, 1);
		pthread_join(f->sweeper, NULL);
	}
	kvl__fio_destroy(&f->io);
	kvl__file_checkers_destroy(&f->checkers);
	kvl__fidx_close(&f->ix);
	for (unsigned i = 0; i < FILE_POOL; i++)
		free(f->pool.p[i]);
	pthread_mutex_destroy(&f->pool.mu);
	kvl__file_hdrs_destroy(&f->hdrs);
	kvl__file_holds_destroy(&f->holds);
	free(f);
}

/* The directory of a file: URI, checked: absolute, an existing directory
 * that this process may write. */
static int file_dir(const kvl__uri *uri, char *out, char *errbuf,
                    size_t errlen)
{
	const char *path = uri->path;
	struct stat st;
	if (uri->authority[0])
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "file: store takes a local directory, not a "
		                     "host (\"%s\"): file:/path/to/dir",
		                     uri->authority);
	if (path[0] != '/')
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "file: store needs an absolute directory "
		                     "(got \"%s\"): file:/path/to/dir?capacity=SIZE",
		                     path);
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		n--;
	if (n >= FILE_DIR_MAX)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "file: directory path of %zu bytes is too "
		                     "long", n);
	memcpy(out, path, n);
	out[n] = '\0';
	if (stat(out, &st))
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "file: %s: %s (the directory must exist)",
		                     out, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "file: %s is not a directory", out);
	if (access(out, W_OK | X_OK))
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "file: %s: %s", out, strerror(errno));
	return 0;
}

static int file_open(kvl_store *store, kvl__uri *uri, void **impl,
                     kvl__store_caps *caps, char *errbuf, size_t errlen)
{
	uint64_t capacity = 0, max_objects = 0;
	int direct = 1, rc;
	const char *io = "uring";
	rc = kvl__uri_size(uri, "capacity", &capacity, errbuf, errlen);
	if (rc < 0)
		return rc;
	if (rc == 1 && capacity < 2 * FILE_PAGE)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "file: store option capacity=%llu: the "
		                     "capacity must be at least %u bytes (an "
		                     "object costs a %u-byte header page and its "
		                     "bytes rounded up to pages)",
		                     (unsigned long long)capacity, 2 * FILE_PAGE,
		                     FILE_PAGE);
	rc = kvl__uri_u64(uri, "max_objects", &max_objects, errbuf, errlen);
	if (rc < 0)
		return rc;
	if (rc == 1 && (max_objects == 0 || max_objects > (1ull << 30)))
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "file: store option max_objects=%llu: 1 to "
		                     "%llu (or leave it out)",
		                     (unsigned long long)max_objects,
		                     1ull << 30);
	rc = kvl__uri_bool(uri, "direct", &direct, errbuf, errlen);
	if (rc < 0)
		return rc;
	if (kvl__uri_str(uri, "io", &io) == 1 && strcmp(io, "uring") &&
	    strcmp(io, "pread"))
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "file: store option io=%s: uring or pread",
		                     io);
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t checkers = cores > 2 ? (uint64_t)cores - 1 : 0;
	checkers = checkers < FILE_CHECKERS ? checkers : FILE_CHECKERS;
	rc = kvl__uri_u64(uri, "check_threads", &checkers, errbuf, errlen);
	if (rc < 0)
		return rc;
	if (checkers > FILE_CHECKERS)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "file: store option check_threads=%llu: 0 "
		                     "(the caller checks what it reads) to %u",
		                     (unsigned long long)checkers, FILE_CHECKERS);
	/* Every option is read (the door's before this): refuse a typo
	 * before the directory is touched. */
	rc = kvl__uri_check_unused(uri, errbuf, errlen);
	if (rc < 0)
		return rc;
	struct file_store *f = calloc(1, sizeof *f);
	if (!f)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "file: store: out of memory");
	rc = file_dir(uri, f->dir, errbuf, errlen);
	if (rc < 0) {
		free(f);
		return rc;
	}
	char ixnote[KVL__ERRMSG_MAX / 2], ionote[128];
	rc = kvl__fidx_open(&f->ix, f->dir, capacity, max_objects, ixnote,
	                    sizeof ixnote, errbuf, errlen);
	if (rc < 0) {
		free(f);
		return rc;
	}
	pthread_mutex_init(&f->pool.mu, NULL);
	kvl__file_hdrs_init(&f->hdrs);
	kvl__file_holds_init(&f->holds);
	kvl__file_checkers_init(&f->checkers, (unsigned)checkers);
	atomic_init(&f->tmpfile, 1);
	f->direct = direct;
	file_probe(f);
	kvl__fio_init(&f->io, strcmp(io, "uring") == 0, ionote, sizeof ionote);
	/* The notes, one after another, cut short where they do not fit. */
	size_t n = 0, room = sizeof store->note;
	n += (size_t)snprintf(store->note, room, "%s", ixnote);
	if (ionote[0] && n < room)
		n += (size_t)snprintf(store->note + n, room - n,
		                      "%sfile: %.200s: %s", n ? "; " : "", f->dir,
		                      ionote);
	if (direct && !f->direct && n < room)
		snprintf(store->note + n, room - n,
		         "%sfile: %.200s does not take O_DIRECT (tmpfs?): buffered "
		         "I/O through the page cache",
		         n ? "; " : "", f->dir);
	if (f->ix.sweep_below > 1 && !f->ix.created &&
	    pthread_create(&f->sweeper, NULL, kvl__file_sweeper, f) == 0)
		f->sweeping = 1;
	caps->trusted = 0; /* the linker checks every layer it reads */
	*impl = f;
	return 0;
}

static void file_stats(void *impl, kvl_store_stats *out)
{
	struct file_store *f = impl;
	if (kvl__fidx_lock(&f->ix) == 0) {
		kvl__fidx_counts(&f->ix, &out->objects, &out->bytes,
		                 &out->capacity);
		kvl__fidx_unlock(&f->ix);
	} else {
		out->objects = out->bytes = UINT64_MAX;
	}
	out->hits = f->hits;
	out->misses = f->misses;
	out->puts = f->puts;
	out->evictions = f->evictions;
	out->errors = f->errors;
}

/* How the store reads, and what its header cache saved. */
static void file_render(void *impl, kvl__cursor *c, kvl_stats_format format)
{
	struct file_store *f = impl;
	unsigned long long hits = atomic_load(&f->hdrs.hits);
	unsigned long long misses = atomic_load(&f->hdrs.misses);
	if (format == KVL_STATS_PROMETHEUS)
		kvl__put(c,
		         "# HELP kvlink_store_file_io_uring 1: reads through "
		         "io_uring, 0: preads on the store's threads\n# TYPE "
		         "kvlink_store_file_io_uring gauge\n"
		         "kvlink_store_file_io_uring %d\n"
		         "# HELP kvlink_store_file_header_pages_total header "
		         "pages that ranges needed apart from their blocks, "
		         "copied from the cache or read from disk\n# TYPE "
		         "kvlink_store_file_header_pages_total counter\n"
		         "kvlink_store_file_header_pages_total{from=\"cache\"} "
		         "%llu\nkvlink_store_file_header_pages_total{from="
		         "\"disk\"} %llu\n",
		         f->io.uring, hits, misses);
	else
		kvl__put(c,
		         ",\"file\":{\"io\":\"%s\",\"header_pages_cached\":"
		         "%llu,\"header_pages_read\":%llu}",
		         f->io.uring ? "uring" : "pread", hits, misses);
}

const kvl__store_ops kvl__store_file_ops = {
	.scheme = "file",
	.open = file_open,
	.close = file_close,
	.exists = file_exists,
	.get = kvl__file_get,
	.put = kvl__file_put,
	.remove = file_remove,
	.stats = file_stats,
	.size = file_size,
	.on_evict = file_on_evict,
	.hold = kvl__file_hold,
	.unhold = kvl__file_unhold,
	.render = file_render,
};
