/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_get.c — the file store's get: for each chunk of FILE_CHUNK keys,
 * finds the keys under the index lock (absent ones and bad ranges get
 * their results there), opens their files, plans the reads (each range as
 * the blocks it touches, the header page with the first), reads them all
 * at once (file_io.c) into a bounce buffer (in segments of up to 64 MiB,
 * so the buffer is kept for reuse), and checks and copies out each key as
 * its last read completes, while the rest are still in flight (on checker
 * threads where there are cores for them: file_check.c; a key that fails
 * is dropped on the caller's thread, which says why).
 *
 * What a get checks: the header (its sum, the key, the generation and
 * length the index gave) and every block's sum. An object that fails is
 * taken out of the index and its file unlinked; the key reads as absent
 * (KVL_ENOTFOUND), counted as an error, and the message says why. Damage
 * never reads as data: no byte reaches the caller before its key passed.
 *
 * A file that vanished between the lookup and the open was evicted or
 * removed meanwhile: a miss, not an error. A held key (file_hold.c) comes
 * with a descriptor of its file and needs no open; it is read even when
 * the index no longer has it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/backend.h"
#include "store/file.h"


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
	uint8_t *hdr;   /* or the header page from the cache (NULL: read) */
	int whole;      /* a range covers the whole object */
	const char *why; /* why it failed its check, or NULL */
	struct file_check_job job; /* its check, on a checker thread */
	size_t first, n; /* its reads */
	size_t left;     /* of them not yet completed */
} file_key;

/* Key k's header page: from the cache, or where its read put it. */
static uint8_t *file_key_hdr(const file_key *k, const kvl__fio_req *rq)
{
	return k->hdr ? k->hdr : rq[k->hdr_req].buf;
}

/* Why key k's reads do not hold its object, or NULL when they do. */
static const char *file_check(const file_key *k, const kvl__fio_req *rq,
                              const file_span *sp, const char *key)
{
	for (size_t r = k->first; r < k->first + k->n; r++)
		if (rq[r].res != (ssize_t)rq[r].len)
			return rq[r].res < 0 ? "a read failed"
			                     : "the file is shorter than its "
			                       "object";
	uint8_t *page = file_key_hdr(k, rq);
	const char *why = kvl__file_hdr_check(page, k->gen, k->len, k->h1,
	                                      k->h2, key, strlen(key));
	if (why)
		return why;
	for (size_t r = k->first; r < k->first + k->n; r++)
		if (sp[r].range != SIZE_MAX &&
		    !kvl__file_blocks_ok(page, k->len,
		                         (const uint8_t *)rq[r].buf +
		                                 sp[r].data_at,
		                         sp[r].b0, sp[r].b1 + 1))
			return "a block fails its checksum";
	return NULL;
}

/* Plans the reads of found key k, number ki of live (spans into sp,
 * requests into rq from index *at). A key whose ranges miss its first
 * block needs its header page apart: a copy from the cache, into page ki
 * of *pages (made on first need), when the cache has it, else a read. */
static void file_plan(struct file_store *f, file_key *k, size_t ki,
                      kvl__fio_req *rq, file_span *sp, size_t *at,
                      uint8_t **pages, size_t live)
{
	uint64_t bs = 1ull << kvl__file_block_shift(k->len);
	uint64_t padded = kvl__file_size(k->len) - FILE_PAGE;
	k->first = *at;
	k->hdr_req = SIZE_MAX;
	k->whole = 0;
	for (size_t j = 0; j < k->nr; j++) {
		const kvl_range *r = &k->rg[j];
		if (!r->len)
			continue;
		k->whole |= r->offset == 0 && r->len == k->len;
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
		(*at)++;
	}
	k->hdr = NULL;
	if (k->hdr_req == SIZE_MAX && !*pages)
		*pages = malloc(live * FILE_PAGE);
	uint8_t *page = *pages ? *pages + ki * FILE_PAGE : NULL;
	if (k->hdr_req == SIZE_MAX && page &&
	    kvl__file_hdrs_get(&f->hdrs, k->gen, k->h1, k->h2, page))
		k->hdr = page;
	else if (k->hdr_req == SIZE_MAX) {
		k->hdr_req = *at;
		sp[*at] = (file_span){ki, SIZE_MAX, 0, 0, 0};
		rq[*at] = (kvl__fio_req){.fd = k->fd, .off = 0,
		                         .len = FILE_PAGE};
		(*at)++;
	}
	k->n = *at - k->first;
}

/* Copies key k's ranges out of its checked reads. */
static void file_copy_out(const file_key *k, const kvl__fio_req *rq,
                          const file_span *sp)
{
	uint64_t bs = 1ull << kvl__file_block_shift(k->len);
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
	/* Held objects (file_hold.c) come with a descriptor of their own. */
	uint64_t hgen[FILE_CHUNK], hlen[FILE_CHUNK];
	int hfd[FILE_CHUNK];
	kvl__file_held(&f->holds, hs->h1, hs->h2, cn, hgen, hlen, hfd);
	int rc = kvl__file_lock(store, f, b->fn);
	if (rc < 0) {
		for (size_t x = 0; x < cn; x++)
			if (hfd[x] >= 0)
				close(hfd[x]);
		return rc;
	}
	size_t bad = SIZE_MAX, bad_range = 0;
	uint64_t bad_len = 0;
	const kvl_range *bad_rg = NULL;
	*n_found = 0;
	for (size_t i = base; i < base + cn; i++) {
		size_t nr = b->counts[i];
		const kvl_range *rg = nr ? b->ranges + rg_at : NULL;
		rg_at += nr;
		size_t x = i - base;
		uint64_t h1 = hs->h1[x], h2 = hs->h2[x];
		uint32_t e = kvl__fidx_find(&f->ix, h1, h2);
		if (e != FIDX_NONE && hfd[x] >= 0 && f->ix.e[e].gen != hgen[x]) {
			close(hfd[x]); /* put again since: read the new one */
			hfd[x] = -1;
		}
		if (e == FIDX_NONE && hfd[x] < 0) {
			b->results[i] = KVL_ENOTFOUND;
			f->misses++;
			continue;
		}
		/* Evicted or removed since its hold: its file still reads. */
		uint64_t len = e != FIDX_NONE ? f->ix.e[e].len : hlen[x];
		uint64_t gen = e != FIDX_NONE ? f->ix.e[e].gen : hgen[x];
		size_t j = 0;
		while (j < nr && rg[j].offset <= len &&
		       rg[j].len <= len - rg[j].offset)
			j++;
		if (j < nr) {
			if (hfd[x] >= 0)
				close(hfd[x]);
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
		if (e != FIDX_NONE)
			kvl__fidx_touch(&f->ix, e);
		f->hits++;
		b->results[i] = 0;
		kmap[*n_found] = i;
		k[(*n_found)++] = (file_key){.h1 = h1, .h2 = h2, .gen = gen,
		                             .len = len, .fd = hfd[x],
		                             .rg = rg, .nr = nr};
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
	size_t base; /* the segment's first read (file_read_segments) */
	int checkers;     /* checks go to the checker threads */
	unsigned pending; /* of them not yet done (the checkers' mu) */
} file_get_ctx;

/* Takes key (h1, h2) of generation gen out of the index, if it is still
 * that object, and unlinks its file. */
static void file_drop(kvl_store *store, struct file_store *f, uint64_t h1,
                      uint64_t h2, uint64_t gen)
{
	if (kvl__file_lock(store, f, "drop") == 0) {
		uint32_t e = kvl__fidx_find(&f->ix, h1, h2);
		if (e != FIDX_NONE && f->ix.e[e].gen == gen)
			kvl__fidx_unlink(&f->ix, e);
		kvl__fidx_unlock(&f->ix);
	}
	kvl__file_unlink_gens(f, &gen, 1);
}

/* Checks key x, read whole, and copies it out when it passed (on any
 * thread: it touches key x alone); its `why` says why not. */
static void file_check_key(void *arg, size_t x)
{
	file_get_ctx *c = arg;
	file_key *k = &c->k[x];
	k->why = file_check(k, c->rq, c->sp, c->b->keys[c->kmap[x]]);
	close(k->fd);
	if (k->why)
		return;
	if (!k->hdr && !k->whole) /* later ranges copy it */
		kvl__file_hdrs_keep(&c->f->hdrs, k->gen, k->h1, k->h2,
		                    file_key_hdr(k, c->rq));
	file_copy_out(k, c->rq, c->sp);
}

/* Key x failed its check: it is dropped as damaged (on the caller's
 * thread, which says why). */
static void file_key_damaged(file_get_ctx *c, size_t x)
{
	file_key *k = &c->k[x];
	struct file_store *f = c->f;
	size_t i = c->kmap[x];
	kvl__file_hdrs_forget(&f->hdrs, k->gen);
	char p[PATH_MAX];
	kvl__file_path(f, k->gen, p, sizeof p);
	file_drop(c->store, f, k->h1, k->h2, k->gen);
	c->b->results[i] = KVL_ENOTFOUND;
	f->hits--;
	f->misses++;
	f->errors++;
	kvl__fail(&c->store->err, KVL_ENOTFOUND,
	          "kvl_store_get: key \"%s\": %s: %s; the object was removed",
	          c->b->keys[i], p, k->why);
}

/* Read r completed; when it was its key's last, the key is checked and
 * copied out, here or by a checker thread (file_check.c). */
static void file_get_done(void *arg, size_t r)
{
	file_get_ctx *c = arg;
	r += c->base;
	size_t x = c->sp[r].key;
	file_key *k = &c->k[x];
	if (--k->left)
		return;
	if (!c->checkers) {
		file_check_key(c, x);
		return;
	}
	k->job = (struct file_check_job){.fn = file_check_key, .arg = c,
	                                 .x = x, .pending = &c->pending};
	kvl__file_check_queue(&c->f->checkers, &k->job);
}

/* Opens the files of the nk found keys of a chunk (held ones have theirs)
 * and keeps, packed in k and kmap, those left to read: returns how many,
 * and adds their reads at most to *n_reqs. A key without bytes to read is
 * done; a file gone since the lookup is a miss. */
static size_t file_open_keys(kvl_store *store, struct file_store *f,
                             const kvl__batch *b, file_key *k, size_t *kmap,
                             size_t nk, size_t *n_reqs)
{
	size_t live = 0;
	for (size_t x = 0; x < nk; x++) {
		size_t any = 0, i = kmap[x];
		for (size_t j = 0; j < k[x].nr; j++)
			any += k[x].rg[j].len != 0;
		if (!any) {
			if (k[x].fd >= 0) /* held: nothing to read */
				close(k[x].fd);
			continue;
		}
		if (k[x].fd < 0) {
			char p[PATH_MAX];
			kvl__file_path(f, k[x].gen, p, sizeof p);
			k[x].fd = open(p, O_RDONLY | O_CLOEXEC |
			                  (f->direct ? O_DIRECT : 0));
			int e = errno;
			if (k[x].fd < 0 && e == ENOENT) { /* evicted since */
				b->results[i] = KVL_ENOTFOUND;
				f->hits--;
				f->misses++;
				continue;
			}
			if (k[x].fd < 0) {
				b->results[i] = kvl__fail(
					&store->err, KVL_EIO,
					"kvl_store_get: key \"%s\": cannot open "
					"%s: %s", b->keys[i], p, strerror(e));
				f->errors++;
				continue;
			}
		}
		*n_reqs += any + 1;
		k[live] = k[x];
		kmap[live++] = kmap[x];
	}
	return live;
}

/* Reads the planned keys k[0..live) in segments of consecutive keys
 * whose reads fit in one bounce buffer of FILE_POOL_MAX bytes (a larger
 * key alone), so that the buffer is kept for reuse: a fresh one would cost
 * its page faults and zeroing on every call, a fifth of the time of a
 * batch of 4 MiB objects. A key's left counts its reads not yet done: 0
 * once read; the caller sets it to SIZE_MAX before, so that the keys a
 * KVL_ENOMEM (no buffer) left unread keep it. */
static int file_read_segments(file_get_ctx *c, size_t live)
{
	kvl__fio_req *rq = (kvl__fio_req *)c->rq;
	file_key *k = c->k;
	size_t cap = 0;
	uint8_t *buf = NULL;
	for (size_t x0 = 0, x1; x0 < live; x0 = x1) {
		size_t bytes = 0;
		for (x1 = x0; x1 < live; x1++) {
			size_t kb = 0;
			for (size_t r = k[x1].first; r < k[x1].first + k[x1].n; r++)
				kb += rq[r].len;
			if (x1 > x0 && bytes + kb > FILE_POOL_MAX)
				break;
			bytes += kb;
		}
		if (bytes > cap) {
			kvl__file_bounce_put(c->f, buf, cap);
			buf = kvl__file_bounce(c->f, bytes, &cap);
			if (!buf)
				return KVL_ENOMEM;
		}
		size_t r0 = k[x0].first, r1 = k[x1 - 1].first + k[x1 - 1].n;
		for (size_t r = r0, o = 0; r < r1; o += rq[r++].len)
			rq[r].buf = buf + o;
		for (size_t x = x0; x < x1; x++)
			k[x].left = k[x].n;
		c->base = r0;
		kvl__fio_read(&c->f->io, rq + r0, r1 - r0, file_get_done, c);
		if (c->checkers)
			kvl__file_check_wait(&c->f->checkers, &c->pending);
		for (size_t x = x0; x < x1; x++)
			if (k[x].why)
				file_key_damaged(c, x);
	}
	kvl__file_bounce_put(c->f, buf, cap);
	return 0;
}

int kvl__file_get(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	file_key k[FILE_CHUNK];
	size_t kmap[FILE_CHUNK];
	size_t rg_at = 0;
	file_hashes hs;
	for (size_t base = 0; base < b->n; base += FILE_CHUNK) {
		size_t cn = kvl__file_hash_chunk(b, base, &hs);
		size_t nk = 0, n_reqs = 0;
		int rc = file_get_find(store, f, b, base, cn, &hs, rg_at, k,
		                       kmap, &nk);
		for (size_t i = base; i < base + cn; i++)
			rg_at += b->counts[i];
		if (rc < 0)
			return kvl__file_fail_rest(b, base, rc);
		size_t live = file_open_keys(store, f, b, k, kmap, nk, &n_reqs);
		if (!live)
			continue;
		kvl__fio_req *rq = malloc(n_reqs * (sizeof *rq + sizeof(file_span)));
		file_span *sp = (file_span *)(void *)(rq + n_reqs);
		size_t at = 0;
		uint8_t *pages = NULL; /* header pages from the cache */
		for (size_t x = 0; x < live; x++) {
			k[x].left = SIZE_MAX; /* not read */
			if (rq)
				file_plan(f, &k[x], x, rq, sp, &at, &pages,
				          live);
		}
		file_get_ctx ctx = {store, f, b, k, kmap, rq, sp, 0,
		                    live > 1 && kvl__file_checkers_on(
		                                        &f->checkers),
		                    0};
		if (!rq || file_read_segments(&ctx, live) < 0)
			for (size_t x = 0; x < live; x++) {
				if (k[x].left != SIZE_MAX)
					continue; /* read */
				close(k[x].fd);
				b->results[kmap[x]] = kvl__fail(
					&store->err, KVL_ENOMEM,
					"kvl_store_get: out of memory for the "
					"reads of %zu keys", live);
			}
		free(pages);
		free(rq);
	}
	return 0;
}
