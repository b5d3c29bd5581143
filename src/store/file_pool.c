/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_pool.c — the file store's preads on a small pool of threads, where
 * io_uring is not built or the kernel refuses it (file_io.c).
 *
 * One thread reading one file after another leaves the device idle while
 * the caller checks and copies each object, and keeps one read in flight
 * where an NVMe drive wants several: the pool keeps up to FIO_THREADS
 * reads in flight, and the caller checks each request as it completes, on
 * its own thread, as with io_uring. A call queues a job (its requests),
 * the threads take its requests in order and report each one done; calls
 * from several threads share the threads in the order they came. The
 * threads start on the first batch of two reads or more; where they
 * cannot, the caller reads for itself.
 */
#include <errno.h>
#include <stdlib.h>

#include "store/file.h"

#define FIO_THREADS 8u

typedef struct fio_job {
	kvl__fio_req *reqs;
	size_t n;
	size_t next;           /* (mu) the first request nobody took */
	size_t *order;         /* (mu) requests in the order they completed */
	size_t completed;      /* (mu) entries of order */
	pthread_cond_t cv;     /* completed grew */
	struct fio_job *qnext; /* (mu) the queue of jobs with requests left */
} fio_job;

struct kvl__fio_pool {
	pthread_t threads[FIO_THREADS];
	unsigned n_threads;
	pthread_cond_t work; /* a job was queued, or stop */
	fio_job *head, *tail;
	int stop;
};

static void *fio_worker(void *arg)
{
	kvl__fio *io = arg;
	struct kvl__fio_pool *p = io->pool;
	pthread_mutex_lock(&io->mu);
	for (;;) {
		while (!p->head && !p->stop)
			pthread_cond_wait(&p->work, &io->mu);
		if (!p->head)
			break; /* stopping, nothing left */
		fio_job *j = p->head;
		size_t i = j->next++;
		if (j->next == j->n) { /* every request taken */
			p->head = j->qnext;
			if (!p->head)
				p->tail = NULL;
		}
		pthread_mutex_unlock(&io->mu);
		kvl__fio_req *q = &j->reqs[i];
		q->res = kvl__fio_pread_all(q->fd, q->buf, q->len, q->off);
		pthread_mutex_lock(&io->mu);
		j->order[j->completed++] = i;
		pthread_cond_signal(&j->cv);
	}
	pthread_mutex_unlock(&io->mu);
	return NULL;
}

/* Starts the pool (under mu) unless it runs; 0, or -1 when no thread
 * could start. */
static int fio_pool_start(kvl__fio *io)
{
	if (io->pool)
		return io->pool->n_threads ? 0 : -1;
	struct kvl__fio_pool *p = calloc(1, sizeof *p);
	if (!p)
		return -1;
	pthread_cond_init(&p->work, NULL);
	io->pool = p;
	while (p->n_threads < FIO_THREADS &&
	       pthread_create(&p->threads[p->n_threads], NULL, fio_worker,
	                      io) == 0)
		p->n_threads++;
	return p->n_threads ? 0 : -1;
}

void kvl__fio_pool_read(kvl__fio *io, kvl__fio_req *reqs, size_t n,
                        kvl__fio_done done, void *ctx)
{
	size_t *order = n > 1 ? malloc(n * sizeof *order) : NULL;
	pthread_mutex_lock(&io->mu);
	if (!order || fio_pool_start(io)) {
		pthread_mutex_unlock(&io->mu);
		free(order);
		for (size_t i = 0; i < n; i++) {
			reqs[i].res = kvl__fio_pread_all(reqs[i].fd, reqs[i].buf,
			                                 reqs[i].len,
			                                 reqs[i].off);
			done(ctx, i);
		}
		return;
	}
	struct kvl__fio_pool *p = io->pool;
	fio_job j = {.reqs = reqs, .n = n, .order = order};
	pthread_cond_init(&j.cv, NULL);
	if (p->tail)
		p->tail->qnext = &j;
	else
		p->head = &j;
	p->tail = &j;
	pthread_cond_broadcast(&p->work);
	/* Each request back to the caller as it completes: its checks and
	 * copies overlap the other reads. */
	for (size_t seen = 0; seen < n;) {
		while (j.completed == seen)
			pthread_cond_wait(&j.cv, &io->mu);
		size_t upto = j.completed;
		pthread_mutex_unlock(&io->mu);
		for (; seen < upto; seen++)
			done(ctx, order[seen]);
		pthread_mutex_lock(&io->mu);
	}
	pthread_mutex_unlock(&io->mu);
	pthread_cond_destroy(&j.cv);
	free(order);
}

void kvl__fio_pool_stop(kvl__fio *io)
{
	struct kvl__fio_pool *p = io->pool;
	if (!p)
		return;
	pthread_mutex_lock(&io->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&io->mu);
	for (unsigned t = 0; t < p->n_threads; t++)
		pthread_join(p->threads[t], NULL);
	pthread_cond_destroy(&p->work);
	free(p);
	io->pool = NULL;
}
