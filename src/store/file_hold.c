/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_hold.c — the file store's batch holds (kvl__store_hold): a held
 * object keeps an open descriptor of its file until the batch lets it go.
 *
 * A layer-wise load reads every object of a batch once per layer. Held,
 * an object costs one open for the batch instead of one a layer, and its
 * reads find it even after another call (or process) evicted or removed
 * it meanwhile: its file is unlinked, but the descriptor still reads the
 * object's bytes (a generation's file is written once), so the load ends
 * with the pages its lookup promised. Only this handle's reads see it;
 * everyone else sees it gone at once, and its disk space comes back when
 * the last hold of it goes (a batch's objects at most, beyond the
 * capacity, for the batch's time).
 *
 * Holds are counted per key (a key held twice is let go twice) in a
 * chained hash table of the keys held now, under their key hashes, guarded
 * by one mutex; gets take a duplicate of a descriptor (dup), so an unhold
 * never closes one under a read. Held descriptors are at most a quarter
 * of the process's limit on open files (RLIMIT_NOFILE), so that a large
 * batch leaves room for everything else: beyond it a key is not held
 * (result 0) and its reads open its file as they would unheld.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "store/file.h"

#define HELD_SLOTS_MIN 64
#define HELD_FDS_MIN 16     /* descriptors holds may keep, at least */
#define HELD_FDS_MAX 65536  /* and at most */

struct file_held {
	struct file_held *next;
	uint64_t h1, h2, gen, len;
	int fd;
	uint32_t n; /* holds */
};

void kvl__file_holds_init(struct file_holds *h)
{
	memset(h, 0, sizeof *h);
	pthread_mutex_init(&h->mu, NULL);
	struct rlimit rl;
	rlim_t fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur / 4 : 0;
	h->max = fds < HELD_FDS_MIN   ? HELD_FDS_MIN
	         : fds > HELD_FDS_MAX ? HELD_FDS_MAX
	                              : (size_t)fds;
}

void kvl__file_holds_destroy(struct file_holds *h)
{
	for (size_t i = 0; i < h->n_slots; i++)
		for (struct file_held *e = h->slot[i], *next; e; e = next) {
			next = e->next;
			close(e->fd);
			free(e);
		}
	free(h->slot);
	pthread_mutex_destroy(&h->mu);
}

/* The link to key (h1, h2)'s entry, or to the NULL ending its chain (mu
 * held, table made). */
static struct file_held **held_find(struct file_holds *h, uint64_t h1,
                                    uint64_t h2)
{
	struct file_held **p = &h->slot[h1 & (h->n_slots - 1)];
	while (*p && ((*p)->h1 != h1 || (*p)->h2 != h2))
		p = &(*p)->next;
	return p;
}

/* Room for one more key (mu held): 0, or KVL_ENOMEM with no table. */
static int held_grow(struct file_holds *h)
{
	if (h->n < h->n_slots)
		return 0;
	size_t n = h->n_slots ? h->n_slots * 2 : HELD_SLOTS_MIN;
	struct file_held **slot = calloc(n, sizeof *slot);
	if (!slot)
		return h->n_slots ? 0 : KVL_ENOMEM; /* longer chains will do */
	for (size_t i = 0; i < h->n_slots; i++)
		for (struct file_held *e = h->slot[i], *next; e; e = next) {
			next = e->next;
			e->next = slot[e->h1 & (n - 1)];
			slot[e->h1 & (n - 1)] = e;
		}
	free(h->slot);
	h->slot = slot;
	h->n_slots = n;
	return 0;
}

void kvl__file_held(struct file_holds *h, const uint64_t *h1,
                    const uint64_t *h2, size_t n, uint64_t *gen,
                    uint64_t *len, int *fd)
{
	pthread_mutex_lock(&h->mu);
	for (size_t x = 0; x < n; x++) {
		struct file_held *e = h->n ? *held_find(h, h1[x], h2[x]) : NULL;
		fd[x] = e ? fcntl(e->fd, F_DUPFD_CLOEXEC, 0) : -1;
		if (e) {
			gen[x] = e->gen;
			len[x] = e->len;
		}
	}
	pthread_mutex_unlock(&h->mu);
}

/* One more hold of key (h1, h2) if it is held: 1, else 0. */
static int held_again(struct file_holds *h, uint64_t h1, uint64_t h2)
{
	pthread_mutex_lock(&h->mu);
	struct file_held *e = h->n ? *held_find(h, h1, h2) : NULL;
	if (e)
		e->n++;
	pthread_mutex_unlock(&h->mu);
	return e != NULL;
}

/* Holds object (h1, h2) of generation gen and length len, whose file fd
 * the table takes (it closes fd when another thread held the key first).
 * 1; 0 when the table holds all the descriptors it may (fd closed);
 * KVL_ENOMEM (fd closed). */
static int held_add(struct file_holds *h, uint64_t h1, uint64_t h2,
                    uint64_t gen, uint64_t len, int fd)
{
	int rc = 1;
	pthread_mutex_lock(&h->mu);
	struct file_held **p = h->n_slots ? held_find(h, h1, h2) : NULL;
	if (p && *p) { /* held meanwhile */
		(*p)->n++;
		pthread_mutex_unlock(&h->mu);
		close(fd);
		return 1;
	}
	if (h->n >= h->max) {
		pthread_mutex_unlock(&h->mu);
		close(fd);
		return 0;
	}
	struct file_held *e = malloc(sizeof *e);
	if (!e || held_grow(h) < 0) {
		free(e);
		close(fd);
		rc = KVL_ENOMEM;
	} else {
		*e = (struct file_held){.h1 = h1, .h2 = h2, .gen = gen,
		                        .len = len, .fd = fd, .n = 1};
		p = held_find(h, h1, h2);
		*p = e;
		h->n++;
	}
	pthread_mutex_unlock(&h->mu);
	return rc;
}

/* One hold of key (h1, h2) fewer; its file is closed with its last. 0, or
 * KVL_ENOTFOUND when it is not held. */
static int held_drop(struct file_holds *h, uint64_t h1, uint64_t h2)
{
	struct file_held *gone = NULL;
	pthread_mutex_lock(&h->mu);
	struct file_held **p = h->n ? held_find(h, h1, h2) : NULL;
	struct file_held *e = p ? *p : NULL;
	if (e && --e->n == 0) {
		*p = e->next;
		h->n--;
		gone = e;
	}
	pthread_mutex_unlock(&h->mu);
	if (gone) {
		close(gone->fd);
		free(gone);
	}
	return e ? 0 : KVL_ENOTFOUND;
}

/* The index's entry of each key of a chunk not held already: gen[i] and
 * len[i], gen[i] 0 when absent or held (its result is then set). When the
 * index cannot be had, the chunk's keys hold nothing (what was taken is
 * let go) and get its error. */
static int hold_find(kvl_store *store, struct file_store *f,
                     const kvl__batch *b, size_t base, size_t cn,
                     const file_hashes *hs, uint64_t *gen, uint64_t *len)
{
	for (size_t i = 0; i < cn; i++) {
		gen[i] = 0;
		b->results[base + i] = held_again(&f->holds, hs->h1[i],
		                                  hs->h2[i]);
	}
	int rc = kvl__file_lock(store, f, b->fn);
	for (size_t i = 0; rc < 0 && i < cn; i++) {
		if (b->results[base + i] == 1)
			held_drop(&f->holds, hs->h1[i], hs->h2[i]);
		b->results[base + i] = rc;
	}
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < cn; i++) {
		if (b->results[base + i])
			continue;
		uint32_t e = kvl__fidx_find(&f->ix, hs->h1[i], hs->h2[i]);
		if (e != FIDX_NONE) {
			gen[i] = f->ix.e[e].gen;
			len[i] = f->ix.e[e].len;
		}
	}
	kvl__fidx_unlock(&f->ix);
	return 0;
}

int kvl__file_hold(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	file_hashes hs;
	uint64_t gen[FILE_CHUNK], len[FILE_CHUNK];
	for (size_t base = 0; base < b->n; base += FILE_CHUNK) {
		size_t cn = kvl__file_hash_chunk(b, base, &hs);
		int rc = hold_find(store, f, b, base, cn, &hs, gen, len);
		if (rc < 0)
			return kvl__file_fail_rest(b, base, rc);
		for (size_t i = 0; i < cn; i++) {
			if (!gen[i])
				continue; /* held already, or absent */
			char p[PATH_MAX];
			kvl__file_path(f, gen[i], p, sizeof p);
			int fd = open(p, O_RDONLY | O_CLOEXEC |
			                 (f->direct ? O_DIRECT : 0));
			int *res = &b->results[base + i];
			if (fd >= 0)
				*res = held_add(&f->holds, hs.h1[i], hs.h2[i],
				                gen[i], len[i], fd);
			else if (errno != ENOENT) /* ENOENT: gone since */
				*res = kvl__fail(&store->err, KVL_EIO,
				                 "hold: key \"%s\": cannot open "
				                 "%s: %s",
				                 b->keys[base + i], p,
				                 strerror(errno));
			if (*res == KVL_ENOMEM)
				kvl__fail(&store->err, KVL_ENOMEM,
				          "hold: out of memory");
		}
	}
	return 0;
}

int kvl__file_unhold(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	(void)store; /* a key not held: the door says so */
	for (size_t i = 0; i < b->n; i++) {
		uint64_t h1, h2;
		kvl__file_key_hash(b->keys[i], strlen(b->keys[i]), &h1, &h2);
		b->results[i] = held_drop(&f->holds, h1, h2);
	}
	return 0;
}
