/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_hdrs.c — the file store's cache of header pages it has verified.
 *
 * A layer-wise load reads each layer of a page as its own range; every
 * range is checked against the block sums in the object's header page, so
 * without a cache each range beyond the first would read the header page
 * too: two reads where one does, on a device whose small reads are bound
 * by how many it can do. A header page read from disk and verified (its
 * sum, key, generation and length, and the blocks read with it) by a read
 * of less than the whole object is kept here, under its generation and
 * key hashes; a later range of the same object takes a copy instead of a
 * read, and the copy is checked again as a page from disk is (it costs an
 * XXH3 pass over 4 KiB).
 *
 * A generation names one object's file for the index's life (next_gen
 * only grows), so an entry never describes another object: an object
 * removed or evicted leaves an entry nobody asks for, which a later one
 * replaces. Direct-mapped by generation, 2^FILE_HDR_BITS entries (4 MiB),
 * made on the first keep; one mutex guards it (a copy of 4 KiB under it).
 */
#include <stdlib.h>

#include "store/file.h"

struct file_hdr_slot {
	uint64_t gen, h1, h2; /* gen 0: empty (generations start at 1) */
	uint8_t page[FILE_PAGE];
};

static struct file_hdr_slot *hdrs_slot(struct file_hdr_cache *c,
                                       uint64_t gen)
{
	return &c->slot[(gen * 0x9e3779b97f4a7c15ull) >> (64 - FILE_HDR_BITS)];
}

void kvl__file_hdrs_init(struct file_hdr_cache *c)
{
	memset(c, 0, sizeof *c);
	pthread_mutex_init(&c->mu, NULL);
}

void kvl__file_hdrs_destroy(struct file_hdr_cache *c)
{
	free(c->slot);
	pthread_mutex_destroy(&c->mu);
}

int kvl__file_hdrs_get(struct file_hdr_cache *c, uint64_t gen, uint64_t h1,
                       uint64_t h2, uint8_t *out)
{
	int hit = 0;
	pthread_mutex_lock(&c->mu);
	if (c->slot) {
		struct file_hdr_slot *s = hdrs_slot(c, gen);
		hit = s->gen == gen && s->h1 == h1 && s->h2 == h2;
		if (hit)
			memcpy(out, s->page, FILE_PAGE);
	}
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(hit ? &c->hits : &c->misses, 1);
	return hit;
}

void kvl__file_hdrs_keep(struct file_hdr_cache *c, uint64_t gen,
                         uint64_t h1, uint64_t h2, const uint8_t *page)
{
	pthread_mutex_lock(&c->mu);
	if (!c->slot)
		c->slot = calloc((size_t)1 << FILE_HDR_BITS, sizeof *c->slot);
	if (c->slot) {
		struct file_hdr_slot *s = hdrs_slot(c, gen);
		s->gen = gen;
		s->h1 = h1;
		s->h2 = h2;
		memcpy(s->page, page, FILE_PAGE);
	}
	pthread_mutex_unlock(&c->mu);
}

void kvl__file_hdrs_forget(struct file_hdr_cache *c, uint64_t gen)
{
	pthread_mutex_lock(&c->mu);
	if (c->slot && hdrs_slot(c, gen)->gen == gen)
		hdrs_slot(c, gen)->gen = 0;
	pthread_mutex_unlock(&c->mu);
}
