/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.h — the file store's parts (internal to src/store/file*.c): the
 * shared index of a store directory (file_index.c), the reads and writes
 * of object files (file_io.c), and the store itself, whose operations are
 * split by concept: file.c (open, close, stats, exists, remove and the
 * helpers the others share, with the design), file_get.c, file_put.c and
 * file_sweep.c.
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

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/internal.h"
#include "store/backend.h"

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
/* An object evicted from the index: what disposing of its file needs. */
typedef struct kvl__fidx_victim {
	uint64_t gen, h1, h2, len;
} kvl__fidx_victim;

/* Makes room for an object of cost bytes (one entry and its bytes),
 * evicting least recently used objects into victims[] (at most max,
 * *n_victims of them). KVL_ERANGE when the cost exceeds the capacity;
 * 1 when more than max would have to go (dispose of them, then again). */
int kvl__fidx_make_room(kvl__fidx *ix, uint64_t cost,
                        kvl__fidx_victim *victims, size_t max,
                        size_t *n_victims);
/* Links a new object (after make_room); returns its entry. */
uint32_t kvl__fidx_insert(kvl__fidx *ix, uint64_t h1, uint64_t h2,
                          uint64_t gen, uint64_t len);
/* Unlinks entry i; returns its generation. */
uint64_t kvl__fidx_unlink(kvl__fidx *ix, uint32_t i);
/* Evicts the least recently used object into *v: 1, or 0 when empty. */
int kvl__fidx_evict_one(kvl__fidx *ix, kvl__fidx_victim *v);

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
struct kvl__fio_pool;

typedef struct kvl__fio {
	int uring;                 /* reads go through io_uring rings */
	pthread_mutex_t mu;        /* guards the free rings */
	pthread_cond_t cv;
	struct kvl__fio_ring *free; /* rings no call is using */
	unsigned rings;            /* rings made, at most FIO_RINGS */
	struct kvl__fio_pool *pool; /* (mu) pread threads, made on need */
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
/* pread until len bytes, end of file or an error: bytes read or -errno. */
ssize_t kvl__fio_pread_all(int fd, void *buf, size_t len, uint64_t off);
/* file_pool.c: kvl__fio_read's preads, on a few threads (the caller's
 * `done` on the caller's thread as each completes); stop joins them. */
void kvl__fio_pool_read(kvl__fio *io, kvl__fio_req *reqs, size_t n,
                        kvl__fio_done done, void *ctx);
void kvl__fio_pool_stop(kvl__fio *io);
/* The whole of buf at off (restarting after short writes): 0 or -errno. */
int kvl__fio_write(int fd, const void *buf, size_t len, uint64_t off);

/* ------------------------------------------------------------ the store */

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

/* Verified header pages of objects read lately (file_hdrs.c), so that a
 * range that does not start at the object's first block need not read its
 * header page again. */
#define FILE_HDR_BITS 10 /* 1024 pages: 4 MiB, made on the first keep */
struct file_hdr_slot;
struct file_hdr_cache {
	pthread_mutex_t mu;
	struct file_hdr_slot *slot; /* (mu) */
	atomic_ullong hits, misses; /* header pages copied / read */
};

void kvl__file_hdrs_init(struct file_hdr_cache *c);
void kvl__file_hdrs_destroy(struct file_hdr_cache *c);
/* 1 and the page of object (gen, h1, h2) copied into out when the cache
 * has it, else 0 (counted either way). */
int kvl__file_hdrs_get(struct file_hdr_cache *c, uint64_t gen, uint64_t h1,
                       uint64_t h2, uint8_t *out);
/* Keeps a copy of a header page that passed its checks. */
void kvl__file_hdrs_keep(struct file_hdr_cache *c, uint64_t gen,
                         uint64_t h1, uint64_t h2, const uint8_t *page);
/* Forgets generation gen's page (its object failed a check). */
void kvl__file_hdrs_forget(struct file_hdr_cache *c, uint64_t gen);

/* Objects held for a batch (file_hold.c): each keeps an open descriptor
 * of its file, so that the batch's reads need no open and still find an
 * object evicted or removed since. */
struct file_held;
struct file_holds {
	pthread_mutex_t mu;
	struct file_held **slot; /* chains; n_slots a power of two (mu) */
	size_t n_slots, n;       /* (mu) */
	size_t max;              /* keys held at most (immutable) */
};

void kvl__file_holds_init(struct file_holds *h);
void kvl__file_holds_destroy(struct file_holds *h); /* closes them all */
/* For each key (h1[x], h2[x]) of n that is held: its generation, length
 * and a new descriptor of its file (the caller closes it) in gen[x],
 * len[x] and fd[x]; fd[x] is -1 for the others. One lock for all n. */
void kvl__file_held(struct file_holds *h, const uint64_t *h1,
                    const uint64_t *h2, size_t n, uint64_t *gen,
                    uint64_t *len, int *fd);
int kvl__file_hold(kvl_store *store, void *impl, const kvl__batch *b);
int kvl__file_unhold(kvl_store *store, void *impl, const kvl__batch *b);

/* The threads that check and copy out what a get read (file_check.c). */
#define FILE_CHECKERS 4u
struct file_check_job {
	struct file_check_job *next;
	void (*fn)(void *arg, size_t x);
	void *arg;
	size_t x;
	unsigned *pending; /* the call's jobs not yet done (the pool's mu) */
};
struct file_checkers {
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	struct file_check_job *head, *tail; /* (mu) */
	pthread_t threads[FILE_CHECKERS];
	unsigned n, want;                    /* (mu) started, to start */
	int failed, stop;                    /* (mu) */
};

/* A pool that will start up to `want` threads (0: none). */
void kvl__file_checkers_init(struct file_checkers *p, unsigned want);
void kvl__file_checkers_destroy(struct file_checkers *p);
/* Starts the threads on first use: 1 when there are any (queue jobs),
 * 0 (check on the caller's thread). */
int kvl__file_checkers_on(struct file_checkers *p);
/* Queues j (counted in *j->pending, which the pool's mutex guards). */
void kvl__file_check_queue(struct file_checkers *p, struct file_check_job *j);
/* Returns once *pending is 0, running queued jobs meanwhile. */
void kvl__file_check_wait(struct file_checkers *p, unsigned *pending);

/* One open store. Threads: the index has its own lock (file_index.c), the
 * rings theirs (file_io.c), the bounce buffers `pool.mu`, the header
 * cache, the holds and the checkers their own; counters are atomics; the
 * rest is immutable after open. */
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
	const kvl__evict_hook *hook; /* victims go to it (set before use) */
	struct file_hdr_cache hdrs;
	struct file_holds holds;
	struct file_checkers checkers;
};

/* The smallest block shift that keeps an object's sums in the header. */
static inline uint32_t kvl__file_block_shift(uint64_t len)
{
	uint32_t s = 12;
	while (s < 40 && ((len + (1ull << s) - 1) >> s) > FILE_MAX_SUMS)
		s++;
	return s;
}

/* The hashes of keys [base, base + cn) of a batch (cn <= FILE_CHUNK),
 * taken before the index lock so that it is held for lookups only. */
typedef struct file_hashes {
	uint64_t h1[FILE_CHUNK], h2[FILE_CHUNK];
} file_hashes;

/* The 128-bit hash (XXH3) of key, len bytes, that the index knows it by. */
void kvl__file_key_hash(const char *key, size_t len, uint64_t *h1,
                        uint64_t *h2);
/* Hashes the next chunk of b's keys from base into hs; returns how many
 * (at most FILE_CHUNK). */
size_t kvl__file_hash_chunk(const kvl__batch *b, size_t base,
                            file_hashes *hs);
/* The path of generation gen's object file (data/XX/G) into out. */
void kvl__file_path(const struct file_store *f, uint64_t gen, char *out,
                    size_t len);
/* Unlinks the object files of the n generations g[] (a missing one is
 * no error: it went already). */
void kvl__file_unlink_gens(const struct file_store *f, const uint64_t *g,
                           size_t n);
/* The sum of a header page (XXH3-64, with its hdr_sum field taken as 0;
 * the page is left as it was). */
uint64_t kvl__file_hdr_sum(uint8_t *page);
/* Why header page `page` is not that of the object (gen, len, h1, h2)
 * under key (kl bytes), or NULL when it is. key NULL: any key whose hash
 * is (h1, h2). */
const char *kvl__file_hdr_check(uint8_t *page, uint64_t gen, uint64_t len,
                                uint64_t h1, uint64_t h2, const char *key,
                                size_t kl);
/* 1 when blocks [b0, end) of an object of len bytes, block b0 at p, match
 * their sums in its header page (checked by kvl__file_hdr_check). */
int kvl__file_blocks_ok(const uint8_t *page, uint64_t len, const uint8_t *p,
                        uint64_t b0, uint64_t end);
/* Eviction (file_evict.c). Under the index lock, as victims v[0..n) leave
 * it: tells the hook, if any (kvl__evict_hook's unlinked). */
void kvl__file_evicted(struct file_store *f, const kvl__fidx_victim *v,
                       size_t n);
/* After the lock: hands each victim, read back and checked, to the hook
 * (if any), unlinks its file and counts it. */
void kvl__file_dispose(struct file_store *f, const kvl__fidx_victim *v,
                       size_t n);
/* An aligned buffer of at least need bytes (its size in *cap), from the
 * pool or new; NULL when out of memory. Give it back with
 * kvl__file_bounce_put (p NULL: nothing), which keeps it or frees it. */
void *kvl__file_bounce(struct file_store *f, size_t need, size_t *cap);
void kvl__file_bounce_put(struct file_store *f, void *p, size_t cap);
/* Takes the index (kvl__fidx_lock): 0, or the code with the store's
 * message set (fn names the call), a failure of the whole call. */
int kvl__file_lock(kvl_store *store, struct file_store *f, const char *fn);
/* A call that stopped at key `from`: the rest of b's results get rc;
 * returns rc when nothing was done (the call fails whole), else 0. */
int kvl__file_fail_rest(const kvl__batch *b, size_t from, int rc);

/* The sweeper thread's body (arg: the store): removes what dead writers
 * left (file_sweep.c). It stops early once f->stop is set. */
void *kvl__file_sweeper(void *arg);

/* The operations of file_get.c and file_put.c (kvl__store_ops's get and
 * put). */
int kvl__file_get(kvl_store *store, void *impl, const kvl__batch *b);
int kvl__file_put(kvl_store *store, void *impl, const kvl__batch *b);

#endif /* KVL_FILE_H */
