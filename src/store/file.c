/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.c — the file store (scheme "file"): objects in a directory of a
 * local file system, shared by every process of the node that opens it,
 * kept across restarts. file.h shows the directory; file_index.c the
 * shared index (keys, LRU order, capacity); file_io.c the reads.
 *
 * An object file is a header page (magic, version, generation, length,
 * the key and its 128-bit hash, one XXH3-64 sum per block of the payload,
 * the header's own sum), then the payload, padded to a page. Blocks are
 * 4 KiB, or the power of two that keeps the sums within the header page
 * (FILE_MAX_SUMS of them): a range is read as the blocks it touches (plus
 * the header page), each checked against its sum before any byte of the
 * key reaches the caller.
 *
 * Publishing (put): the file is written whole under no name (O_TMPFILE;
 * elsewhere under tmp/G) and linked into place as data/XX/G, a name no
 * other object ever had; only then is it entered in the index, so no
 * reader can find a partial object. A put that finds its key entered
 * meanwhile unlinks its own file (KVL_PUT_PRESENT). Eviction and removal
 * take the entry out of the index first and unlink the file after: a
 * reader that already found it still reads the same immutable bytes from
 * the open file, or misses (the name is gone). Crash leftovers are
 * unnamed files (gone with their writer), tmp/ files and data files no
 * entry names: the first process to open the directory alone sweeps the
 * ones of generations older than its open, in a background thread.
 *
 * A get checks what it reads: the header (its sum, the key, the
 * generation and length the index gave) and every block's sum. An object
 * that fails is taken out of the index and its file unlinked; the key
 * reads as absent (KVL_ENOTFOUND), counted as an error, and the message
 * says why. Damage never reads as data.
 *
 * Counters: objects, bytes and capacity are the directory's (every
 * process); hits, misses, puts, evictions and errors are this handle's.
 *
 * Threads: the index has its own lock (file_index.c), the rings theirs
 * (file_io.c), the bounce buffers `pool.mu`; counters are atomics; the
 * rest is immutable after open. The sweeper thread touches only the
 * directory and the index (under its lock).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "store/backend.h"
#include "store/file.h"

#define FILE_MAGIC "KVLFOBJ1"
#define FILE_VERSION 1u
#define FILE_CHUNK 32u        /* keys per read batch */
#define FILE_VICTIMS 64u      /* evicted files unlinked after the lock */
#define FILE_POOL 4u          /* bounce buffers kept for reuse */
#define FILE_POOL_MAX (64u << 20) /* larger ones are not kept */
#define FILE_DIR_MAX (PATH_MAX - 64) /* room for data/XX/G after it */

/* The header page's fixed part; the key follows at FILE_KEY_AT, the block
 * sums at FILE_SUMS_AT. Integers in the host's order: the directory is
 * node-local. */
typedef struct file_hdr {
	char magic[8];
	uint32_t version;
	uint32_t block_shift;
	uint64_t gen;
	uint64_t len;
	uint64_t h1, h2;
	uint32_t key_len;
	uint32_t n_blocks;
	uint64_t hdr_sum; /* XXH3-64 of the page with this field zero */
} file_hdr;

_Static_assert(sizeof(file_hdr) <= FILE_KEY_AT, "header overlaps the key");
_Static_assert(FILE_KEY_AT + KVL_KEY_MAX <= FILE_SUMS_AT,
               "key overlaps the sums");

struct file_store {
	char dir[FILE_DIR_MAX];
	kvl__fidx ix;
	kvl__fio io;
	int direct;          /* O_DIRECT (the file system takes it) */
	atomic_int tmpfile;  /* O_TMPFILE works here (cleared on refusal) */
	struct {
		pthread_mutex_t mu;
		void *p[FILE_POOL];
		size_t cap[FILE_POOL];
	} pool;
	atomic_ullong hits, misses, puts, evictions, errors;
	pthread_t sweeper;
	int sweeping;        /* the sweeper runs (join at close) */
	atomic_int stop;
	atomic_ullong swept; /* leftover files the sweeper removed */
};

/* ------------------------------------------------------------- helpers */

static void file_key_hash(const char *key, size_t len, uint64_t *h1,
                          uint64_t *h2)
{
	XXH128_hash_t h = XXH3_128bits(key, len);
	*h1 = h.low64;
	*h2 = h.high64;
}

static void file_path(const struct file_store *f, uint64_t gen, char *out,
                      size_t len)
{
	snprintf(out, len, "%s/data/%02x/%016llx", f->dir,
	         (unsigned)(gen & 0xff), (unsigned long long)gen);
}

static void file_unlink_gens(const struct file_store *f, const uint64_t *g,
                             size_t n)
{
	char p[PATH_MAX];
	for (size_t i = 0; i < n; i++) {
		file_path(f, g[i], p, sizeof p);
		unlink(p);
	}
}

/* The smallest block shift that keeps an object's sums in the header. */
static uint32_t file_block_shift(uint64_t len)
{
	uint32_t s = 12;
	while (s < 40 && ((len + (1ull << s) - 1) >> s) > FILE_MAX_SUMS)
		s++;
	return s;
}

static uint64_t file_hdr_sum(uint8_t *page)
{
	file_hdr *h = (file_hdr *)(void *)page;
	uint64_t saved = h->hdr_sum;
	h->hdr_sum = 0;
	uint64_t s = XXH3_64bits(page, FILE_PAGE);
	h->hdr_sum = saved;
	return s;
}

/* An aligned buffer of at least need bytes, from the pool or new. */
static void *file_bounce(struct file_store *f, size_t need, size_t *cap)
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

static void file_bounce_put(struct file_store *f, void *p, size_t cap)
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
static int file_lock(kvl_store *store, struct file_store *f, const char *fn)
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

/* The hashes of keys [base, base + cn) of b (cn <= FILE_CHUNK), taken
 * before the index lock so that it is held for lookups only. */
typedef struct file_hashes {
	uint64_t h1[FILE_CHUNK], h2[FILE_CHUNK];
} file_hashes;

static size_t file_hash_chunk(const kvl__batch *b, size_t base,
                              file_hashes *hs)
{
	size_t cn = b->n - base < FILE_CHUNK ? b->n - base : FILE_CHUNK;
	for (size_t i = 0; i < cn; i++)
		file_key_hash(b->keys[base + i], strlen(b->keys[base + i]),
		              &hs->h1[i], &hs->h2[i]);
	return cn;
}

/* A call that stopped at key `from`: the rest fail with rc; the call
 * fails whole when nothing was done. */
static int file_fail_rest(const kvl__batch *b, size_t from, int rc)
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
		size_t cn = file_hash_chunk(b, base, &hs);
		int rc = file_lock(store, f, b->fn);
		if (rc < 0)
			return file_fail_rest(b, base, rc);
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

/* ---------------------------------------------------------------- remove */

/* Takes key (h1, h2) of generation gen out of the index, if it is still
 * that object, and unlinks its file. */
static void file_drop(kvl_store *store, struct file_store *f, uint64_t h1,
                      uint64_t h2, uint64_t gen)
{
	if (file_lock(store, f, "drop") == 0) {
		uint32_t e = kvl__fidx_find(&f->ix, h1, h2);
		if (e != FIDX_NONE && f->ix.e[e].gen == gen)
			kvl__fidx_unlink(&f->ix, e);
		kvl__fidx_unlock(&f->ix);
	}
	file_unlink_gens(f, &gen, 1);
}

static int file_remove(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	uint64_t gens[FILE_CHUNK];
	file_hashes hs;
	for (size_t base = 0; base < b->n; base += FILE_CHUNK) {
		size_t cn = file_hash_chunk(b, base, &hs), ng = 0;
		int rc = file_lock(store, f, b->fn);
		if (rc < 0)
			return file_fail_rest(b, base, rc);
		for (size_t i = 0; i < cn; i++) {
			uint32_t e = kvl__fidx_find(&f->ix, hs.h1[i], hs.h2[i]);
			b->results[base + i] = e != FIDX_NONE;
			if (e != FIDX_NONE)
				gens[ng++] = kvl__fidx_unlink(&f->ix, e);
		}
		kvl__fidx_unlock(&f->ix);
		file_unlink_gens(f, gens, ng);
	}
	return 0;
}

/* ------------------------------------------------------------------- get */

/* One read of a get: a range's blocks (range SIZE_MAX: the header page
 * alone). `data_at`: where block b0 starts in the buffer (FILE_PAGE when
 * the read starts with the header page). */
typedef struct file_span {
	size_t key, range;
	uint64_t b0, b1;
	size_t data_at;
} file_span;

/* A found key of a get chunk. */
typedef struct file_key {
	uint64_t h1, h2, gen, len;
	int fd;
	const kvl_range *rg;
	size_t nr;
	size_t hdr_req; /* the read whose buffer starts with the header */
	size_t first, n; /* its reads */
	size_t left;     /* of them not yet completed */
} file_key;

/* Why key k's reads do not hold its object, or NULL when they do. */
static const char *file_check(const file_key *k, const kvl__fio_req *rq,
                              const file_span *sp, const char *key)
{
	for (size_t r = k->first; r < k->first + k->n; r++)
		if (rq[r].res != (ssize_t)rq[r].len)
			return rq[r].res < 0 ? "a read failed"
			                     : "the file is shorter than its "
			                       "object";
	uint8_t *page = rq[k->hdr_req].buf;
	const file_hdr *h = (const file_hdr *)(void *)page;
	size_t kl = strlen(key);
	if (memcmp(h->magic, FILE_MAGIC, 8) || h->version != FILE_VERSION)
		return "not an object file of this version";
	if (file_hdr_sum(page) != h->hdr_sum)
		return "its header fails its checksum";
	if (h->gen != k->gen || h->len != k->len || h->h1 != k->h1 ||
	    h->h2 != k->h2 || h->key_len != kl ||
	    memcmp(page + FILE_KEY_AT, key, kl) ||
	    h->block_shift != file_block_shift(h->len))
		return "its header names another object";
	const uint64_t *sums = (const uint64_t *)(void *)(page + FILE_SUMS_AT);
	uint64_t bs = 1ull << h->block_shift;
	for (size_t r = k->first; r < k->first + k->n; r++) {
		if (sp[r].range == SIZE_MAX)
			continue;
		const uint8_t *p = (const uint8_t *)rq[r].buf + sp[r].data_at;
		for (uint64_t bl = sp[r].b0; bl <= sp[r].b1; bl++) {
			uint64_t at = bl * bs;
			uint64_t n = k->len - at < bs ? k->len - at : bs;
			if (XXH3_64bits(p + (at - sp[r].b0 * bs), (size_t)n) !=
			    sums[bl])
				return "a block fails its checksum";
		}
	}
	return NULL;
}

/* Plans the reads of found key k (spans into sp, requests into rq from
 * index *at); returns the bytes they need. */
static size_t file_plan(file_key *k, size_t ki, kvl__fio_req *rq,
                        file_span *sp, size_t *at)
{
	uint64_t bs = 1ull << file_block_shift(k->len);
	uint64_t padded = kvl__file_size(k->len) - FILE_PAGE;
	size_t bytes = 0;
	k->first = *at;
	k->hdr_req = SIZE_MAX;
	for (size_t j = 0; j < k->nr; j++) {
		const kvl_range *r = &k->rg[j];
		if (!r->len)
			continue;
		uint64_t b0 = r->offset / bs, b1 = (r->offset + r->len - 1) / bs;
		uint64_t end = (b1 + 1) * bs < padded ? (b1 + 1) * bs : padded;
		uint64_t from = FILE_PAGE + b0 * bs;
		size_t data_at = 0;
		if (b0 == 0 && k->hdr_req == SIZE_MAX) {
			from = 0; /* the header page comes with it */
			data_at = FILE_PAGE;
			k->hdr_req = *at;
		}
		sp[*at] = (file_span){ki, j, b0, b1, data_at};
		rq[*at] = (kvl__fio_req){.fd = k->fd, .off = from,
		                         .len = (size_t)(FILE_PAGE + end - from)};
		bytes += rq[(*at)++].len;
	}
	if (k->hdr_req == SIZE_MAX) {
		k->hdr_req = *at;
		sp[*at] = (file_span){ki, SIZE_MAX, 0, 0, 0};
		rq[*at] = (kvl__fio_req){.fd = k->fd, .off = 0,
		                         .len = FILE_PAGE};
		bytes += rq[(*at)++].len;
	}
	k->n = *at - k->first;
	return bytes;
}

/* Copies key k's ranges out of its checked reads. */
static void file_copy_out(const file_key *k, const kvl__fio_req *rq,
                          const file_span *sp)
{
	uint64_t bs = 1ull << file_block_shift(k->len);
	for (size_t r = k->first; r < k->first + k->n; r++) {
		if (sp[r].range == SIZE_MAX)
			continue;
		const kvl_range *g = &k->rg[sp[r].range];
		const uint8_t *p = (const uint8_t *)rq[r].buf + sp[r].data_at;
		memcpy(g->addr, p + (g->offset - sp[r].b0 * bs), g->len);
	}
}

/* Finds the chunk's keys under the index lock: absent ones and bad ranges
 * get their results; found ones are touched and go into k[] (n_found). */
static int file_get_find(kvl_store *store, struct file_store *f,
                         const kvl__batch *b, size_t base, size_t cn,
                         const file_hashes *hs, size_t rg_at, file_key *k,
                         size_t *kmap, size_t *n_found)
{
	int rc = file_lock(store, f, b->fn);
	if (rc < 0)
		return rc;
	size_t bad = SIZE_MAX, bad_range = 0;
	uint64_t bad_len = 0;
	const kvl_range *bad_rg = NULL;
	*n_found = 0;
	for (size_t i = base; i < base + cn; i++) {
		size_t nr = b->counts[i];
		const kvl_range *rg = nr ? b->ranges + rg_at : NULL;
		rg_at += nr;
		uint64_t h1 = hs->h1[i - base], h2 = hs->h2[i - base];
		uint32_t e = kvl__fidx_find(&f->ix, h1, h2);
		if (e == FIDX_NONE) {
			b->results[i] = KVL_ENOTFOUND;
			f->misses++;
			continue;
		}
		uint64_t len = f->ix.e[e].len;
		size_t j = 0;
		while (j < nr && rg[j].offset <= len &&
		       rg[j].len <= len - rg[j].offset)
			j++;
		if (j < nr) {
			b->results[i] = KVL_ERANGE;
			f->errors++;
			if (bad == SIZE_MAX) {
				bad = i;
				bad_range = j;
				bad_rg = &rg[j];
				bad_len = len;
			}
			continue;
		}
		kvl__fidx_touch(&f->ix, e);
		f->hits++;
		b->results[i] = 0;
		kmap[*n_found] = i;
		k[(*n_found)++] = (file_key){h1, h2, f->ix.e[e].gen, len, -1,
		                             rg, nr, 0, 0, 0, 0};
	}
	kvl__fidx_unlock(&f->ix);
	if (bad != SIZE_MAX)
		kvl__fail(&store->err, KVL_ERANGE,
		          "kvl_store_get: key \"%s\": range %zu (offset %llu, "
		          "len %zu) is beyond the object's %llu bytes",
		          b->keys[bad], bad_range,
		          (unsigned long long)bad_rg->offset, bad_rg->len,
		          (unsigned long long)bad_len);
	return 0;
}

/* What a get's completions need to finish its keys. */
typedef struct file_get_ctx {
	kvl_store *store;
	struct file_store *f;
	const kvl__batch *b;
	file_key *k;
	const size_t *kmap;
	const kvl__fio_req *rq;
	const file_span *sp;
} file_get_ctx;

/* Read r completed; when it was its key's last, the key is checked and
 * copied out, or dropped as damaged. */
static void file_get_done(void *arg, size_t r)
{
	file_get_ctx *c = arg;
	file_key *k = &c->k[c->sp[r].key];
	if (--k->left)
		return;
	size_t i = c->kmap[c->sp[r].key];
	const char *why = file_check(k, c->rq, c->sp, c->b->keys[i]);
	close(k->fd);
	if (!why) {
		file_copy_out(k, c->rq, c->sp);
		return;
	}
	struct file_store *f = c->f;
	char p[PATH_MAX];
	file_path(f, k->gen, p, sizeof p);
	file_drop(c->store, f, k->h1, k->h2, k->gen);
	c->b->results[i] = KVL_ENOTFOUND;
	f->hits--;
	f->misses++;
	f->errors++;
	kvl__fail(&c->store->err, KVL_ENOTFOUND,
	          "kvl_store_get: key \"%s\": %s: %s; the object was removed",
	          c->b->keys[i], p, why);
}

static int file_get(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	file_key k[FILE_CHUNK];
	size_t kmap[FILE_CHUNK];
	size_t rg_at = 0;
	file_hashes hs;
	for (size_t base = 0; base < b->n; base += FILE_CHUNK) {
		size_t cn = file_hash_chunk(b, base, &hs);
		size_t nk = 0, n_reqs = 0;
		int rc = file_get_find(store, f, b, base, cn, &hs, rg_at, k,
		                       kmap, &nk);
		for (size_t i = base; i < base + cn; i++)
			rg_at += b->counts[i];
		if (rc < 0)
			return file_fail_rest(b, base, rc);
		/* Open the files; a key without bytes to read is done. */
		size_t live = 0;
		for (size_t x = 0; x < nk; x++) {
			size_t any = 0;
			for (size_t j = 0; j < k[x].nr; j++)
				any += k[x].rg[j].len != 0;
			if (!any)
				continue;
			char p[PATH_MAX];
			file_path(f, k[x].gen, p, sizeof p);
			k[x].fd = open(p, O_RDONLY | O_CLOEXEC |
			                  (f->direct ? O_DIRECT : 0));
			if (k[x].fd < 0) {
				int e = errno;
				size_t i = kmap[x];
				if (e == ENOENT) { /* evicted or removed since */
					b->results[i] = KVL_ENOTFOUND;
					f->hits--;
					f->misses++;
					continue;
				}
				b->results[i] = kvl__fail(
					&store->err, KVL_EIO,
					"kvl_store_get: key \"%s\": cannot open "
					"%s: %s", b->keys[i], p, strerror(e));
				f->errors++;
				continue;
			}
			n_reqs += any + 1;
			k[live] = k[x];
			kmap[live++] = kmap[x];
		}
		if (!live)
			continue;
		kvl__fio_req *rq = malloc(n_reqs * (sizeof *rq + sizeof(file_span)));
		file_span *sp = (file_span *)(void *)(rq + n_reqs);
		size_t at = 0, bytes = 0, cap = 0;
		uint8_t *buf = NULL;
		if (rq) {
			for (size_t x = 0; x < live; x++)
				bytes += file_plan(&k[x], x, rq, sp, &at);
			buf = file_bounce(f, bytes, &cap);
		}
		if (!buf) {
			for (size_t x = 0; x < live; x++) {
				close(k[x].fd);
				b->results[kmap[x]] = kvl__fail(
					&store->err, KVL_ENOMEM,
					"kvl_store_get: out of memory for %zu "
					"bytes of reads", bytes);
			}
			free(rq);
			continue;
		}
		for (size_t r = 0, o = 0; r < at; o += rq[r++].len)
			rq[r].buf = buf + o;
		for (size_t x = 0; x < live; x++)
			k[x].left = k[x].n;
		file_get_ctx ctx = {store, f, b, k, kmap, rq, sp};
		kvl__fio_read(&f->io, rq, at, file_get_done, &ctx);
		file_bounce_put(f, buf, cap);
		free(rq);
	}
	return 0;
}

/* ------------------------------------------------------------------- put */

/* Writes the object image buf (size bytes) as the file of generation gen,
 * published whole under its name or not at all: 0 or -errno. */
static int file_publish(struct file_store *f, uint64_t gen, const void *buf,
                        size_t size)
{
	char final[PATH_MAX], p[PATH_MAX];
	int flags = O_WRONLY | O_CLOEXEC | (f->direct ? O_DIRECT : 0), rc;
	file_path(f, gen, final, sizeof final);
	if (atomic_load(&f->tmpfile)) {
		snprintf(p, sizeof p, "%s/data/%02x", f->dir,
		         (unsigned)(gen & 0xff));
		int fd = open(p, O_TMPFILE | flags, 0644);
		if (fd >= 0) {
			rc = kvl__fio_write(fd, buf, size, 0);
			if (!rc && linkat(fd, "", AT_FDCWD, final, AT_EMPTY_PATH)) {
				/* Without CAP_DAC_READ_SEARCH: through /proc. */
				snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
				if (linkat(AT_FDCWD, p, AT_FDCWD, final,
				           AT_SYMLINK_FOLLOW))
					rc = -errno;
			}
			close(fd);
			if (rc != -ENOENT) /* no /proc: a named file instead */
				return rc;
		} else if (errno != EOPNOTSUPP && errno != EISDIR) {
			return -errno;
		}
		atomic_store(&f->tmpfile, 0);
	}
	snprintf(p, sizeof p, "%s/tmp/%016llx", f->dir,
	         (unsigned long long)gen);
	int fd = open(p, O_CREAT | O_EXCL | flags, 0644);
	if (fd < 0)
		return -errno;
	rc = kvl__fio_write(fd, buf, size, 0);
	close(fd);
	if (!rc && rename(p, final))
		rc = -errno;
	if (rc)
		unlink(p);
	return rc;
}

/* The disk is fuller than the capacity allows for: evicts the least
 * recently used objects worth `need` bytes. 0 when nothing could go. */
static size_t file_free_disk(kvl_store *store, struct file_store *f,
                             uint64_t need)
{
	uint64_t g[FILE_VICTIMS];
	size_t n = 0;
	if (file_lock(store, f, "put") < 0)
		return 0;
	uint64_t objects, before, after, cap;
	kvl__fidx_counts(&f->ix, &objects, &before, &cap);
	after = before;
	while (before - after < need && n < FILE_VICTIMS &&
	       (g[n] = kvl__fidx_evict_one(&f->ix))) {
		kvl__fidx_counts(&f->ix, &objects, &after, &cap);
		n++;
	}
	kvl__fidx_unlock(&f->ix);
	file_unlink_gens(f, g, n);
	f->evictions += n;
	return n;
}

/* Enters a published object (generation gen) under its key: STORED, or
 * PRESENT when the key got in first (the file is unlinked then). */
static int file_enter(kvl_store *store, struct file_store *f, uint64_t h1,
                      uint64_t h2, uint64_t gen, uint64_t len, const char *key)
{
	uint64_t victims[FILE_VICTIMS];
	size_t nv = 0;
	int rc = file_lock(store, f, "kvl_store_put");
	if (rc < 0) {
		file_unlink_gens(f, &gen, 1);
		return rc;
	}
	if (kvl__fidx_find(&f->ix, h1, h2) != FIDX_NONE) {
		kvl__fidx_unlock(&f->ix);
		file_unlink_gens(f, &gen, 1);
		return KVL_PUT_PRESENT;
	}
	while ((rc = kvl__fidx_make_room(&f->ix, kvl__file_cost(len), victims,
	                                 FILE_VICTIMS, &nv)) == 1) {
		file_unlink_gens(f, victims, nv); /* many: under the lock */
		f->evictions += nv;
		nv = 0;
	}
	if (rc == 0)
		kvl__fidx_insert(&f->ix, h1, h2, gen, len);
	uint64_t cap = 0, objects, bytes;
	kvl__fidx_counts(&f->ix, &objects, &bytes, &cap);
	kvl__fidx_unlock(&f->ix);
	file_unlink_gens(f, victims, nv);
	f->evictions += nv;
	if (rc < 0) {
		file_unlink_gens(f, &gen, 1);
		return kvl__fail(&store->err, rc,
		                 "kvl_store_put: key \"%s\": an object of %llu "
		                 "bytes (%llu with its header) does not fit the "
		                 "capacity of %llu bytes",
		                 key, (unsigned long long)len,
		                 (unsigned long long)kvl__file_cost(len),
		                 (unsigned long long)cap);
	}
	return KVL_PUT_STORED;
}

/* Builds the file image of one object in buf (size bytes, aligned). */
static void file_image(uint8_t *buf, uint64_t size, const kvl_iov *pc,
                       size_t np, uint64_t len, uint64_t gen, uint64_t h1,
                       uint64_t h2, const char *key, size_t kl)
{
	memset(buf, 0, FILE_PAGE);
	uint8_t *data = buf + FILE_PAGE;
	size_t at = 0;
	for (size_t j = 0; j < np; j++) {
		if (pc[j].len)
			memcpy(data + at, pc[j].addr, pc[j].len);
		at += pc[j].len;
	}
	memset(data + len, 0, (size_t)(size - FILE_PAGE - len));
	file_hdr *h = (file_hdr *)(void *)buf;
	uint32_t shift = file_block_shift(len);
	uint64_t bs = 1ull << shift, nb = (len + bs - 1) / bs;
	uint64_t *sums = (uint64_t *)(void *)(buf + FILE_SUMS_AT);
	for (uint64_t b = 0; b < nb; b++)
		sums[b] = XXH3_64bits(data + b * bs,
		                      (size_t)(len - b * bs < bs ? len - b * bs
		                                                 : bs));
	memcpy(h->magic, FILE_MAGIC, 8);
	h->version = FILE_VERSION;
	h->block_shift = shift;
	h->gen = gen;
	h->len = len;
	h->h1 = h1;
	h->h2 = h2;
	h->key_len = (uint32_t)kl;
	h->n_blocks = (uint32_t)nb;
	memcpy(buf + FILE_KEY_AT, key, kl);
	h->hdr_sum = file_hdr_sum(buf);
}

/* Stores one absent key: a KVL_PUT_* or a code (message set). */
static int file_put1(kvl_store *store, struct file_store *f, const char *key,
                     const kvl_iov *pc, size_t np)
{
	size_t kl = strlen(key);
	uint64_t len = 0, h1, h2;
	int too_big = 0;
	for (size_t j = 0; j < np; j++) {
		if (pc[j].len > (uint64_t)SIZE_MAX / 2 - len)
			too_big = 1;
		else
			len += pc[j].len;
	}
	uint64_t cap = 0, objects, bytes;
	if (file_lock(store, f, "kvl_store_put") == 0) {
		kvl__fidx_counts(&f->ix, &objects, &bytes, &cap);
		kvl__fidx_unlock(&f->ix);
	}
	if (too_big || kvl__file_cost(len) > cap)
		return kvl__fail(&store->err, KVL_ERANGE,
		                 "kvl_store_put: key \"%s\": an object of %s%llu "
		                 "bytes (%llu with its header) does not fit the "
		                 "capacity of %llu bytes",
		                 key, too_big ? "over " : "",
		                 (unsigned long long)len,
		                 (unsigned long long)kvl__file_cost(len),
		                 (unsigned long long)cap);
	file_key_hash(key, kl, &h1, &h2);
	uint64_t cost = kvl__file_size(len); /* the file's bytes */
	size_t bcap;
	uint8_t *buf = file_bounce(f, (size_t)cost, &bcap);
	if (!buf)
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "kvl_store_put: key \"%s\": out of memory for "
		                 "%llu bytes", key, (unsigned long long)cost);
	uint64_t gen = kvl__fidx_new_gen(&f->ix);
	file_image(buf, cost, pc, np, len, gen, h1, h2, key, kl);
	int rc = file_publish(f, gen, buf, (size_t)cost);
	if (rc == -ENOSPC && file_free_disk(store, f, cost))
		rc = file_publish(f, gen, buf, (size_t)cost);
	file_bounce_put(f, buf, bcap);
	if (rc == -ENOSPC)
		return kvl__fail(&store->err, KVL_EFULL,
		                 "kvl_store_put: key \"%s\": the file system of "
		                 "%s is full (%llu bytes needed, nothing left to "
		                 "evict)", key, f->dir,
		                 (unsigned long long)cost);
	if (rc < 0)
		return kvl__fail(&store->err, KVL_EIO,
		                 "kvl_store_put: key \"%s\": cannot write its "
		                 "file in %s: %s", key, f->dir, strerror(-rc));
	return file_enter(store, f, h1, h2, gen, len, key);
}

static int file_put(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	size_t pc_at = 0;
	enum { PENDING = 2 };
	file_hashes hs;
	for (size_t base = 0; base < b->n; base += FILE_CHUNK) {
		size_t cn = file_hash_chunk(b, base, &hs);
		/* Keys already present are skipped before anything is
		 * written. */
		int rc = file_lock(store, f, b->fn);
		if (rc < 0)
			return file_fail_rest(b, base, rc);
		for (size_t i = 0; i < cn; i++)
			b->results[base + i] =
				kvl__fidx_find(&f->ix, hs.h1[i], hs.h2[i]) !=
				                FIDX_NONE
				        ? KVL_PUT_PRESENT
				        : PENDING;
		kvl__fidx_unlock(&f->ix);
		for (size_t i = base; i < base + cn; i++) {
			size_t np = b->counts[i];
			const kvl_iov *pc = np ? b->pieces + pc_at : NULL;
			pc_at += np;
			if (b->results[i] != PENDING)
				continue;
			rc = file_put1(store, f, b->keys[i], pc, np);
			b->results[i] = rc;
			if (rc == KVL_PUT_STORED)
				f->puts++;
			else if (rc < 0)
				f->errors++;
		}
	}
	return 0;
}

/* ------------------------------------------------------------- sweeper */

/* A file name that is a generation (16 hex digits), or 0. */
static uint64_t file_name_gen(const char *name)
{
	uint64_t g = 0;
	size_t i = 0;
	for (; name[i] && i < 16; i++) {
		char c = name[i];
		int v = c >= '0' && c <= '9'   ? c - '0'
		        : c >= 'a' && c <= 'f' ? c - 'a' + 10
		                               : -1;
		if (v < 0)
			return 0;
		g = g << 4 | (uint64_t)v;
	}
	return i == 16 && !name[i] ? g : 0;
}

/* Unlinks the files of dir/sub of generations below `below` that are not
 * in live[] (n sorted; NULL: none is kept). */
static void file_sweep_dir(struct file_store *f, const char *sub,
                           uint64_t below, const uint64_t *live, size_t n)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", f->dir, sub);
	DIR *d = opendir(p);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)) && !atomic_load(&f->stop)) {
		uint64_t g = file_name_gen(de->d_name);
		if (!g || g >= below)
			continue;
		size_t lo = 0, hi = live ? n : 0;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (live[mid] < g)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (live && lo < n && live[lo] == g)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			f->swept++;
	}
	closedir(d);
}

/* Removes what dead writers left: files no entry names, of generations
 * older than this process's lone open (no live process writes those). */
static void *file_sweeper(void *arg)
{
	struct file_store *f = arg;
	uint64_t *live = NULL;
	size_t n = 0;
	if (kvl__fidx_lock(&f->ix) < 0)
		return NULL;
	int rc = kvl__fidx_live_gens(&f->ix, &live, &n);
	kvl__fidx_unlock(&f->ix);
	if (rc < 0)
		return NULL;
	file_sweep_dir(f, "tmp", f->ix.sweep_below, NULL, 0);
	for (int x = 0; x < 256 && !atomic_load(&f->stop); x++) {
		char sub[16];
		snprintf(sub, sizeof sub, "data/%02x", x);
		file_sweep_dir(f, sub, f->ix.sweep_below, live, n);
	}
	free(live);
	return NULL;
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
	kvl__fidx_close(&f->ix);
	for (unsigned i = 0; i < FILE_POOL; i++)
		free(f->pool.p[i]);
	pthread_mutex_destroy(&f->pool.mu);
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
	    pthread_create(&f->sweeper, NULL, file_sweeper, f) == 0)
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

const kvl__store_ops kvl__store_file_ops = {
	.scheme = "file",
	.open = file_open,
	.close = file_close,
	.exists = file_exists,
	.get = file_get,
	.put = file_put,
	.remove = file_remove,
	.stats = file_stats,
};
