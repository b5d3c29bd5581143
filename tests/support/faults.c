/* SPDX-License-Identifier: Apache-2.0 */
/*
 * faults.c — the fault store's controls of faults.h, each a read, a change
 * and a write of the whole configuration (kvl__fault_get / _set).
 */
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "faults.h"
#include "kvl_assert.h"
#include "store/fault.h"
#include "stores.h"

#define AWAIT_MS HANG_MS /* fault_await_calls: only a hang runs out */

int fault_store_ok(void)
{
	static int known = -1;
	if (known >= 0)
		return known;
	kvl_store *s = NULL;
	char err[256] = "";
	const char *uri = store_uri("fault+", "fault.latency_ms=1");
	int rc = kvl_store_open(uri, &s, err, sizeof err);
	if (rc)
		printf("[  SKIP    ] the fault store cannot be opened (%s): "
		       "%s: %s\n",
		       uri, kvl_err_name(rc), err);
	kvl_store_close(s);
	return known = rc == 0;
}

kvl__fault_cfg fault_cfg(kvl_store *s)
{
	kvl__fault_cfg c;
	memset(&c, 0xff, sizeof c);
	ASSERT_RC(s, kvl__fault_get(s, &c), KVL_OK);
	return c;
}

void fault_set_cfg(kvl_store *s, const kvl__fault_cfg *cfg)
{
	ASSERT_RC(s, kvl__fault_set(s, cfg), KVL_OK);
}

void fault_latency(kvl_store *s, uint32_t ms)
{
	kvl__fault_cfg c = fault_cfg(s);
	c.latency_ms = ms;
	c.latency_p = 1;
	fault_set_cfg(s, &c);
}

void fault_down(kvl_store *s, int down)
{
	kvl__fault_cfg c = fault_cfg(s);
	c.down = down;
	fault_set_cfg(s, &c);
}

void fault_fail_get_in(kvl_store *s, uint64_t k)
{
	kvl__fault_cfg c = fault_cfg(s);
	c.fail_get_call = fault_gets(s) + k;
	fault_set_cfg(s, &c);
}

uint64_t fault_gets(kvl_store *s)
{
	uint64_t gets = 0;
	ASSERT_RC(s, kvl__fault_calls(s, &gets, NULL), KVL_OK);
	return gets;
}

uint64_t fault_puts(kvl_store *s)
{
	uint64_t puts = 0;
	ASSERT_RC(s, kvl__fault_calls(s, NULL, &puts), KVL_OK);
	return puts;
}

void fault_await_calls(kvl_store *s, int puts, uint64_t n)
{
	uint64_t deadline = now_ms() + AWAIT_MS;
	while ((puts ? fault_puts(s) : fault_gets(s)) < n) {
		ASSERT_TRUE_MSG(now_ms() < deadline,
		                "the store had %llu of %llu %s calls after %d ms",
		                (unsigned long long)(puts ? fault_puts(s)
		                                          : fault_gets(s)),
		                (unsigned long long)n, puts ? "put" : "get",
		                AWAIT_MS);
		sleep_ms(1);
	}
}
