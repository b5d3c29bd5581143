/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_put.c — the file store's put: each absent key's object is built as
 * a file image (header page with the key, the block sums and the header's
 * own sum; the payload padded to a page) in a bounce buffer, written whole
 * under no name (O_TMPFILE; elsewhere under tmp/G) and linked into place
 * as data/XX/G, a name no other object ever had; only then is it entered
 * in the index, so no reader can find a partial object.
 *
 * A put that finds its key entered meanwhile unlinks its own file
 * (KVL_PUT_PRESENT). Room is made by evicting the least recently used
 * objects from the index first; their files are disposed of after the
 * lock is let go (file_evict.c: handed down, then unlinked; a reader that
 * found one still reads the same bytes from its open file). A full file
 * system evicts what the capacity alone did not, once, and tries again.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "store/backend.h"
#include "store/file.h"


/* Writes the object image buf (size bytes) as the file of generation gen,
 * published whole under its name or not at all: 0 or -errno. */
static int file_publish(struct file_store *f, uint64_t gen, const void *buf,
                        size_t size)
{
	char final[PATH_MAX], p[PATH_MAX];
	int flags = O_WRONLY | O_CLOEXEC | (f->direct ? O_DIRECT : 0), rc;
	kvl__file_path(f, gen, final, sizeof final);
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
	kvl__fidx_victim v[FILE_VICTIMS];
	size_t n = 0;
	if (kvl__file_lock(store, f, "put") < 0)
		return 0;
	uint64_t objects, before, after, cap;
	kvl__fidx_counts(&f->ix, &objects, &before, &cap);
	after = before;
	while (before - after < need && n < FILE_VICTIMS &&
	       kvl__fidx_evict_one(&f->ix, &v[n])) {
		kvl__fidx_counts(&f->ix, &objects, &after, &cap);
		n++;
	}
	kvl__file_evicted(f, v, n);
	kvl__fidx_unlock(&f->ix);
	kvl__file_dispose(f, v, n);
	return n;
}

/* Fails a put of key whose object of len bytes (over: of more than that)
 * does not fit the capacity cap: returns rc, the message set. */
static int file_no_room(kvl_store *store, int rc, const char *key,
                        uint64_t len, int over, uint64_t cap)
{
	return kvl__fail(&store->err, rc,
	                 "kvl_store_put: key \"%s\": an object of %s%llu "
	                 "bytes (%llu with its header) does not fit the "
	                 "capacity of %llu bytes",
	                 key, over ? "over " : "", (unsigned long long)len,
	                 (unsigned long long)kvl__file_cost(len),
	                 (unsigned long long)cap);
}

/* Enters a published object (generation gen) under its key: STORED, or
 * PRESENT when the key got in first (the file is unlinked then). Room is
 * made FILE_VICTIMS victims at a time, each lot disposed of after the
 * lock (their spills may call other stores). */
static int file_enter(kvl_store *store, struct file_store *f, uint64_t h1,
                      uint64_t h2, uint64_t gen, uint64_t len, const char *key)
{
	kvl__fidx_victim v[FILE_VICTIMS];
	for (;;) {
		size_t nv = 0;
		int rc = kvl__file_lock(store, f, "kvl_store_put");
		if (rc < 0) {
			kvl__file_unlink_gens(f, &gen, 1);
			return rc;
		}
		if (kvl__fidx_find(&f->ix, h1, h2) != FIDX_NONE) {
			kvl__fidx_unlock(&f->ix);
			kvl__file_unlink_gens(f, &gen, 1);
			return KVL_PUT_PRESENT;
		}
		rc = kvl__fidx_make_room(&f->ix, kvl__file_cost(len), v,
		                         FILE_VICTIMS, &nv);
		if (rc == 0)
			kvl__fidx_insert(&f->ix, h1, h2, gen, len);
		uint64_t cap = 0, objects, bytes;
		kvl__fidx_counts(&f->ix, &objects, &bytes, &cap);
		kvl__file_evicted(f, v, nv);
		kvl__fidx_unlock(&f->ix);
		kvl__file_dispose(f, v, nv);
		if (rc == 0)
			return KVL_PUT_STORED;
		if (rc < 0) {
			kvl__file_unlink_gens(f, &gen, 1);
			return file_no_room(store, rc, key, len, 0, cap);
		}
		/* rc 1: more victims to go */
	}
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
	uint32_t shift = kvl__file_block_shift(len);
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
	h->hdr_sum = kvl__file_hdr_sum(buf);
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
	if (kvl__file_lock(store, f, "kvl_store_put") == 0) {
		kvl__fidx_counts(&f->ix, &objects, &bytes, &cap);
		kvl__fidx_unlock(&f->ix);
	}
	if (too_big || kvl__file_cost(len) > cap)
		return file_no_room(store, KVL_ERANGE, key, len, too_big,
		                    cap);
	kvl__file_key_hash(key, kl, &h1, &h2);
	uint64_t cost = kvl__file_size(len); /* the file's bytes */
	size_t bcap;
	uint8_t *buf = kvl__file_bounce(f, (size_t)cost, &bcap);
	if (!buf)
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "kvl_store_put: key \"%s\": out of memory for "
		                 "%llu bytes", key, (unsigned long long)cost);
	uint64_t gen = kvl__fidx_new_gen(&f->ix);
	file_image(buf, cost, pc, np, len, gen, h1, h2, key, kl);
	int rc = file_publish(f, gen, buf, (size_t)cost);
	if (rc == -ENOSPC && file_free_disk(store, f, cost))
		rc = file_publish(f, gen, buf, (size_t)cost);
	kvl__file_bounce_put(f, buf, bcap);
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

int kvl__file_put(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct file_store *f = impl;
	size_t pc_at = 0;
	enum { PENDING = 2 };
	file_hashes hs;
	for (size_t base = 0; base < b->n; base += FILE_CHUNK) {
		size_t cn = kvl__file_hash_chunk(b, base, &hs);
		/* Keys already present are skipped before anything is
		 * written. */
		int rc = kvl__file_lock(store, f, b->fn);
		if (rc < 0)
			return kvl__file_fail_rest(b, base, rc);
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
