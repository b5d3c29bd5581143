/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_evict.c — what becomes of the objects a file store evicts: their
 * files are unlinked, and, when a wrapper asked for the victims (a tier:
 * store spilling them into the tier below, kvl__store_on_evict), each is
 * first read back whole, checked as a get checks it, and handed over.
 *
 * The index keeps keys by hash only, so the hook learns of a victim by
 * its key's hash under the index lock, the moment it leaves the index
 * (kvl__file_evicted), and gets its key and bytes from the file after the
 * lock (kvl__file_dispose): the file is immutable and only the evicting
 * process unlinks it. A victim that cannot be read back whole and intact
 * is handed over without a key (nothing to spill) and its file unlinked:
 * damage never moves down.
 *
 * The hook belongs to this handle: victims go down from whichever process
 * evicted them, through that process's tiers. A reader in another process
 * may miss a key between its eviction here and the end of its spill.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "store/file.h"

void kvl__file_evicted(struct file_store *f, const kvl__fidx_victim *v,
                       size_t n)
{
	if (f->hook)
		for (size_t i = 0; i < n; i++)
			f->hook->unlinked(f->hook->ctx,
			                  kvl__evict_hash_of(v[i].h1));
}

/* Reads victim v's file whole into buf (its size bytes) and checks it: 1
 * when the header and every block hold, its key copied into key. */
static int file_read_back(struct file_store *f, const kvl__fidx_victim *v,
                          uint8_t *buf, uint64_t size, char *key)
{
	char p[PATH_MAX];
	kvl__file_path(f, v->gen, p, sizeof p);
	int fd = open(p, O_RDONLY | O_CLOEXEC | (f->direct ? O_DIRECT : 0));
	if (fd < 0)
		return 0;
	ssize_t got = kvl__fio_pread_all(fd, buf, (size_t)size, 0);
	close(fd);
	if (got != (ssize_t)size ||
	    kvl__file_hdr_check(buf, v->gen, v->len, v->h1, v->h2, NULL, 0))
		return 0;
	const file_hdr *h = (const file_hdr *)(void *)buf;
	uint64_t bs = 1ull << h->block_shift;
	if (!kvl__file_blocks_ok(buf, v->len, buf + FILE_PAGE, 0,
	                         (v->len + bs - 1) / bs))
		return 0;
	memcpy(key, buf + FILE_KEY_AT, h->key_len);
	key[h->key_len] = '\0';
	return 1;
}

void kvl__file_dispose(struct file_store *f, const kvl__fidx_victim *v,
                       size_t n)
{
	for (size_t i = 0; f->hook && i < n; i++) {
		uint64_t size = kvl__file_size(v[i].len);
		char key[KVL_KEY_MAX];
		size_t cap = 0;
		uint8_t *buf = size <= SIZE_MAX
		                       ? kvl__file_bounce(f, (size_t)size, &cap)
		                       : NULL;
		int ok = buf && file_read_back(f, &v[i], buf, size, key);
		f->hook->fn(f->hook->ctx, kvl__evict_hash_of(v[i].h1),
		            ok ? key : NULL, ok ? buf + FILE_PAGE : NULL,
		            ok ? (size_t)v[i].len : 0);
		kvl__file_bounce_put(f, buf, cap);
	}
	for (size_t i = 0; i < n; i++)
		kvl__file_unlink_gens(f, &v[i].gen, 1);
	f->evictions += n;
}
