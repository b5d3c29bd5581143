/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_obj_header.c — libFuzzer target: the page codec's object header
 * decoder (kvl__obj_header_check, kvl__obj_layer_ok) on arbitrary bytes,
 * and its one read check (kvl__read_check, what every load path of the
 * linker runs) over damaged objects, through kvl_pages_get and directly.
 *
 * Input byte 0 picks the mode:
 *
 *  even: a raw header. Bit 1 of byte 0 makes the reader hold a key (a
 *        fixed test secret). The next 4 bytes give the layer count the
 *        reader expects (small most of the time), then 16 bytes of pool
 *        fingerprint, 32 of page hash and 8 of payload length; the rest is
 *        the header bytes. Checked: the decoder never reads past them; when
 *        it accepts them unkeyed, writing a header for the same id with
 *        the layer fields (or the "unsummed" flag) it carries gives the
 *        same bytes (every accepted header is the one canonical header of
 *        its id); when it accepts them keyed, they say keyed and sealing
 *        them again with the key gives the same bytes; kvl__obj_layer_ok
 *        agrees with the stored fields.
 *
 *  odd:  a stored page. A real object of a two-pool layout is put in a
 *        verifying store ("mem:?verify=1", or with bit 1 of the next byte
 *        set one with a secret_file), then damaged as the input says
 *        (byte flips at chosen offsets, a new length: truncated or
 *        extended) and read back with kvl_pages_get, one layer or all.
 *        Checked: the result is 0, KVL_ECORRUPT or KVL_ENOTFOUND; when it
 *        is 0 the stored object covers the layers read and the
 *        destination slot holds exactly its payload bytes of those layers
 *        (a truncated object may still serve the layers it holds whole);
 *        nothing outside the slot is written; and kvl__read_check over
 *        the damaged object's bytes in memory (as the GPU load paths
 *        check a ring or a store's view) gives the same verdict; a keyed
 *        object never passes a reader without the key, nor with another.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/layout.h"
#include "core/codec.h"
#include "store/store.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr,                                      \
			        "fuzz_obj_header: check failed: %s (line %d)\n", \
			        #cond, __LINE__);                            \
			abort();                                             \
		}                                                            \
	} while (0)

/* The fixed test secrets: A seals, B is another engine's. */
static const char secret_a[] = "fuzz secret A: 0123456789abcdef";
static const char secret_b[] = "fuzz secret B: 0123456789abcdef";

static kvl__mac *test_key(const char *secret)
{
	kvl__mac *k = NULL;
	CHECK(kvl__mac_new(secret, strlen(secret), &k, NULL, 0) == 0);
	return k;
}

/* ------------------------------------------------------------ raw header */

static kvl__mac *raw_key;

static void raw_key_free(void)
{
	kvl__mac_free(raw_key);
}

static void raw_header(const uint8_t *d, size_t n, int keyed)
{
	if (keyed && !raw_key) {
		raw_key = test_key(secret_a);
		atexit(raw_key_free);
	}
	const kvl__mac *key = keyed ? raw_key : NULL;
	if (n < 4 + KVL__FP_BYTES + KVL_HASH_BYTES + 8)
		return;
	uint32_t layers = kvl__get_u32le(d);
	/* Mostly small counts; sometimes any u32 (the size check must hold). */
	if (!(layers & 0x80000000u))
		layers %= 70;
	d += 4;
	n -= 4;
	uint8_t fp[KVL__FP_BYTES];
	kvl_hash page;
	memcpy(fp, d, sizeof fp);
	memcpy(page.bytes, d + sizeof fp, KVL_HASH_BYTES);
	uint64_t payload = kvl__get_u64le(d + sizeof fp + KVL_HASH_BYTES);
	d += sizeof fp + KVL_HASH_BYTES + 8;
	n -= sizeof fp + KVL_HASH_BYTES + 8;

	/* An exact-size copy, so ASan sees any read past the end. */
	uint8_t *hdr = malloc(n ? n : 1);
	if (!hdr)
		return;
	memcpy(hdr, d, n);
	kvl__obj_id id = {.fp = fp, .page = &page, .payload_len = payload,
	                  .n_layers = layers};
	const char *why = NULL;
	int rc = kvl__obj_header_check(hdr, n, &id, key, &why);
	if (rc) {
		CHECK(rc == KVL_ECORRUPT && why && why[0]);
		free(hdr);
		return;
	}
	size_t size = kvl__obj_header_size(layers);
	CHECK(size <= n && size % 64 == 0);
	unsigned flags = (unsigned)(hdr[6] | hdr[7] << 8);
	int unsummed = flags & KVL__OBJ_UNSUMMED;
	CHECK(!(flags & KVL__OBJ_KEYED) == !keyed);
	const size_t fb = KVL__OBJ_FIELD;
	uint8_t *fields = calloc(layers ? layers : 1, fb);
	uint8_t *canon = malloc(size);
	if (fields && canon) {
		memcpy(fields, hdr + 88, fb * layers);
		if (keyed) {
			memcpy(canon, hdr, size);
			CHECK(kvl__obj_header_seal(canon, key) == 0);
		} else {
			CHECK(kvl__obj_header_write(canon, &id,
			                            unsummed ? NULL : fields,
			                            NULL) == 0);
		}
		if (unsummed)
			for (size_t i = 0; i < fb * layers; i++)
				CHECK(fields[i] == 0);
		CHECK(memcmp(canon, hdr, size) == 0);
		for (uint32_t i = 0; i < layers; i++) {
			uint8_t *f = fields + fb * i;
			int ok = kvl__obj_layer_ok(hdr, i, f);
			CHECK(unsummed ? ok == KVL_ECORRUPT : ok == 0);
			f[0] ^= 1;
			CHECK(kvl__obj_layer_ok(hdr, i, f) == KVL_ECORRUPT);
		}
	}
	free(fields);
	free(canon);
	free(hdr);
}

/* ----------------------------------------------------------- stored page */

#define SLOTS 4
#define LAYERS 3
#define K_BYTES 24
#define V_BYTES 40
#define STRIDE 72 /* K, V and a gap */
#define GUARD 0xA5

/* The engine memory: [guard | kv layer 0 | kv layer 1 | kv layer 2 |
 * swa layer 2 | guard]. */
#define KV_BYTES ((size_t)LAYERS * SLOTS * STRIDE)
#define SWA_BYTES ((size_t)SLOTS * 32)
#define MEM_BYTES ((64 + KV_BYTES + SWA_BYTES + 64 + 63) / 64 * 64)

struct fixture {
	uint8_t *mem;
	kvl_layout *l;
	int kv, swa;
	kvl_store *st;  /* unkeyed */
	kvl_store *sst; /* with secret A */
	kvl__mac *b;    /* secret B */
};

static struct fixture f;

/* The store's object records live in mmap'd slabs, which LeakSanitizer
 * does not scan: close it before the leak check at exit. */
static void fixture_free(void)
{
	kvl_store_close(f.st);
	kvl_store_close(f.sst);
	kvl__mac_free(f.b);
	kvl_layout_free(f.l);
	free(f.mem);
}

static struct fixture *fixture(void)
{
	if (f.st)
		return &f;
	atexit(fixture_free);
	f.mem = aligned_alloc(64, MEM_BYTES);
	CHECK(f.mem);
	CHECK(kvl_layout_create("fuzz/bf16", 16, NULL, &f.l, NULL, 0) == 0);
	CHECK(kvl_layout_add_pool(f.l, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                          &f.kv) == 0);
	CHECK(kvl_layout_add_pool(f.l, "swa", KVL_HIT_TRAILING_PAGES, 1, 0,
	                          &f.swa) == 0);
	for (uint32_t ly = 0; ly < LAYERS; ly++) {
		uint8_t *base = f.mem + 64 + (size_t)ly * SLOTS * STRIDE;
		kvl_buffer k = {.base = base, .page_stride = STRIDE,
		                .page_bytes = K_BYTES, .num_pages = SLOTS};
		kvl_buffer v = k;
		v.base = base + K_BYTES;
		v.page_bytes = V_BYTES;
		CHECK(kvl_layout_add_buffer(f.l, f.kv, "k", ly, &k) == 0);
		CHECK(kvl_layout_add_buffer(f.l, f.kv, "v", ly, &v) == 0);
	}
	kvl_buffer w = {.base = f.mem + 64 + KV_BYTES, .page_stride = 32,
	                .page_bytes = 32, .num_pages = SLOTS};
	CHECK(kvl_layout_add_buffer(f.l, f.swa, "w", 2, &w) == 0);
	CHECK(kvl_layout_finalize(f.l) == 0);
	CHECK(kvl_store_open("mem:?capacity=1MiB&verify=1", &f.st, NULL,
	                     0) == 0);
	/* The keyed store's secret file lives only until it is open. */
	char path[] = "/tmp/fuzz_obj_header.XXXXXX", uri[128];
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, secret_a, strlen(secret_a)) ==
	      (ssize_t)strlen(secret_a));
	close(fd);
	snprintf(uri, sizeof uri,
	         "mem:?capacity=1MiB&verify=1&secret_file=%s", path);
	int rc = kvl_store_open(uri, &f.sst, NULL, 0);
	unlink(path);
	CHECK(rc == 0 && kvl__store_mac(f.sst));
	f.b = test_key(secret_b);
	return &f;
}

/* The payload bytes of `layer` (KVL_ALL_LAYERS: every layer) of `pool` in
 * slot `slot`, in object order, into out; their count. */
static size_t slot_bytes(const struct fixture *f, int pool, size_t slot,
                         uint32_t layer, uint8_t *out)
{
	kvl_iov pc[2 * LAYERS];
	size_t n = 0, len = 0;
	CHECK(kvl_layout_page_pieces(f->l, pool, slot, layer, pc, 2 * LAYERS,
	                             &n) == 0);
	for (size_t i = 0; i < n; i++) {
		memcpy(out + len, pc[i].addr, pc[i].len);
		len += pc[i].len;
	}
	return len;
}

static void stored_page(const uint8_t *d, size_t n)
{
	struct fixture *f = fixture();
	if (n < 4)
		return;
	int pool = d[0] & 1 ? f->swa : f->kv;
	uint32_t layer = d[0] & 2 ? KVL_ALL_LAYERS
	                          : pool == f->swa ? 2 : (d[0] >> 2) % LAYERS;
	uint16_t new_len = (uint16_t)(d[1] | d[2] << 8);
	int resize = d[3] & 1;
	kvl_store *st = d[3] & 2 ? f->sst : f->st;
	const kvl__mac *mk = kvl__store_mac(st);
	d += 4;
	n -= 4;

	/* Slot 0 holds the page; slot 1 receives it. */
	kvl_hash page;
	for (int i = 0; i < KVL_HASH_BYTES; i++)
		page.bytes[i] = (uint8_t)(i * 13 + 1);
	memset(f->mem, GUARD, MEM_BYTES);
	kvl_iov pc[2 * LAYERS];
	size_t np = 0;
	CHECK(kvl_layout_page_pieces(f->l, pool, 0, KVL_ALL_LAYERS, pc,
	                             2 * LAYERS, &np) == 0);
	for (size_t i = 0; i < np; i++)
		for (size_t j = 0; j < pc[i].len; j++)
			((uint8_t *)pc[i].addr)[j] = (uint8_t)(i * 31 + j);
	char key[KVL_KEY_MAX];
	CHECK(kvl_layout_key(f->l, pool, &page, key, sizeof key) == 0);
	const char *kp = key;
	int res = -100;
	CHECK(kvl_store_remove(st, &kp, 1, &res) == 0);
	size_t zero = 0;
	CHECK(kvl_pages_put(st, f->l, pool, &page, &zero, 1, &res) == 0);
	CHECK(res == KVL_PUT_STORED);

	/* Read the object, damage it, store it again. */
	size_t osize = 0;
	CHECK(kvl_layout_object_size(f->l, pool, &osize, NULL) == 0);
	size_t cap = osize > new_len ? osize : new_len;
	uint8_t *obj = calloc(1, cap ? cap : 1);
	CHECK(obj);
	kvl_range rg = {.offset = 0, .addr = obj, .len = osize};
	size_t one = 1;
	int got = -100;
	CHECK(kvl_store_get(st, &kp, 1, &rg, &one, &got) == 0);
	CHECK(got == 0);
	size_t len = resize ? new_len : osize;
	for (size_t i = 0; i + 3 <= n; i += 3) {
		size_t off = (size_t)(d[i] | d[i + 1] << 8);
		if (len && d[i + 2])
			obj[off % len] ^= d[i + 2];
	}
	CHECK(kvl_store_remove(st, &kp, 1, &res) == 0 && res == 1);
	kvl_iov whole = {obj, len};
	res = -100;
	CHECK(kvl_store_put(st, &kp, 1, &whole, &one, &res) == 0);
	if (res != KVL_PUT_STORED) { /* e.g. an empty object refused */
		CHECK(res < 0);
		free(obj);
		return;
	}

	size_t slot = 1;
	res = -100;
	CHECK(kvl_pages_get(st, f->l, pool, &page, &slot, 1, layer,
	                    &res) == 0);
	CHECK(res == 0 || res == KVL_ECORRUPT || res == KVL_ENOTFOUND);
	/* The same object checked as the GPU paths check it, its bytes
	 * contiguous in memory (a ring or a store's view), with the same
	 * layers read: the verdict is the same. */
	if (res != KVL_ENOTFOUND) {
		const kvl__pool *p = &f->l->pools[pool];
		kvl__read rd = kvl__read_plan(
			p, layer == KVL_ALL_LAYERS ? NULL : kvl__pool_layer(p, layer),
			0);
		rd.header = 1;
		int result = len < p->header_size || len < rd.offset + rd.span
		                     ? KVL_ERANGE
		                     : 0;
		const char *why = NULL;
		int rc = kvl__read_check(p, &page, &rd, result, obj,
		                         obj + rd.offset, 0, 1, mk, &why);
		CHECK(rc == res);
		CHECK(rc == 0 || (why && why[0]));
		/* Keyed: never valid to a reader with another key or none;
		 * unkeyed: never valid to a reader with a key. */
		CHECK(kvl__read_check(p, &page, &rd, result, obj,
		                      obj + rd.offset, 0, 1, f->b, NULL) != 0);
		if (mk)
			CHECK(kvl__read_check(p, &page, &rd, result, obj,
			                      obj + rd.offset, 0, 1, NULL,
			                      NULL) != 0);
	}
	if (res == 0) {
		/* The header is intact: the object is this page's. */
		size_t hsize = 0;
		CHECK(kvl_layout_object_size(f->l, pool, NULL, &hsize) == 0);
		uint8_t *have = malloc(osize);
		CHECK(have);
		/* Slot 1 must hold the stored payload of the layers read. */
		size_t lo = hsize, hi = osize;
		if (layer != KVL_ALL_LAYERS) {
			size_t loff = 0, llen = 0;
			CHECK(kvl_layout_layer_range(f->l, pool, layer, &loff,
			                             &llen) == 0);
			lo = loff;
			hi = loff + llen;
		}
		/* A truncated object may still hold the layers read (the
		 * others then fail): what was read must be there. */
		CHECK(len >= hi);
		size_t hn = slot_bytes(f, pool, 1, layer, have);
		CHECK(hn == hi - lo);
		CHECK(memcmp(have, obj + lo, hn) == 0);
		free(have);
	}
	/* Nothing outside slot 1 changed: the guards and slots 2, 3. */
	for (size_t i = 0; i < 64; i++) /* (the tail guard is >= 64 bytes) */
		CHECK(f->mem[i] == GUARD && f->mem[MEM_BYTES - 1 - i] == GUARD);
	for (size_t s = 2; s < SLOTS; s++) {
		uint8_t buf[LAYERS * (K_BYTES + V_BYTES) + 32];
		size_t bn = slot_bytes(f, pool, s, KVL_ALL_LAYERS, buf);
		for (size_t i = 0; i < bn; i++)
			CHECK(buf[i] == GUARD);
	}
	free(obj);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		stored_page(data + 1, size - 1);
	else
		raw_header(data + 1, size - 1, data[0] & 2);
	return 0;
}
