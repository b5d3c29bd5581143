/* SPDX-License-Identifier: Apache-2.0 */
/*
 * open.c — around a document's fragment that opens a store at a remote
 * address (tests/doc_snippets.py pastes it at the SNIPPET line below).
 *
 * The address is the document's example, so the open is expected to fail
 * here: KVL_EIO (nobody answers) or KVL_ENOTSUP (no Mooncake library). What
 * must not happen is any other error — a URI or option that kvlink does not
 * accept (KVL_EPARSE, KVL_EINVAL) means the document is wrong. An open that
 * succeeds (someone does serve there) is fine too.
 */
#include <stdio.h>

#include <kvlink.h>

static int open_rc = 1;

static int snip_open(const char *uri, kvl_store **out, char *errbuf,
                     size_t errlen)
{
	open_rc = kvl_store_open(uri, out, errbuf, errlen);
	printf("kvl_store_open(\"%s\"): %s%s%s\n", uri, kvl_err_name(open_rc),
	       open_rc ? ": " : "", open_rc ? errbuf : "");
	return open_rc;
}

#define kvl_store_open snip_open

int main(void)
{
	kvl_store *store = NULL;
	char err[512] = "";
	{
		/* @SNIPPET@ */
	}
	kvl_store_close(store);
	if (open_rc == 1) {
		fprintf(stderr, "open.c: the fragment opened no store\n");
		return 1;
	}
	return open_rc == 0 || open_rc == KVL_EIO || open_rc == KVL_ENOTSUP ? 0
	                                                                    : 1;
}
