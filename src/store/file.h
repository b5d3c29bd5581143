/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.h — the file store's parts (internal to file.c, file_index.c and
 * file_io.c): the shared index of a store directory and the reads and
 * writes of object files.
 *
 * A store directory holds:
 *   kvlink.lock   every process that has the store open holds a shared
 *                 flock on it; the one that gets it exclusively is alone
 *                 (it may check, repair and sweep what dead ones left);
 *   kvlink.index  the shared index, mapped by every process (file_index.c);
 *   data/XX/G     object files, G the object's generation in 16 hex digits
 *                 and XX its low byte: immutable once linked into place;
 *   tmp/G         objects being written, where the file system lacks
 *                 O_TMPFILE (elsewhere they have no name until published).
 */
#ifndef KVL_FILE_H
#define KVL_FILE_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/internal.h"

/* ---------------------------------------------------------- object files */

/* An object file: one header page, then the payload padded to FILE_PAGE
 * bytes, so every read and write is page-aligned for O_DIRECT. */
#define FILE_PAGE 4096u
#define FILE_KEY_AT 64u   /* the key's offset in the header page */
#define FILE_SUMS_AT 384u /* the block sums' offset */
#define FILE_MAX_SUMS ((FILE_PAGE - FILE_SUMS_AT) / 8u) /* 464 */

/* The bytes of an object file of len payload bytes. */
static inline uint64_t kvl__file_size(uint64_t len)
{
	return FILE_PAGE + (len + FILE_PAGE - 1) / FILE_PAGE * FILE_PAGE;
}

/* What an object counts against capacity=: its bytes and its header page
 * (the file's padding, under a page, is not counted). */
static inline uint64_t kvl__file_cost(uint64_t len)
{
	return FILE_PAGE + len;
}

/* ----------------------------------------------------------- shared index */

#define FIDX_NONE UINT32_MAX

/* One object in the index: 48 bytes. gen 0: a free entry. */
typedef struct kvl__fidx_entry {
	uint64_t h1, h2; /* XXH3-128 of the key */
	uint64_t gen;    /* names the object file; unique per directory */
	uint64_t len;    /* payload bytes */
	uint64_t atime;  /* the index clock at its last use (for repair) */
	uint32_t prev, next; /* LRU list (most recent first), or free list */
} kvl__fidx_entry;

struct kvl__fidx_hdr;

/* A process's view of the shared index. */
typedef struct kvl__fidx {
	pthread_mutex_t mu;     /* this process's threads, before the flock */
	int lock_fd;            /* kvlink.lock (shared flock while open) */
	int fd;                 /* kvlink.index (exclusive flock per call) */
	pid_t pid;              /* the opener: a forked child must reopen */
	struct kvl__fidx_hdr *h;
	kvl__fidx_entry *e;
	uint32_t *table;        /* entry index + 1, or 0: empty */
	size_t map_len;
	uint64_t slots_mask;
	uint64_t sweep_below;   /* generations below it are of dead writers
	                         * (0: this process did not open alone) */
	int created;            /* this open made the index */
	uint64_t repairs;       /* repairs this process ran */
} kvl__fidx;

/* Opens (or creates) the index of directory `dir`. capacity 0: keep the
 * directory's (required when the index is new). max_objects 0: keep the
 * directory's, or derive one from the capacity. *note gets what changed
 * (a repair, a new capacity), or "". Errors with the message in errbuf. */
int kvl__fidx_open(kvl__fidx *ix, const char *dir, uint64_t capacity,
                   uint64_t max_objects, char *note, size_t note_len,
                   char *errbuf, size_t errlen);
/* Closes; the last process to close marks the index clean (synced). */
void kvl__fidx_close(kvl__fidx *ix);

/* Takes the index for this thread and process (repairing it first when
 * the last holder died in the middle of a change). KVL_EINVAL from a
 * process forked after the open; KVL_EIO when the lock fails. */
int kvl__fidx_lock(kvl__fidx *ix);
void kvl__fidx_unlock(kvl__fidx *ix);

/* Under the lock: */
uint32_t kvl__fidx_find(const kvl__fidx *ix, uint64_t h1, uint64_t h2);
void kvl__fidx_touch(kvl__fidx *ix, uint32_t i);
/* Makes room for an object of cost bytes (one entry and its bytes),
 * evicting least recently used objects: their generations go to
 * victims[] (at most max, *n_victims of them). KVL_ERANGE when the cost
 * exceeds the capacity; KVL_EFULL when more than max would have to go. */
int kvl__fidx_make_room(kvl__fidx *ix, uint64_t cost, uint64_t *victims,
                        size_t max, size_t *n_victims);
/* Links a new object (after make_room); returns its entry. */
uint32_t kvl__fidx_insert(kvl__fidx *ix, uint64_t h1, uint64_t h2,
                          uint64_t gen, uint64_t len);
/* Unlinks entry i; returns its generation. */
uint64_t kvl__fidx_unlink(kvl__fidx *ix, uint32_t i);
/* Evicts the least recently used object; its generation, or 0. */
uint64_t kvl__fidx_evict_one(kvl__fidx *ix);

/* Without the lock (atomic): a generation no one else ever gets. */
uint64_t kvl__fidx_new_gen(kvl__fidx *ix);
/* Snapshot (under the lock): objects, bytes and capacity. */
void kvl__fidx_counts(const kvl__fidx *ix, uint64_t *objects,
                      uint64_t *bytes, uint64_t *capacity);
/* Under the lock: the generations of every linked object, sorted, into a
 * new array (*out, free it), or KVL_ENOMEM. */
int kvl__fidx_live_gens(const kvl__fidx *ix, uint64_t **out, size_t *n);

/* --------------------------------------------------------------- file I/O */

/* One positioned read or write: res gets the bytes moved or -errno. */
typedef struct kvl__fio_req {
	int fd;
	void *buf;
	size_t len;
	uint64_t off;
	ssize_t res;
} kvl__fio_req;

struct kvl__fio_ring;

typedef struct kvl__fio {
	int uring;                 /* reads go through io_uring rings */
	pthread_mutex_t mu;        /* guards the free rings */
	pthread_cond_t cv;
	struct kvl__fio_ring *free; /* rings no call is using */
	unsigned rings;            /* rings made, at most FIO_RINGS */
} kvl__fio;

/* want: 1 io_uring (when it can), 0 preadv. *note gets why io_uring is
 * not used when it was wanted (refused by the kernel, not built), or "". */
void kvl__fio_init(kvl__fio *io, int want, char *note, size_t note_len);
void kvl__fio_destroy(kvl__fio *io);
/* Called once for each request i as it completes (its res set), on the
 * thread that called kvl__fio_read. */
typedef void (*kvl__fio_done)(void *ctx, size_t i);

/* Carries out n reads at once; each req's res says how it went. */
void kvl__fio_read(kvl__fio *io, kvl__fio_req *reqs, size_t n,
                   kvl__fio_done done, void *ctx);
/* The whole of buf at off (restarting after short writes): 0 or -errno. */
int kvl__fio_write(int fd, const void *buf, size_t len, uint64_t off);

#endif /* KVL_FILE_H */
