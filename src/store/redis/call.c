/* SPDX-License-Identifier: Apache-2.0 */
/*
 * call.c — the Redis client's calls (see cluster.h): a set of operations
 * routed and run to completion in rounds, with redirections and retries.
 *
 * A call runs in the calling thread, in rounds. Each round routes the
 * pending operations (the key's slot → its master, or a replica for reads
 * with replicas=1; a redirection overrides it once), takes one connection
 * per node from the node's pool (or connects), runs all nodes' pipelines at
 * once (kvl__rconn_run: non-blocking sockets and poll, so nodes work in
 * parallel without a thread per node and without handing buffers between
 * threads), and sorts the outcomes: done (the user's reply hook decides
 * what the reply means), or pending again after MOVED / ASK (route to the
 * named node), TRYAGAIN / CLUSTERDOWN / LOADING (back off, retry),
 * READONLY or a lost connection (refresh the slot map, retry once on a
 * fresh connection). An operation takes at most R_MAX_TRIES rounds; then
 * it fails with KVL_EIO naming the last reason. A node that stalled past
 * timeout_ms is marked down (node.h); a node whose connection broke has
 * its idle connections closed.
 *
 * Invariants: every operation is R_PENDING (to route in the next round),
 * R_RUNNING (in this round's pipelines) or R_DONE (ended: its reply went
 * to the reply hook or its failure to the failed hook, once); while
 * pending, op->err holds a retry reason (R_RETRY_*, positive) and after a
 * failure its code. The call runs until none is pending.
 *
 * Threads: a call and its operations belong to the calling thread; the
 * client's lock is taken only to route (cluster_impl.h), never across I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "store/redis/cluster_impl.h"

#define R_MAX_TRIES 6 /* rounds one operation may take */

enum { R_PENDING, R_RUNNING, R_DONE };
/* Retry reasons kept in rop.err while pending (positive: not error codes). */
enum { R_RETRY_MOVED = 1, R_RETRY_ASK, R_RETRY_AGAIN, R_RETRY_REFRESH };

struct kvl__rcall {
	kvl__rcluster *cl;
	const kvl__rcall_hooks *hooks;
	void *ctx;
	kvl__rop *ops;    /* [0, n_ops) added, of max_ops */
	size_t n_ops, max_ops;
	kvl__rop **order; /* max_ops: a round's routed ops, grouped by node */
	int need_refresh, need_backoff;
};

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* ------------------------------------------------------------ the call */

kvl__rcall *kvl__rcall_new(kvl__rcluster *cl, size_t max_ops,
                           const kvl__rcall_hooks *hooks, void *ctx)
{
	kvl__rcall *k = calloc(1, sizeof *k + max_ops * (sizeof(kvl__rop) +
	                                                 sizeof(kvl__rop *)));
	if (!k)
		return NULL;
	k->cl = cl;
	k->hooks = hooks;
	k->ctx = ctx;
	k->max_ops = max_ops;
	k->ops = (kvl__rop *)(void *)(k + 1);
	k->order = (kvl__rop **)(void *)(k->ops + max_ops);
	return k;
}

void kvl__rcall_free(kvl__rcall *k)
{
	free(k);
}

kvl__rop *kvl__rcall_add(kvl__rcall *k, const char *key, uint32_t index,
                         kvl__rop_kind kind)
{
	kvl__rop *op = &k->ops[k->n_ops++];
	op->key = key;
	op->klen = (uint32_t)strlen(key);
	op->kind = (uint8_t)kind;
	op->index = index;
	op->redirect = R_NONE;
	op->state = R_PENDING;
	return op;
}

size_t kvl__rcall_count(const kvl__rcall *k)
{
	return k->n_ops;
}

kvl__rop *kvl__rcall_op(kvl__rcall *k, size_t i)
{
	return &k->ops[i];
}

void kvl__rcall_fail(kvl__rcall *k, kvl__rop *op, int code, const char *fmt,
                     ...)
{
	op->state = R_DONE;
	op->err = code;
	char msg[KVL__ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	k->hooks->failed(k->ctx, op, code, msg);
}

void kvl__rcall_drop(kvl__rop *op)
{
	op->state = R_DONE;
}

void kvl__rcall_redo(kvl__rop *op, kvl__rop_kind kind)
{
	op->kind = (uint8_t)kind;
	op->state = R_PENDING;
	op->asking = 0;
	op->redirect = R_NONE;
}

/* -------------------------------------------------------------- rounds */

/* The error callback of the connections: classifies an error reply while
 * its text is at hand. */
static void call_on_error(void *ctx, kvl__rconn *c, kvl__rop *op,
                          const char *msg, size_t len)
{
	kvl__rcall *k = ctx;
	kvl__redis_err_kind kind;
	char host[KVL__REDIS_HOST_MAX];
	uint16_t slot = 0;
	int port = 0;

	switch ((kind = kvl__redis_classify(msg, len, &slot, host, &port))) {
	case KVL__REDIS_ERR_MOVED:
	case KVL__REDIS_ERR_ASK: {
		int moved = msg[0] == 'M';
		if (!host[0])
			snprintf(host, sizeof host, "%s", kvl__rconn_host(c));
		uint16_t id = kvl__rcluster_redirected(k->cl, moved, slot, host,
		                                       port);
		if (id == R_NONE) {
			op->err = KVL_EIO;
			break;
		}
		op->redirect = id;
		op->err = moved ? R_RETRY_MOVED : R_RETRY_ASK;
		if (moved)
			k->need_refresh = 1;
		return;
	}
	case KVL__REDIS_ERR_TRYAGAIN:
		op->err = R_RETRY_AGAIN;
		op->to_master = 1; /* a replica still loading: its master */
		k->need_backoff = 1;
		return;
	case KVL__REDIS_ERR_READONLY:
		if (!k->cl->cluster) { /* a standalone replica: nowhere else */
			op->err = KVL_EIO;
			break;
		}
		op->err = R_RETRY_REFRESH;
		op->to_master = 1;
		k->need_refresh = 1;
		return;
	case KVL__REDIS_ERR_OOM:
	case KVL__REDIS_ERR_AUTH:
	case KVL__REDIS_ERR_OTHER:
		op->err = k->hooks->error_code(k->ctx, op, kind);
		break;
	}
	kvl__rcall_fail(k, op, op->err, "%s replied: %.*s", kvl__rconn_name(c),
	                (int)(len > 300 ? 300 : len), msg);
}

/* Makes op pending again for the next round. */
static void op_retry(kvl__rcall *k, kvl__rop *op, const char *why)
{
	if (op->tries + 1 >= R_MAX_TRIES) {
		kvl__rcall_fail(k, op, KVL_EIO, "gave up after %d attempts: %s",
		                R_MAX_TRIES, why);
		return;
	}
	op->tries++;
	op->state = R_PENDING;
}

/* Decides an op whose reply came: retries, failures of the connection,
 * and for a reply, the hook's verdict. */
static void op_outcome(kvl__rcall *k, kvl__rop *op, kvl__rconn *c)
{
	const char *name = kvl__rconn_name(c);

	switch ((kvl__rop_out)op->out) {
	case KVL__ROUT_ERR:
		if (op->err < 0)
			return; /* a final error, recorded by the callback */
		op->asking = op->err == R_RETRY_ASK;
		op_retry(k, op,
		         op->err == R_RETRY_AGAIN ? "the cluster asked to try "
		                                    "again (TRYAGAIN, "
		                                    "CLUSTERDOWN or LOADING)" :
		         op->err == R_RETRY_REFRESH ? "a write reached a replica" :
		                                      "too many redirections");
		return;
	case KVL__ROUT_NONE:
	case KVL__ROUT_LOST:
		/* Once on a fresh connection (a pooled one may be stale after
		 * a restart); a replica read then goes to the master. */
		if (op->lost++ == 0) {
			op->to_master = 1;
			op->asking = 0;
			k->need_refresh = 1;
			op_retry(k, op, kvl__rconn_why(c));
			return;
		}
		kvl__rcall_fail(k, op, KVL_EIO, "connection to %s lost: %s",
		                name, kvl__rconn_why(c));
		return;
	case KVL__ROUT_TIMEOUT:
		kvl__rcall_fail(k, op, KVL_EIO, "%s: %s", name,
		                kvl__rconn_why(c));
		return;
	case KVL__ROUT_PROTO:
		kvl__rcall_fail(k, op, KVL_EIO,
		                "%s sent a reply of an unexpected type", name);
		return;
	default:
		break;
	}
	op->asking = 0;
	op->state = R_DONE;
	k->hooks->reply(k->ctx, k, op, name);
}

/* Groups the routed ops k->order[0..m) by node, stably (a key's ops keep
 * their order), and writes the first index of each group into start[],
 * with start[groups] = m. Returns the number of groups, or 0 (ops failed
 * with KVL_ENOMEM) when out of memory. *start_out is malloc'ed. */
static size_t call_group(kvl__rcall *k, size_t m, size_t **start_out)
{
	size_t n_nodes = atomic_load(&k->cl->n_nodes), groups = 0;
	size_t *cnt = calloc(n_nodes + 1, sizeof *cnt);
	kvl__rop **tmp = malloc(m * sizeof *tmp);
	size_t *start = NULL;
	if (cnt && tmp) {
		for (size_t i = 0; i < m; i++)
			cnt[k->order[i]->node + 1]++;
		for (size_t i = 0; i < n_nodes; i++) {
			groups += cnt[i + 1] != 0;
			cnt[i + 1] += cnt[i];
		}
		start = malloc((groups + 1) * sizeof *start);
	}
	if (!start) {
		for (size_t i = 0; i < m; i++)
			kvl__rcall_fail(k, k->order[i], KVL_ENOMEM,
			                "out of memory");
		free(cnt);
		free(tmp);
		return 0;
	}
	for (size_t i = 0; i < m; i++)
		tmp[cnt[k->order[i]->node]++] = k->order[i];
	memcpy(k->order, tmp, m * sizeof *tmp);
	size_t g = 0;
	for (size_t i = 0; i < m; i++)
		if (i == 0 || k->order[i]->node != k->order[i - 1]->node)
			start[g++] = i;
	start[groups] = m;
	free(cnt);
	free(tmp);
	*start_out = start;
	return groups;
}

void kvl__rcall_run(kvl__rcall *k)
{
	kvl__rcluster *cl = k->cl;
	char msg[KVL__ERRMSG_MAX];

	/* New replicas and nodes show up in the map within 10 s even when
	 * nothing redirects. */
	kvl__rcluster_refresh_stale(cl);
	for (int round = 0;; round++) {
		/* Route. Ops whose slot has no node wait for a refresh. */
		size_t m = 0;
		pthread_mutex_lock(&cl->mu);
		for (size_t i = 0; i < k->n_ops; i++) {
			kvl__rop *op = &k->ops[i];
			if (op->state != R_PENDING)
				continue;
			op->node = kvl__rcluster_route_locked(cl, op);
			if (op->node != R_NONE)
				k->order[m++] = op;
		}
		pthread_mutex_unlock(&cl->mu);
		for (size_t i = 0; i < k->n_ops; i++) {
			kvl__rop *op = &k->ops[i];
			if (op->state != R_PENDING || op->node != R_NONE)
				continue;
			k->need_refresh = k->need_backoff = 1;
			op_retry(k, op, "its slot is served by no node (the "
			                "cluster is down or resharding)");
		}

		/* One connection per node; all nodes run at once. */
		size_t *start = NULL;
		size_t groups = m ? call_group(k, m, &start) : 0;
		kvl__rconn *small[8], **conns = small;
		if (groups > 8 && !(conns = calloc(groups, sizeof *conns))) {
			for (size_t i = 0; i < m; i++)
				kvl__rcall_fail(k, k->order[i], KVL_ENOMEM,
				                "out of memory");
			groups = 0;
			conns = small;
		}
		size_t live = 0;
		kvl__rconn *run[8], **runp = groups > 8 ? NULL : run;
		if (!runp && !(runp = malloc(groups * sizeof *runp))) {
			for (size_t i = 0; i < m; i++)
				kvl__rcall_fail(k, k->order[i], KVL_ENOMEM,
				                "out of memory");
			groups = 0;
		}
		for (size_t g = 0; g < groups; g++) {
			kvl__rop **ops = k->order + start[g];
			size_t n = start[g + 1] - start[g];
			kvl__rnode *nd = cl->nodes[ops[0]->node];
			conns[g] = NULL;
			if (kvl__rnode_conn(nd, &cl->cfg, &conns[g], msg,
			                    sizeof msg) < 0) {
				for (size_t i = 0; i < n; i++) {
					kvl__rop *op = ops[i];
					if (op->lost++ == 0 && cl->cluster) {
						/* Maybe failed over: refresh. */
						k->need_refresh = 1;
						op->to_master = 1;
						op_retry(k, op, msg);
					} else {
						kvl__rcall_fail(k, op, KVL_EIO,
						                "%s", msg);
					}
				}
				continue;
			}
			kvl__rconn_job job = {
				.ops = ops, .n = n, .inflight = cl->inflight,
				.set_tail = cl->set_tail,
				.set_tail_len = cl->set_tail_len,
				.set_argc = cl->set_argc,
				.on_error = call_on_error, .ctx = k,
			};
			for (size_t i = 0; i < n; i++) {
				ops[i]->state = R_RUNNING;
				ops[i]->err = 0;
			}
			kvl__rconn_start(conns[g], &job);
			runp[live++] = conns[g];
		}
		kvl__rconn_run(runp, live, cl->timeout_ms);

		/* Outcomes, then the connections back to their pools. */
		for (size_t g = 0; g < groups; g++) {
			kvl__rconn *c = conns[g];
			if (!c)
				continue;
			int timed_out = 0;
			for (size_t i = start[g]; i < start[g + 1]; i++) {
				kvl__rop *op = k->order[i];
				timed_out |= op->out == KVL__ROUT_TIMEOUT;
				op->state = R_DONE;
				op_outcome(k, op, c);
			}
			if (kvl__rconn_broken(c)) {
				kvl__rnode *nd = kvl__rconn_owner(c);
				if (timed_out)
					kvl__rnode_mark_down(nd,
					                     kvl__rconn_why(c));
				else
					kvl__rnode_flush(nd);
			}
			kvl__rnode_conn_put(c, cl->pool_max);
		}
		if (conns != small)
			free(conns);
		if (runp != run)
			free(runp);
		free(start);

		if (k->hooks->round)
			k->hooks->round(k->ctx, k);
		int pending = 0;
		for (size_t i = 0; i < k->n_ops && !pending; i++)
			pending = k->ops[i].state == R_PENDING;
		if (!pending)
			break;
		if (k->need_refresh) {
			kvl__rcluster_refresh(cl);
			k->need_refresh = 0;
		}
		if (k->need_backoff) {
			sleep_ms(10u << (round < 4 ? round : 4));
			k->need_backoff = 0;
		}
	}
}
