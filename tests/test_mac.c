/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mac.c — keyed integrity: stores opened with a secret (secret_file=,
 * KVL_SECRET_FILE) seal objects with MACs, and only a reader with the same
 * secret takes them as valid.
 *
 * The store under test is $KVL_TEST_STORE_URI (tests/redis/run.sh sets it:
 * every handle then sees the same server), else the fault store around
 * the embedded one, which models an untrusted store; its handles hold
 * separate objects, so a test hands an object from the writer's handle to
 * the reader's with a raw get and put (what a shared server does itself).
 *
 * Covers: (a) a secret's objects load as valid through the linker and
 * kvl_pages_get with the same secret (also given with a trailing newline);
 * (b) another secret, or none, never reads them as valid (KVL_ECORRUPT);
 * (c) an unkeyed object never passes a keyed reader; (d) forgeries by
 * whoever can write to the store but lacks the secret: a payload rewritten
 * and every unkeyed checksum recomputed (keyed flag kept, or dropped),
 * another page's header (as it is, and with this page's hash patched in
 * and resealed), a layer swapped in from another page, another page's
 * object replayed under this key; (e) secret_file errors: missing,
 * directory, a FIFO (refused, never waited on), empty, too short, too
 * long, unreadable, through
 * KVL_SECRET_FILE, the URI option winning over it, messages naming the
 * path but never the secret; (f) kvl_has_feature("mac"); and the tags
 * themselves (key, index, nonce and message all count; a thread's
 * reused AES context never mixes keys up).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/codec.h"
#include "kvlink.h"

#include "support/linker_fixture.h"

static char dir[64];
static char path_a[128], path_a_nl[128], path_b[128];

#define SECRET_A "secret A: 9f86d081884c7d659a2feaa0c55ad015"
#define SECRET_B "secret B: 2c26b46b68ffc68ff99b453c1d304134"

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	ASSERT_TRUE(f != NULL);
	ASSERT_EQ(fwrite(data, 1, len, f), len);
	ASSERT_EQ(fclose(f), 0);
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "%s/kvl-mac.XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path_a, sizeof path_a, "%s/a", dir);
	snprintf(path_a_nl, sizeof path_a_nl, "%s/a_nl", dir);
	snprintf(path_b, sizeof path_b, "%s/b", dir);
	write_file(path_a, SECRET_A, strlen(SECRET_A));
	write_file(path_a_nl, SECRET_A "\n", strlen(SECRET_A) + 1);
	write_file(path_b, SECRET_B, strlen(SECRET_B));
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The store under test with `secret` (a path; NULL: none). Open at once:
 * store_uri's buffers are reused. */
static kvl_store *open_with(const char *secret)
{
	char opts[256];
	if (secret)
		snprintf(opts, sizeof opts, "secret_file=%s", secret);
	return open_ok(store_uri(env_store() ? "" : "fault+",
	                         secret ? opts : NULL));
}

/* The raw object of `page` of pool kv, read through s (its size into
 * *len; free it). */
static uint8_t *raw_get(kvl_store *s, const host *h, const kvl_hash *page,
                        size_t *len)
{
	char key[KVL_KEY_MAX];
	key_of(h, h->kv, page, key);
	ASSERT_RC(h->l, kvl_layout_object_size(h->l, h->kv, len, NULL), 0);
	uint8_t *obj = malloc(*len);
	ASSERT_TRUE(obj != NULL);
	ASSERT_EQ(get1(s, key, 0, obj, *len), (int64_t)*len);
	return obj;
}

/* Stores obj (len bytes) under `page`'s key through s, whatever was there:
 * what whoever can write to the store can do. */
static void raw_put(kvl_store *s, const host *h, const kvl_hash *page,
                    const uint8_t *obj, size_t len)
{
	char key[KVL_KEY_MAX];
	key_of(h, h->kv, page, key);
	remove1(s, key);
	ASSERT_EQ(put1(s, key, obj, len), KVL_PUT_STORED);
}

/* Hands `page`'s object from the writer's handle to the reader's, unless
 * both see one store. */
static void share(kvl_store *from, kvl_store *to, const host *h,
                  const kvl_hash *page)
{
	if (env_store())
		return;
	size_t len;
	uint8_t *obj = raw_get(from, h, page, &len);
	raw_put(to, h, page, obj, len);
	free(obj);
}

/* kvl_pages_get of every layer of `page` into slot `slot` of h's kv. */
static int pages_get1(kvl_store *s, host *h, const kvl_hash *page,
                      size_t slot)
{
	int res = -100;
	ASSERT_RC(s, kvl_pages_get(s, h->l, h->kv, page, &slot, 1,
	                           KVL_ALL_LAYERS, &res),
	          0);
	return res;
}

/* Writes pages[0..n) from slots 0.. of src through a linker on w. */
static void write_pages(kvl_store *w, host *src, const kvl_hash *pages,
                        size_t n)
{
	req r;
	req_init(&r, pages, n);
	req_pool(&r, src->kv, 0, 0);
	fill_req(src, &r);
	kvl_linker *lk = open_lk(src, w, NULL);
	kvl_completion c = offload_sync(lk, 1, &r);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, n, n);
	kvl_linker_close(lk);
}

/* Loads pages[0..n) into slots 4.. of dst through a linker on rd; the
 * number of valid pages. */
static size_t load_pages(kvl_store *rd, host *dst, const kvl_hash *pages,
                         size_t n, int *status)
{
	req r;
	req_init(&r, pages, n);
	req_pool(&r, dst->kv, 4, 0);
	kvl_linker *lk = open_lk(dst, rd, NULL);
	kvl_completion c = load_sync(lk, 2, &r, NULL);
	kvl_linker_close(lk);
	if (status)
		*status = c.status;
	if (c.valid_pages)
		check_req(dst, &r, c.valid_pages, N_LAYERS);
	return c.valid_pages;
}

/* ============================================================ (a), (b) */

static void test_same_secret_loads(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_hash pages[4];
	make_pages(pages, 4, 100);
	kvl_store *w = open_with(path_a);
	kvl_store *rd = open_with(path_a_nl); /* the same secret */
	write_pages(w, &src, pages, 4);
	for (size_t i = 0; i < 4; i++)
		share(w, rd, &src, &pages[i]);
	ASSERT_EQ(load_pages(rd, &dst, pages, 4, NULL), 4);
	for (size_t i = 0; i < 4; i++)
		ASSERT_RC(rd, pages_get1(rd, &dst, &pages[i], 8 + i), 0);
	/* What is stored says keyed, with a nonce. */
	size_t len;
	uint8_t *obj = raw_get(rd, &src, &pages[0], &len);
	ASSERT_EQ(obj[6], KVL__OBJ_KEYED);
	static const uint8_t zero[16];
	ASSERT_TRUE(memcmp(obj + 72, zero, 16) != 0);
	free(obj);
	kvl_store_close(w);
	kvl_store_close(rd);
	host_free(&src);
	host_free(&dst);
}

static void test_other_secret_corrupt(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_hash pages[3];
	make_pages(pages, 3, 200);
	kvl_store *w = open_with(path_a);
	write_pages(w, &src, pages, 3);
	const char *readers[] = {path_b, NULL};
	const char *says[] = {"MAC mismatch", "sealed with a secret"};
	for (int k = 0; k < 2; k++) {
		kvl_store *rd = open_with(readers[k]);
		for (size_t i = 0; i < 3; i++)
			share(w, rd, &src, &pages[i]);
		int status = 0;
		ASSERT_EQ_MSG(load_pages(rd, &dst, pages, 3, &status), 0,
		              "reader %s", readers[k] ? "B" : "without one");
		ASSERT_CODE(status, KVL_ECORRUPT);
		for (size_t i = 0; i < 3; i++)
			ASSERT_CODE(pages_get1(rd, &dst, &pages[i], 8 + i),
			            KVL_ECORRUPT);
		ASSERT_CONTAINS(kvl_store_errmsg(rd), says[k]);
		kvl_store_close(rd);
	}
	kvl_store_close(w);
	host_free(&src);
	host_free(&dst);
}

/* ================================================================ (c) */

static void test_unkeyed_object_refused(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_hash pages[2];
	make_pages(pages, 2, 300);
	kvl_store *w = open_with(NULL);
	kvl_store *rd = open_with(path_a);
	write_pages(w, &src, pages, 2);
	for (size_t i = 0; i < 2; i++)
		share(w, rd, &src, &pages[i]);
	/* The unkeyed reader takes them: they are intact. */
	ASSERT_RC(w, pages_get1(w, &dst, &pages[0], 8), 0);
	int status = 0;
	ASSERT_EQ(load_pages(rd, &dst, pages, 2, &status), 0);
	ASSERT_CODE(status, KVL_ECORRUPT);
	ASSERT_CODE(pages_get1(rd, &dst, &pages[1], 9), KVL_ECORRUPT);
	ASSERT_CONTAINS(kvl_store_errmsg(rd), "carries no MAC");
	kvl_store_close(w);
	kvl_store_close(rd);
	host_free(&src);
	host_free(&dst);
}

/* ================================================================ (d) */

/* Recomputes every integrity field of obj as unkeyed XXH3-128, the public
 * format: what a forger without the secret can do. keep_flag leaves the
 * keyed flag (and nonce) in place. */
static void recompute_unkeyed(const host *h, uint8_t *obj, int keep_flag)
{
	uint32_t layers[N_LAYERS];
	size_t n = 0;
	ASSERT_RC(h->l, kvl_layout_pool_layers(h->l, h->kv, layers, N_LAYERS,
	                                       &n),
	          0);
	if (!keep_flag) {
		obj[6] = 0;
		memset(obj + 72, 0, 16);
	}
	for (size_t i = 0; i < n; i++) {
		size_t off, len;
		ASSERT_RC(h->l, kvl_layout_layer_range(h->l, h->kv, layers[i],
		                                       &off, &len),
		          0);
		kvl__checksum(obj + off, len, KVL__CHECKSUM_SEED,
		              obj + 88 + 16 * i);
	}
	kvl__checksum(obj, 88 + 16 * n, KVL__CHECKSUM_SEED,
	              obj + 88 + 16 * n);
}

/* Plants `obj` under `page` through the reader's handle and asserts that
 * neither kvl_pages_get nor a linker load takes it as valid. */
static void expect_refused(kvl_store *rd, host *dst, const kvl_hash *page,
                           const uint8_t *obj, size_t len, const char *what)
{
	raw_put(rd, dst, page, obj, len);
	ASSERT_CODE_MSG(pages_get1(rd, dst, page, 8), KVL_ECORRUPT, "%s", what);
	int status = 0;
	ASSERT_EQ_MSG(load_pages(rd, dst, page, 1, &status), 0, "%s", what);
	ASSERT_CODE_MSG(status, KVL_ECORRUPT, "%s", what);
}

static void test_forgeries(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_hash pages[2]; /* P and Q */
	make_pages(pages, 2, 400);
	kvl_store *w = open_with(path_a);
	kvl_store *rd = open_with(path_a);
	write_pages(w, &src, pages, 2);
	size_t len, hdr;
	uint8_t *p = raw_get(w, &src, &pages[0], &len);
	uint8_t *q = raw_get(w, &src, &pages[1], &len);
	uint8_t *x = malloc(len);
	ASSERT_TRUE(x != NULL);
	ASSERT_RC(src.l, kvl_layout_object_size(src.l, src.kv, NULL, &hdr), 0);

	/* The genuine objects are valid. */
	raw_put(rd, &dst, &pages[0], p, len);
	ASSERT_RC(rd, pages_get1(rd, &dst, &pages[0], 8), 0);

	/* The payload rewritten, every unkeyed checksum recomputed. */
	for (int keep = 0; keep < 2; keep++) {
		memcpy(x, p, len);
		x[hdr + 5] ^= 0x40;
		recompute_unkeyed(&src, x, keep);
		expect_refused(rd, &dst, &pages[0], x, len,
		               keep ? "payload rewritten, unkeyed sums, keyed "
		                      "flag"
		                    : "payload rewritten, unkeyed object");
	}
	/* Q's header over P's payload; and with P's hash patched in and the
	 * header's own field recomputed. */
	memcpy(x, q, hdr);
	memcpy(x + hdr, p + hdr, len - hdr);
	expect_refused(rd, &dst, &pages[0], x, len, "Q's header");
	memcpy(x + 32, pages[0].bytes, KVL_HASH_BYTES);
	recompute_unkeyed(&src, x, 1);
	expect_refused(rd, &dst, &pages[0], x, len,
	               "Q's header, P's hash, resealed unkeyed");
	/* Layer 1 and its tag swapped in from Q. */
	size_t off1, len1;
	ASSERT_RC(src.l, kvl_layout_layer_range(src.l, src.kv, 1, &off1,
	                                        &len1),
	          0);
	memcpy(x, p, len);
	memcpy(x + off1, q + off1, len1);
	memcpy(x + 88 + 16, q + 88 + 16, 16);
	expect_refused(rd, &dst, &pages[0], x, len, "Q's layer 1 in P");
	/* Q's whole object replayed under P's key, as it is and with P's
	 * hash in it. */
	expect_refused(rd, &dst, &pages[0], q, len, "Q's object under P");
	memcpy(x, q, len);
	memcpy(x + 32, pages[0].bytes, KVL_HASH_BYTES);
	expect_refused(rd, &dst, &pages[0], x, len,
	               "Q's object with P's hash");
	/* P's own object is P's again. */
	raw_put(rd, &dst, &pages[0], p, len);
	ASSERT_RC(rd, pages_get1(rd, &dst, &pages[0], 8), 0);
	free(p);
	free(q);
	free(x);
	kvl_store_close(w);
	kvl_store_close(rd);
	host_free(&src);
	host_free(&dst);
}

/* ================================================================ (e) */

/* Opening the store under test with secret_file=path fails with `code`,
 * naming the path and `needle` and never `secret`. */
static void expect_open_fails(const char *path, int code, const char *needle,
                              const char *secret)
{
	char opts[256], msg[512] = "";
	snprintf(opts, sizeof opts, "secret_file=%s", path);
	kvl_store *s = NULL;
	const char *uri = store_uri(env_store() ? "" : "fault+", opts);
	ASSERT_CODE_MSG(kvl_store_open(uri, &s, msg, sizeof msg), code, "%s",
	                msg);
	ASSERT_TRUE(s == NULL);
	ASSERT_CONTAINS(msg, path);
	ASSERT_CONTAINS(msg, needle);
	if (secret)
		ASSERT_TRUE(strstr(msg, secret) == NULL);
}

static void test_secret_file_errors(void **state)
{
	(void)state;
	char p[160];
	snprintf(p, sizeof p, "%s/missing", dir);
	expect_open_fails(p, KVL_EIO, "cannot open", NULL);
	expect_open_fails(dir, KVL_EINVAL, "not a regular file", NULL);
	/* A FIFO without a writer: refused at once, not waited on. */
	snprintf(p, sizeof p, "%s/fifo", dir);
	ASSERT_EQ(mkfifo(p, 0600), 0);
	expect_open_fails(p, KVL_EINVAL, "not a regular file", NULL);
	snprintf(p, sizeof p, "%s/empty", dir);
	write_file(p, "", 0);
	expect_open_fails(p, KVL_EINVAL, "empty", NULL);
	snprintf(p, sizeof p, "%s/newline", dir);
	write_file(p, "\n", 1);
	expect_open_fails(p, KVL_EINVAL, "empty", NULL);
	snprintf(p, sizeof p, "%s/short", dir);
	write_file(p, "SHORTSEKRT\n", 11);
	expect_open_fails(p, KVL_EINVAL, "at least 16", "SHORTSEKRT");
	snprintf(p, sizeof p, "%s/long", dir);
	char big[5000];
	memset(big, 'k', sizeof big);
	write_file(p, big, sizeof big);
	expect_open_fails(p, KVL_EINVAL, "longer than 4096", NULL);
	if (geteuid() != 0) { /* root reads any file */
		snprintf(p, sizeof p, "%s/unreadable", dir);
		write_file(p, SECRET_A, strlen(SECRET_A));
		ASSERT_EQ(chmod(p, 0), 0);
		expect_open_fails(p, KVL_EIO, "cannot open", NULL);
	}
	/* The embedded store checks the file too (mem: uses no key). */
	snprintf(p, sizeof p, "mem:?secret_file=%s/missing", dir);
	open_fails(p, KVL_EIO, "missing");
	snprintf(p, sizeof p, "mem:?secret_file=%s", path_a);
	kvl_store_close(open_ok(p));
}

static void test_secret_env(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_hash pages[1];
	make_pages(pages, 1, 500);
	char missing[160];
	snprintf(missing, sizeof missing, "%s/missing", dir);

	/* A bad KVL_SECRET_FILE fails every open that names none, and says
	 * where the path came from. */
	ASSERT_EQ(setenv("KVL_SECRET_FILE", missing, 1), 0);
	char msg[512] = "";
	kvl_store *s = NULL;
	ASSERT_CODE(kvl_store_open(store_uri(env_store() ? "" : "fault+",
	                                     NULL),
	                           &s, msg, sizeof msg),
	            KVL_EIO);
	ASSERT_CONTAINS(msg, "KVL_SECRET_FILE");
	ASSERT_CONTAINS(msg, missing);
	/* The URI's option wins over it. */
	kvl_store *w = open_with(path_a);

	/* KVL_SECRET_FILE=B keys a store without the option: it does not
	 * read A's objects; =A does. */
	write_pages(w, &src, pages, 1);
	ASSERT_EQ(setenv("KVL_SECRET_FILE", path_b, 1), 0);
	kvl_store *rd = open_with(NULL);
	share(w, rd, &src, &pages[0]);
	ASSERT_CODE(pages_get1(rd, &dst, &pages[0], 8), KVL_ECORRUPT);
	kvl_store_close(rd);
	ASSERT_EQ(setenv("KVL_SECRET_FILE", path_a, 1), 0);
	rd = open_with(NULL);
	share(w, rd, &src, &pages[0]);
	ASSERT_RC(rd, pages_get1(rd, &dst, &pages[0], 8), 0);
	kvl_store_close(rd);
	/* Set but empty: no secret. */
	ASSERT_EQ(setenv("KVL_SECRET_FILE", "", 1), 0);
	rd = open_with(NULL);
	share(w, rd, &src, &pages[0]);
	ASSERT_CODE(pages_get1(rd, &dst, &pages[0], 8), KVL_ECORRUPT);
	ASSERT_CONTAINS(kvl_store_errmsg(rd), "sealed with a secret");
	kvl_store_close(rd);
	ASSERT_EQ(unsetenv("KVL_SECRET_FILE"), 0);
	kvl_store_close(w);
	host_free(&src);
	host_free(&dst);
}

/* ======================================================= the tags */

static uint8_t g_nonce[16] = {1, 2, 3};

/* Tag `index` of the object with nonce g_nonce under key k, over msg. */
static void tag_of(const kvl__mac *k, uint32_t index, const char *msg,
                   uint8_t *tag)
{
	kvl__mac_stream st;
	ASSERT_EQ(kvl__mac_begin(k, index, g_nonce, &st), 0);
	kvl__mac_update(&st, msg, strlen(msg));
	ASSERT_EQ(kvl__mac_end(&st, tag), 0);
}

/* A tag depends on the key, the index, the nonce and the message, and
 * not on which key the thread derived with before (its AES context is
 * reused while the key stays the same). */
static void test_tags(void **state)
{
	(void)state;
	kvl__mac *a = NULL, *b = NULL, *a2 = NULL;
	ASSERT_EQ(kvl__mac_new(SECRET_A, strlen(SECRET_A), &a, NULL, 0), 0);
	ASSERT_EQ(kvl__mac_new(SECRET_B, strlen(SECRET_B), &b, NULL, 0), 0);
	uint8_t t1[16], t2[16], t3[16], t4[16], t5[16];
	tag_of(a, 0, "layer bytes", t1);
	tag_of(a, 0, "layer bytes", t2); /* the same key again */
	ASSERT_TRUE(kvl__mac_equal(t1, t2));
	tag_of(b, 0, "layer bytes", t3);
	ASSERT_TRUE(!kvl__mac_equal(t1, t3));
	tag_of(a, 0, "layer bytes", t2); /* back to A after B */
	ASSERT_TRUE(kvl__mac_equal(t1, t2));
	tag_of(a, 1, "layer bytes", t4);
	ASSERT_TRUE(!kvl__mac_equal(t1, t4));
	tag_of(a, 0, "layer byteS", t5);
	ASSERT_TRUE(!kvl__mac_equal(t1, t5));
	g_nonce[15] ^= 1;
	tag_of(a, 0, "layer bytes", t5);
	ASSERT_TRUE(!kvl__mac_equal(t1, t5));
	g_nonce[15] ^= 1;
	/* The same secret in another key: the same tags. */
	ASSERT_EQ(kvl__mac_new(SECRET_A, strlen(SECRET_A), &a2, NULL, 0), 0);
	tag_of(a2, 0, "layer bytes", t2);
	ASSERT_TRUE(kvl__mac_equal(t1, t2));
	kvl__mac_free(a);
	kvl__mac_free(b);
	kvl__mac_free(a2);
	char msg[128] = "";
	ASSERT_CODE(kvl__mac_new("short", 5, &a, msg, sizeof msg), KVL_EINVAL);
	ASSERT_TRUE(a == NULL);
}

/* ================================================================ (f) */

static void test_feature(void **state)
{
	(void)state;
	ASSERT_EQ(kvl_has_feature("mac"), 1);
}

int main(void)
{
	unsetenv("KVL_SECRET_FILE");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_same_secret_loads, next_test),
		cmocka_unit_test_setup(test_other_secret_corrupt, next_test),
		cmocka_unit_test_setup(test_unkeyed_object_refused, next_test),
		cmocka_unit_test_setup(test_forgeries, next_test),
		cmocka_unit_test_setup(test_secret_file_errors, next_test),
		cmocka_unit_test_setup(test_secret_env, next_test),
		cmocka_unit_test(test_tags),
		cmocka_unit_test(test_feature),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
