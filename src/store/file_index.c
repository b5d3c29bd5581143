/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_index.c — the file store's shared index: one file, kvlink.index,
 * mapped by every process that opens the store directory.
 *
 * Layout: a header page (geometry, capacity, counts, the LRU list's ends,
 * the free list, the generation counter and the index clock), then
 * max_objects entries of 48 bytes (kvl__fidx_entry), then an open
 * addressing table of 32-bit entry numbers (linear probing, at most half
 * full, deletion by backward shift), page-aligned. The geometry is fixed
 * when the index is made; the capacity may change at any open.
 *
 * Locking: every call that reads or changes the index holds the process's
 * mutex and then an exclusive flock on the index file (locks per open file
 * description, so each process has its own; the kernel drops a dead
 * process's lock). The holder sets `dirty` while it holds the lock: a
 * holder that finds it set knows its predecessor died in the middle of a
 * change, and repairs the index before anything else. A repair keeps every
 * entry that looks sane, sorts them by their last use (the clock) into a
 * new LRU list, and rebuilds the table and the free list; an entry that
 * points at the wrong file is caught by the reader, which checks the key,
 * the generation and the length in the object's header.
 *
 * Open and close: each process holds a shared flock on kvlink.lock for as
 * long as it has the store open. An opener that gets it exclusively is
 * alone: it makes the index if there is none, repairs it unless the last
 * closer marked it clean (msync'd, nothing in flight), and records the
 * generation counter: files of older generations that no entry names were
 * left by dead writers (file.c's sweeper removes them). The last closer
 * (the one that can take kvlink.lock exclusively) syncs the mapping and
 * marks the index clean, so a warm restart does not repair.
 *
 * Generations come from an atomic counter in the mapped header, without
 * the lock: they name object files, so no two objects ever share a name.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/file.h"

#define FIDX_MAGIC "KVLFIDX1"
#define FIDX_VERSION 1u
#define FIDX_MIN_OBJECTS 1024ull
#define FIDX_DEFAULT_MAX (4ull << 20)   /* default geometry: 4 M objects */
#define FIDX_MAX_OBJECTS (1ull << 30)   /* entry numbers stay 32-bit */
#define FIDX_DEFAULT_PER (16ull << 10)  /* capacity per default entry */

struct kvl__fidx_hdr {
	char magic[8];
	uint32_t version, hdr_size;
	uint64_t max_objects, table_slots; /* geometry, fixed */
	uint64_t capacity;
	uint64_t next_gen; /* atomic, no lock */
	uint64_t clock;
	uint64_t count, used;
	uint32_t lru_head, lru_tail;
	uint32_t free_head, fresh; /* entries [fresh, max) never used */
	uint32_t dirty, clean;
	uint64_t evictions, repairs;
};

static size_t fidx_round(size_t n)
{
	return (n + FILE_PAGE - 1) / FILE_PAGE * FILE_PAGE;
}

static size_t fidx_entries_bytes(uint64_t max)
{
	return fidx_round((size_t)max * sizeof(kvl__fidx_entry));
}

static size_t fidx_size(uint64_t max, uint64_t slots)
{
	return FILE_PAGE + fidx_entries_bytes(max) +
	       fidx_round((size_t)slots * sizeof(uint32_t));
}

/* ------------------------------------------------------- table and lists */

static uint64_t fidx_home(const kvl__fidx *ix, uint64_t h1)
{
	return h1 & ix->slots_mask;
}

uint32_t kvl__fidx_find(const kvl__fidx *ix, uint64_t h1, uint64_t h2)
{
	uint64_t s = fidx_home(ix, h1);
	for (uint64_t n = 0; n <= ix->slots_mask; n++) {
		uint32_t v = ix->table[s];
		if (!v)
			return FIDX_NONE;
		const kvl__fidx_entry *e = &ix->e[v - 1];
		if (e->h1 == h1 && e->h2 == h2)
			return v - 1;
		s = (s + 1) & ix->slots_mask;
	}
	return FIDX_NONE;
}

static void fidx_table_add(kvl__fidx *ix, uint32_t i)
{
	uint64_t s = fidx_home(ix, ix->e[i].h1);
	while (ix->table[s])
		s = (s + 1) & ix->slots_mask;
	ix->table[s] = i + 1;
}

static void fidx_table_del(kvl__fidx *ix, uint32_t i)
{
	uint64_t m = ix->slots_mask, s = fidx_home(ix, ix->e[i].h1);
	for (uint64_t n = 0; ix->table[s] != i + 1; n++) {
		if (n > m)
			return; /* not in the table (only in a repair) */
		s = (s + 1) & m;
	}
	ix->table[s] = 0;
	/* Backward shift: pull later entries of the run into the hole unless
	 * their home lies cyclically in (hole, j]. */
	for (uint64_t j = (s + 1) & m; ix->table[j]; j = (j + 1) & m) {
		uint64_t k = fidx_home(ix, ix->e[ix->table[j] - 1].h1);
		int stays = s <= j ? (s < k && k <= j) : (s < k || k <= j);
		if (stays)
			continue;
		ix->table[s] = ix->table[j];
		ix->table[j] = 0;
		s = j;
	}
}

static void fidx_list_del(kvl__fidx *ix, uint32_t i)
{
	kvl__fidx_entry *e = &ix->e[i];
	if (e->prev != FIDX_NONE)
		ix->e[e->prev].next = e->next;
	else
		ix->h->lru_head = e->next;
	if (e->next != FIDX_NONE)
		ix->e[e->next].prev = e->prev;
	else
		ix->h->lru_tail = e->prev;
	e->prev = e->next = FIDX_NONE;
}

static void fidx_list_push(kvl__fidx *ix, uint32_t i)
{
	kvl__fidx_entry *e = &ix->e[i];
	e->prev = FIDX_NONE;
	e->next = ix->h->lru_head;
	if (e->next != FIDX_NONE)
		ix->e[e->next].prev = i;
	else
		ix->h->lru_tail = i;
	ix->h->lru_head = i;
}

void kvl__fidx_touch(kvl__fidx *ix, uint32_t i)
{
	ix->e[i].atime = ++ix->h->clock;
	if (ix->h->lru_head != i) {
		fidx_list_del(ix, i);
		fidx_list_push(ix, i);
	}
}

uint32_t kvl__fidx_insert(kvl__fidx *ix, uint64_t h1, uint64_t h2,
                          uint64_t gen, uint64_t len)
{
	struct kvl__fidx_hdr *h = ix->h;
	uint32_t i = h->free_head;
	if (i != FIDX_NONE)
		h->free_head = ix->e[i].next;
	else
		i = h->fresh++; /* make_room left count < max_objects */
	ix->e[i] = (kvl__fidx_entry){.h1 = h1, .h2 = h2, .gen = gen,
	                             .len = len, .atime = ++h->clock};
	fidx_table_add(ix, i);
	fidx_list_push(ix, i);
	h->count++;
	h->used += kvl__file_cost(len);
	return i;
}

uint64_t kvl__fidx_unlink(kvl__fidx *ix, uint32_t i)
{
	struct kvl__fidx_hdr *h = ix->h;
	kvl__fidx_entry *e = &ix->e[i];
	uint64_t gen = e->gen;
	fidx_table_del(ix, i);
	fidx_list_del(ix, i);
	h->count--;
	h->used -= kvl__file_cost(e->len);
	e->gen = 0;
	e->next = h->free_head;
	h->free_head = i;
	return gen;
}

int kvl__fidx_evict_one(kvl__fidx *ix, kvl__fidx_victim *v)
{
	uint32_t i = ix->h->lru_tail;
	if (i == FIDX_NONE)
		return 0;
	ix->h->evictions++;
	v->h1 = ix->e[i].h1;
	v->h2 = ix->e[i].h2;
	v->len = ix->e[i].len;
	v->gen = kvl__fidx_unlink(ix, i);
	return 1;
}

int kvl__fidx_make_room(kvl__fidx *ix, uint64_t cost,
                        kvl__fidx_victim *victims, size_t max,
                        size_t *n_victims)
{
	struct kvl__fidx_hdr *h = ix->h;
	if (cost > h->capacity)
		return KVL_ERANGE;
	while (h->used + cost > h->capacity || h->count >= h->max_objects) {
		if (*n_victims == max)
			return 1; /* the caller disposes of them, then again */
		if (!kvl__fidx_evict_one(ix, &victims[*n_victims]))
			return KVL_EFULL; /* cannot happen: used > 0 */
		(*n_victims)++;
	}
	return 0;
}

uint64_t kvl__fidx_new_gen(kvl__fidx *ix)
{
	return __atomic_fetch_add(&ix->h->next_gen, 1, __ATOMIC_RELAXED);
}

void kvl__fidx_counts(const kvl__fidx *ix, uint64_t *objects,
                      uint64_t *bytes, uint64_t *capacity)
{
	*objects = ix->h->count;
	*bytes = ix->h->used;
	*capacity = ix->h->capacity;
}

static int fidx_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int kvl__fidx_live_gens(const kvl__fidx *ix, uint64_t **out, size_t *n)
{
	size_t cap = ix->h->count, k = 0;
	uint64_t *g = malloc((cap ? cap : 1) * sizeof *g);
	if (!g)
		return KVL_ENOMEM;
	for (uint32_t i = 0; i < ix->h->fresh && k < cap; i++)
		if (ix->e[i].gen)
			g[k++] = ix->e[i].gen;
	qsort(g, k, sizeof *g, fidx_cmp_u64);
	*out = g;
	*n = k;
	return 0;
}

/* ---------------------------------------------------------------- repair */

typedef struct fidx_age {
	uint64_t atime;
	uint32_t i;
} fidx_age;

static int fidx_cmp_age(const void *a, const void *b)
{
	const fidx_age *x = a, *y = b;
	return x->atime < y->atime ? -1 : x->atime > y->atime;
}

/* Rebuilds the table, the LRU list (by last use), the free list and the
 * counts from the entries that look sane. Out of memory: every entry goes
 * (the sweeper then removes their files). */
static void fidx_repair(kvl__fidx *ix)
{
	struct kvl__fidx_hdr *h = ix->h;
	uint64_t max = h->max_objects;
	fidx_age *age = malloc((size_t)max * sizeof *age);
	size_t n = 0;
	uint64_t clock = 0;
	for (uint32_t i = 0; i < max; i++) {
		kvl__fidx_entry *e = &ix->e[i];
		if (age && e->gen && e->gen < h->next_gen &&
		    kvl__file_cost(e->len) <= h->capacity) {
			age[n++] = (fidx_age){e->atime, i};
			clock = e->atime > clock ? e->atime : clock;
		} else {
			e->gen = 0;
		}
	}
	if (age)
		qsort(age, n, sizeof *age, fidx_cmp_age);
	memset(ix->table, 0, (size_t)(ix->slots_mask + 1) * sizeof(uint32_t));
	h->lru_head = h->lru_tail = FIDX_NONE;
	h->count = h->used = 0;
	for (size_t k = 0; k < n; k++) { /* oldest first: newest ends at head */
		kvl__fidx_entry *e = &ix->e[age[k].i];
		uint32_t dup = kvl__fidx_find(ix, e->h1, e->h2);
		if (dup != FIDX_NONE) { /* one key twice: the older goes */
			fidx_table_del(ix, dup);
			fidx_list_del(ix, dup);
			h->count--;
			h->used -= kvl__file_cost(ix->e[dup].len);
			ix->e[dup].gen = 0;
		}
		fidx_table_add(ix, age[k].i);
		fidx_list_push(ix, age[k].i);
		h->count++;
		h->used += kvl__file_cost(e->len);
	}
	h->free_head = FIDX_NONE;
	for (uint64_t i = max; i-- > 0;)
		if (!ix->e[i].gen) {
			ix->e[i].next = h->free_head;
			h->free_head = (uint32_t)i;
		}
	h->fresh = (uint32_t)max;
	if (clock >= h->clock)
		h->clock = clock + 1;
	h->repairs++;
	ix->repairs++;
	free(age);
}

/* --------------------------------------------------------------- locking */

int kvl__fidx_lock(kvl__fidx *ix)
{
	if (getpid() != ix->pid)
		return KVL_EINVAL;
	pthread_mutex_lock(&ix->mu);
	while (flock(ix->fd, LOCK_EX) != 0)
		if (errno != EINTR) {
			pthread_mutex_unlock(&ix->mu);
			return KVL_EIO;
		}
	if (__atomic_load_n(&ix->h->dirty, __ATOMIC_ACQUIRE))
		fidx_repair(ix); /* the last holder died holding it */
	__atomic_store_n(&ix->h->dirty, 1, __ATOMIC_RELEASE);
	return 0;
}

void kvl__fidx_unlock(kvl__fidx *ix)
{
	__atomic_store_n(&ix->h->dirty, 0, __ATOMIC_RELEASE);
	flock(ix->fd, LOCK_UN);
	pthread_mutex_unlock(&ix->mu);
}

/* ------------------------------------------------------------ open, close */

static void fidx_init_header(struct kvl__fidx_hdr *h, uint64_t max,
                             uint64_t slots, uint64_t capacity)
{
	memset(h, 0, sizeof *h);
	memcpy(h->magic, FIDX_MAGIC, 8);
	h->version = FIDX_VERSION;
	h->hdr_size = FILE_PAGE;
	h->max_objects = max;
	h->table_slots = slots;
	h->capacity = capacity;
	h->next_gen = 1;
	h->lru_head = h->lru_tail = h->free_head = FIDX_NONE;
}

/* The directories object files live in (made by the opener alone). */
static int fidx_make_dirs(const char *dir, char *errbuf, size_t errlen)
{
	char p[PATH_MAX];
	static const char *const top[] = {"data", "tmp"};
	for (int t = 0; t < 2; t++) {
		snprintf(p, sizeof p, "%s/%s", dir, top[t]);
		if (mkdir(p, 0755) && errno != EEXIST)
			return kvl__fail_buf(errbuf, errlen, KVL_EIO,
			                     "file: cannot make %s: %s", p,
			                     strerror(errno));
	}
	for (int x = 0; x < 256; x++) {
		snprintf(p, sizeof p, "%s/data/%02x", dir, x);
		if (mkdir(p, 0755) && errno != EEXIST)
			return kvl__fail_buf(errbuf, errlen, KVL_EIO,
			                     "file: cannot make %s: %s", p,
			                     strerror(errno));
	}
	return 0;
}

static int fidx_map(kvl__fidx *ix, size_t len, char *errbuf, size_t errlen,
                    const char *path)
{
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ix->fd,
	               0);
	if (m == MAP_FAILED)
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "file: cannot map %s (%zu bytes): %s", path,
		                     len, strerror(errno));
	ix->map_len = len;
	ix->h = m;
	ix->e = (kvl__fidx_entry *)(void *)((char *)m + FILE_PAGE);
	ix->table = (uint32_t *)(void *)((char *)m + FILE_PAGE +
	                                 fidx_entries_bytes(ix->h->max_objects));
	ix->slots_mask = ix->h->table_slots - 1;
	return 0;
}

/* Makes a new index of max entries in the empty file ix->fd. */
static int fidx_create(kvl__fidx *ix, const char *path, uint64_t capacity,
                       uint64_t max, char *errbuf, size_t errlen)
{
	uint64_t slots = 1;
	while (slots < 2 * max)
		slots <<= 1;
	size_t len = fidx_size(max, slots);
	if (ftruncate(ix->fd, (off_t)len))
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "file: cannot size %s to %zu bytes: %s",
		                     path, len, strerror(errno));
	struct kvl__fidx_hdr h;
	fidx_init_header(&h, max, slots, capacity);
	if (kvl__fio_write(ix->fd, &h, sizeof h, 0))
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "file: cannot write %s: %s", path,
		                     strerror(errno));
	ix->created = 1;
	return fidx_map(ix, len, errbuf, errlen, path);
}

/* Maps an existing index after checking that it is one of ours. */
static int fidx_attach(kvl__fidx *ix, const char *path, off_t size,
                       char *errbuf, size_t errlen)
{
	struct kvl__fidx_hdr h;
	ssize_t r = pread(ix->fd, &h, sizeof h, 0);
	if (r != (ssize_t)sizeof h || memcmp(h.magic, FIDX_MAGIC, 8) ||
	    h.version != FIDX_VERSION || h.hdr_size != FILE_PAGE ||
	    h.max_objects < 1 || h.max_objects > FIDX_MAX_OBJECTS ||
	    h.table_slots < 2 * h.max_objects ||
	    (h.table_slots & (h.table_slots - 1)) ||
	    (uint64_t)size != fidx_size(h.max_objects, h.table_slots))
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "file: %s is not a kvlink file-store index "
		                     "of version %u (or it is damaged); remove "
		                     "the directory's kvlink.* files, data/ and "
		                     "tmp/ to start afresh",
		                     path, FIDX_VERSION);
	return fidx_map(ix, (size_t)size, errbuf, errlen, path);
}

int kvl__fidx_open(kvl__fidx *ix, const char *dir, uint64_t capacity,
                   uint64_t max_objects, char *note, size_t note_len,
                   char *errbuf, size_t errlen)
{
	char lpath[PATH_MAX], ipath[PATH_MAX];
	int rc;
	memset(ix, 0, sizeof *ix);
	ix->lock_fd = ix->fd = -1;
	note[0] = '\0';
	snprintf(lpath, sizeof lpath, "%s/kvlink.lock", dir);
	snprintf(ipath, sizeof ipath, "%s/kvlink.index", dir);

	ix->lock_fd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (ix->lock_fd < 0) {
		rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                   "file: cannot open %s: %s", lpath,
		                   strerror(errno));
		goto fail;
	}
	int alone = flock(ix->lock_fd, LOCK_EX | LOCK_NB) == 0;
	if (!alone)
		while (flock(ix->lock_fd, LOCK_SH) != 0)
			if (errno != EINTR) {
				rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
				                   "file: cannot lock %s: %s",
				                   lpath, strerror(errno));
				goto fail;
			}
	ix->fd = open(ipath, O_RDWR | O_CLOEXEC | (alone ? O_CREAT : 0), 0644);
	struct stat st;
	if (ix->fd < 0 || fstat(ix->fd, &st)) {
		rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                   "file: cannot open %s: %s", ipath,
		                   strerror(errno));
		goto fail;
	}
	if (st.st_size == 0 && alone) {
		if (!capacity) {
			unlink(ipath); /* alone: the empty file was ours */
			rc = kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                   "file: %s holds no store yet: give its "
			                   "capacity (capacity=SIZE)",
			                   dir);
			goto fail;
		}
		uint64_t max = max_objects;
		if (!max) {
			max = capacity / FIDX_DEFAULT_PER;
			max = max < FIDX_MIN_OBJECTS   ? FIDX_MIN_OBJECTS
			      : max > FIDX_DEFAULT_MAX ? FIDX_DEFAULT_MAX
			                               : max;
		}
		rc = fidx_create(ix, ipath, capacity, max, errbuf, errlen);
	} else {
		rc = fidx_attach(ix, ipath, st.st_size, errbuf, errlen);
	}
	if (rc < 0)
		goto fail;
	struct kvl__fidx_hdr *h = ix->h;
	if (max_objects && max_objects != h->max_objects) {
		rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                   "file: %s was made for max_objects=%llu, "
		                   "not %llu (the index's size is fixed when it "
		                   "is made)",
		                   dir, (unsigned long long)h->max_objects,
		                   (unsigned long long)max_objects);
		goto fail;
	}
	ix->pid = getpid();
	pthread_mutex_init(&ix->mu, NULL);
	if (alone) {
		rc = fidx_make_dirs(dir, errbuf, errlen);
		if (rc < 0)
			goto fail_mu;
		if (!ix->created && (!h->clean || h->dirty)) {
			fidx_repair(ix);
			h->dirty = 0;
			snprintf(note, note_len,
			         "file: %s was not closed cleanly: its index was "
			         "repaired (%llu objects kept)",
			         dir, (unsigned long long)h->count);
		}
		h->clean = 0; /* on disk before any change */
		msync(h, FILE_PAGE, MS_SYNC);
		ix->sweep_below = h->next_gen;
	}
	if (capacity && capacity != h->capacity) {
		if ((rc = kvl__fidx_lock(ix)) < 0)
			goto fail_mu;
		if (!note[0])
			snprintf(note, note_len,
			         "file: %s: capacity changed from %llu to %llu "
			         "bytes for every process",
			         dir, (unsigned long long)h->capacity,
			         (unsigned long long)capacity);
		h->capacity = capacity;
		kvl__fidx_unlock(ix);
	}
	if (alone)
		flock(ix->lock_fd, LOCK_SH); /* others may open now */
	return 0;

fail_mu:
	pthread_mutex_destroy(&ix->mu);
fail:
	if (ix->h)
		munmap(ix->h, ix->map_len);
	if (ix->fd >= 0)
		close(ix->fd);
	if (ix->lock_fd >= 0)
		close(ix->lock_fd);
	ix->h = NULL;
	return rc;
}

void kvl__fidx_close(kvl__fidx *ix)
{
	if (!ix->h)
		return;
	/* The last one out syncs the index and marks it clean. */
	if (getpid() == ix->pid &&
	    flock(ix->lock_fd, LOCK_EX | LOCK_NB) == 0 && !ix->h->dirty) {
		msync(ix->h, ix->map_len, MS_SYNC);
		ix->h->clean = 1;
		msync(ix->h, FILE_PAGE, MS_SYNC);
	}
	munmap(ix->h, ix->map_len);
	close(ix->fd);
	close(ix->lock_fd);
	pthread_mutex_destroy(&ix->mu);
	ix->h = NULL;
}
