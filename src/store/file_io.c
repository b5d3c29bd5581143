/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_io.c — the file store's reads and writes: batches of positioned
 * reads through io_uring (liburing), or plain preads where io_uring is not
 * built or the kernel refuses it (a seccomp profile, io_uring_disabled).
 *
 * A ring serves one call at a time, so the store keeps a few (at most
 * FIO_RINGS, made on first need) on a free list guarded by `mu`; a call
 * that finds none free and the limit reached waits for one. A whole batch
 * is queued, submitted with one system call per FIO_DEPTH reads, and
 * reaped, each request handed back to the caller as it completes (so its
 * checks and copies overlap the other reads); a read the ring leaves short
 * is finished with pread. Without io_uring, preads run on a small pool of
 * threads (file_pool.c). Writes are
 * synchronous pwrites: a put's bytes must be in the file before it is
 * published, and its caller waits for that anyway.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvl_config.h"
#include "store/file.h"

#if KVL_HAVE_URING
#include <liburing.h>
#endif

#define FIO_RINGS 8u
#define FIO_DEPTH 64u
#define FIO_PENDING (-((ssize_t)1 << 40)) /* no answer yet */

struct kvl__fio_ring {
#if KVL_HAVE_URING
	struct io_uring ring;
#endif
	struct kvl__fio_ring *next;
};

ssize_t kvl__fio_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t r = pread(fd, (char *)buf + done, len - done,
		                  (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

int kvl__fio_write(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t r = pwrite(fd, (const char *)buf + done, len - done,
		                   (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

#if KVL_HAVE_URING
/* A new ring, or NULL (errno-style code in *err). */
static struct kvl__fio_ring *fio_ring_new(int *err)
{
	struct kvl__fio_ring *r = calloc(1, sizeof *r);
	if (!r) {
		*err = -ENOMEM;
		return NULL;
	}
	*err = io_uring_queue_init(FIO_DEPTH, &r->ring, 0);
	if (*err < 0) {
		free(r);
		return NULL;
	}
	return r;
}

static struct kvl__fio_ring *fio_ring_take(kvl__fio *io)
{
	pthread_mutex_lock(&io->mu);
	for (;;) {
		struct kvl__fio_ring *r = io->free;
		if (r) {
			io->free = r->next;
			pthread_mutex_unlock(&io->mu);
			return r;
		}
		if (io->rings < FIO_RINGS) {
			io->rings++;
			pthread_mutex_unlock(&io->mu);
			int err;
			r = fio_ring_new(&err);
			if (!r) { /* the caller reads with pread this time */
				pthread_mutex_lock(&io->mu);
				io->rings--;
				pthread_mutex_unlock(&io->mu);
			}
			return r;
		}
		pthread_cond_wait(&io->cv, &io->mu);
	}
}

static void fio_ring_give(kvl__fio *io, struct kvl__fio_ring *r)
{
	pthread_mutex_lock(&io->mu);
	r->next = io->free;
	io->free = r;
	pthread_cond_signal(&io->cv);
	pthread_mutex_unlock(&io->mu);
}

/* Request i has its answer from the ring: a short or interrupted read is
 * finished plainly, then the caller hears of it. */
static void fio_complete(kvl__fio_req *reqs, size_t i, int res,
                         kvl__fio_done done, void *ctx)
{
	kvl__fio_req *q = &reqs[i];
	q->res = res == -EINTR || res == -EAGAIN ? 0 : res;
	if (q->res >= 0 && (size_t)q->res < q->len) {
		ssize_t r = kvl__fio_pread_all(q->fd, (char *)q->buf + q->res,
		                          q->len - (size_t)q->res,
		                          q->off + (uint64_t)q->res);
		q->res = r < 0 ? r : q->res + r;
	}
	done(ctx, i);
}

/* The batch through ring r: FIO_DEPTH in flight at most; each request
 * is handed back as it completes, so that the caller's work on one
 * overlaps the reads of the others. */
static void fio_uring_batch(struct io_uring *ring, kvl__fio_req *reqs,
                            size_t n, kvl__fio_done done, void *ctx)
{
	size_t next = 0, finished = 0, inflight = 0;
	for (size_t i = 0; i < n; i++)
		reqs[i].res = FIO_PENDING;
	while (finished < n) {
		while (next < n && inflight < FIO_DEPTH) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			if (!sqe)
				break;
			kvl__fio_req *q = &reqs[next];
			io_uring_prep_read(sqe, q->fd, q->buf, (unsigned)q->len,
			                   q->off);
			io_uring_sqe_set_data64(sqe, next);
			next++;
			inflight++;
		}
		int s = io_uring_submit_and_wait(ring, 1);
		if (s < 0 && s != -EINTR && s != -EAGAIN && s != -EBUSY) {
			/* The ring failed whole: reap what it still returns
			 * (a second at most for each), read the rest plainly. */
			struct io_uring_cqe *c;
			struct __kernel_timespec ts = {.tv_sec = 1};
			while (inflight &&
			       io_uring_wait_cqe_timeout(ring, &c, &ts) == 0) {
				size_t i = (size_t)c->user_data;
				int res = c->res;
				io_uring_cqe_seen(ring, c);
				inflight--;
				fio_complete(reqs, i, res, done, ctx);
			}
			for (size_t i = 0; i < n; i++)
				if (reqs[i].res == FIO_PENDING) {
					reqs[i].res = kvl__fio_pread_all(
						reqs[i].fd, reqs[i].buf,
						reqs[i].len, reqs[i].off);
					done(ctx, i);
				}
			return;
		}
		struct io_uring_cqe *cqe;
		while (io_uring_peek_cqe(ring, &cqe) == 0) {
			size_t i = (size_t)cqe->user_data;
			int res = cqe->res;
			io_uring_cqe_seen(ring, cqe);
			inflight--;
			finished++;
			fio_complete(reqs, i, res, done, ctx);
		}
	}
}
#endif

void kvl__fio_read(kvl__fio *io, kvl__fio_req *reqs, size_t n,
                   kvl__fio_done done, void *ctx)
{
#if KVL_HAVE_URING
	if (io->uring) {
		struct kvl__fio_ring *r = fio_ring_take(io);
		if (r) {
			fio_uring_batch(&r->ring, reqs, n, done, ctx);
			fio_ring_give(io, r);
			return;
		}
	}
#endif
	kvl__fio_pool_read(io, reqs, n, done, ctx);
}

void kvl__fio_init(kvl__fio *io, int want, char *note, size_t note_len)
{
	memset(io, 0, sizeof *io);
	pthread_mutex_init(&io->mu, NULL);
	pthread_cond_init(&io->cv, NULL);
	note[0] = '\0';
	if (!want)
		return;
#if KVL_HAVE_URING
	/* One ring now: it tells whether the kernel lets us have any. */
	int err;
	struct kvl__fio_ring *r = fio_ring_new(&err);
	if (!r) {
		snprintf(note, note_len,
		         "io_uring refused (%s): reads use preads",
		         strerror(-err));
		return;
	}
	io->free = r;
	io->rings = 1;
	io->uring = 1;
#else
	snprintf(note, note_len,
	         "this build has no io_uring (liburing): reads use preads");
#endif
}

void kvl__fio_destroy(kvl__fio *io)
{
	kvl__fio_pool_stop(io);
	for (struct kvl__fio_ring *r = io->free, *next; r; r = next) {
		next = r->next;
#if KVL_HAVE_URING
		io_uring_queue_exit(&r->ring);
#endif
		free(r);
	}
	pthread_mutex_destroy(&io->mu);
	pthread_cond_destroy(&io->cv);
}
