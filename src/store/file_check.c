/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_check.c — the threads that check and copy out the objects a file:
 * get has read, beside the caller's thread.
 *
 * A get's caller reaps its reads as they complete; checking an object
 * (XXH3 of every block) and copying it out (bytes the disk just wrote, in
 * no cache) takes a core as long as the read took the disk for small
 * objects on some machines, so on one thread the reads in flight run dry
 * while it works. Up to FILE_CHECKERS threads (option check_threads; by
 * default one fewer than the cores, none with two cores or fewer) take
 * the checks of completed keys, started on the first get that has two
 * keys to check; the caller runs queued ones too while it waits for its
 * own, so a call never waits on an idle queue. Jobs live
 * in the caller's memory (one per key); each call counts its own (the
 * `pending` its jobs point at) and returns only when they are done. With
 * no threads (check_threads=0, or none could start), the caller checks
 * each key itself as it completes.
 */
#include <stdlib.h>

#include "store/file.h"

/* Takes the first queued job off and runs it (mu held before and
 * after, not during). */
static void run_first(struct file_checkers *p)
{
	struct file_check_job *j = p->head;
	p->head = j->next;
	pthread_mutex_unlock(&p->mu);
	j->fn(j->arg, j->x);
	pthread_mutex_lock(&p->mu);
	if (--*j->pending == 0)
		pthread_cond_broadcast(&p->done);
}

static void *checker_main(void *arg)
{
	struct file_checkers *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->head && !p->stop)
			pthread_cond_wait(&p->work, &p->mu);
		if (!p->head)
			break; /* stopping, nothing queued */
		run_first(p);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

void kvl__file_checkers_init(struct file_checkers *p, unsigned want)
{
	memset(p, 0, sizeof *p);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	p->want = want;
}

void kvl__file_checkers_destroy(struct file_checkers *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->mu);
}

int kvl__file_checkers_on(struct file_checkers *p)
{
	pthread_mutex_lock(&p->mu);
	while (p->n < p->want && !p->failed)
		if (pthread_create(&p->threads[p->n], NULL, checker_main, p))
			p->failed = 1; /* fewer threads, or the caller alone */
		else
			p->n++;
	int on = p->n > 0;
	pthread_mutex_unlock(&p->mu);
	return on;
}

void kvl__file_check_queue(struct file_checkers *p, struct file_check_job *j)
{
	pthread_mutex_lock(&p->mu);
	++*j->pending;
	j->next = NULL;
	if (p->head) {
		p->tail->next = j;
	} else {
		p->head = j;
	}
	p->tail = j;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->mu);
}

void kvl__file_check_wait(struct file_checkers *p, unsigned *pending)
{
	pthread_mutex_lock(&p->mu);
	while (*pending)
		if (p->head)
			run_first(p); /* any call's, meanwhile */
		else
			pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
