/* SPDX-License-Identifier: Apache-2.0 */
/*
 * probe.c — the Redis client's prober: one thread per client, started the
 * first time a node goes down, that reconnects down nodes in the
 * background (kvl__rnode_probe) when their backoff ends. Engine calls to a
 * down node fail at once meanwhile (node.h).
 *
 * The thread sleeps on probe_cv until the earliest probe due, or until a
 * node goes down (kvl__rprobe_kick, the nodes' kick); it probes outside
 * the lock. probe_mu guards the thread's life and its flags only; the
 * node table is read as call.c reads it (published entries never change).
 */
#include <errno.h>

#include "store/redis/cluster_impl.h"

static void *prober_main(void *arg)
{
	kvl__rcluster *cl = arg;
	pthread_mutex_lock(&cl->probe_mu);
	while (!cl->probe_stop) {
		uint64_t next = 0, now = kvl__now_ns();
		size_t n = atomic_load(&cl->n_nodes);
		int due = 0;
		for (size_t i = 0; i < n; i++) {
			uint64_t at = kvl__rnode_probe_at(cl->nodes[i]);
			if (at && at <= now)
				due = 1;
			else if (at && (!next || at < next))
				next = at;
		}
		if (due) {
			cl->probe_kicked = 0;
			pthread_mutex_unlock(&cl->probe_mu);
			for (size_t i = 0; i < n; i++)
				kvl__rnode_probe(cl->nodes[i], &cl->cfg,
				                 cl->pool_max);
			pthread_mutex_lock(&cl->probe_mu);
			continue;
		}
		if (cl->probe_kicked) { /* went down while we looked */
			cl->probe_kicked = 0;
			continue;
		}
		if (!next) {
			pthread_cond_wait(&cl->probe_cv, &cl->probe_mu);
			continue;
		}
		uint64_t ms = (next - now) / 1000000 + 1;
		struct timespec dl = kvl__deadline_after((uint32_t)ms);
		pthread_cond_timedwait(&cl->probe_cv, &cl->probe_mu, &dl);
	}
	pthread_mutex_unlock(&cl->probe_mu);
	return NULL;
}

void kvl__rprobe_kick(void *ctx)
{
	kvl__rcluster *cl = ctx;
	pthread_mutex_lock(&cl->probe_mu);
	if (!cl->probe_started && !cl->probe_stop &&
	    pthread_create(&cl->prober, NULL, prober_main, cl) == 0)
		cl->probe_started = 1;
	cl->probe_kicked = 1;
	pthread_cond_signal(&cl->probe_cv);
	pthread_mutex_unlock(&cl->probe_mu);
}

void kvl__rprobe_stop(kvl__rcluster *cl)
{
	pthread_mutex_lock(&cl->probe_mu);
	cl->probe_stop = 1;
	pthread_cond_signal(&cl->probe_cv);
	int started = cl->probe_started;
	pthread_mutex_unlock(&cl->probe_mu);
	if (started)
		pthread_join(cl->prober, NULL);
}
