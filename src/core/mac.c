/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mac.c — store secrets and one-time Poly1305 tags (mac.h), on OpenSSL's
 * EVP_MAC.
 *
 * Why Poly1305: of OpenSSL's MACs it and GMAC are the only ones fast enough
 * to check a Redis or Mooncake load on one core (docs/reliability.md has
 * the measurements); a fresh Poly1305 key is just 32 bytes, where a fresh
 * GMAC key costs an AES key schedule and a GHASH table.
 *
 * Tag keys: the master key is an AES-256 key; tag `index` of the object
 * with nonce N gets the Poly1305 key AES(N ^ E(index, 0)) || AES(N ^
 * E(index, 1)), where E(i, j) is the block le32(i), j, then 11 zero bytes:
 * distinct (N, index) give distinct inputs, and as N is 128 random bits
 * per object written, no two messages ever share a key. Two AES blocks
 * cost about 30 ns; an HMAC-SHA-256 derivation cost ten times that, which
 * dominated the check of small layers. The object's identity (fingerprint,
 * page hash, length) is bound by the header's own tag, which covers it,
 * the nonce and every layer tag, and which every reader checks before any
 * layer (codec.h).
 *
 * Threads: a key is read-only after kvl__mac_new. Each thread that computes
 * a tag gets its own HMAC, AES and Poly1305 contexts from `tls_slot` (a
 * pthread key whose destructor frees them when the thread exits); the
 * algorithms are fetched once per process under `once`. A thread's AES
 * context stays keyed with the last key it derived with (by the key's
 * process-unique id, never its address, which a later key may reuse), so
 * it holds that key's schedule until it is keyed again or its thread
 * exits, also after kvl__mac_free.
 */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mac.h"

#define MASTER_BYTES 32

static const char master_label[] = "kvlink secret v1";

struct kvl__mac {
	uint8_t master[MASTER_BYTES];
	uint64_t id; /* unique in the process: which key a context holds */
};

static _Atomic uint64_t next_id = 1;

/* -------------------------------------------------- per-thread contexts */

typedef struct mac_tls {
	EVP_MAC_CTX *hmac;    /* master keys from secrets */
	EVP_CIPHER_CTX *aes;  /* tag keys */
	EVP_MAC_CTX *poly;
	uint64_t aes_key;     /* the id of the key aes is keyed with; 0: none */
} mac_tls;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t tls_slot;
static int tls_ok;
static EVP_MAC *alg_hmac, *alg_poly;
static EVP_CIPHER *alg_aes;

static void tls_free(void *v)
{
	mac_tls *t = v;
	if (!t)
		return;
	EVP_MAC_CTX_free(t->hmac);
	EVP_CIPHER_CTX_free(t->aes);
	EVP_MAC_CTX_free(t->poly);
	free(t);
}

static void tls_init(void)
{
	alg_hmac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
	alg_poly = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_POLY1305, NULL);
	alg_aes = EVP_CIPHER_fetch(NULL, "AES-256-ECB", NULL);
	tls_ok = alg_hmac && alg_poly && alg_aes &&
	         pthread_key_create(&tls_slot, tls_free) == 0;
}

/* The calling thread's contexts, made on its first call; NULL when OpenSSL
 * or memory failed. */
static mac_tls *tls_get(void)
{
	pthread_once(&once, tls_init);
	if (!tls_ok)
		return NULL;
	mac_tls *t = pthread_getspecific(tls_slot);
	if (t)
		return t;
	t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	char digest[] = "SHA256";
	OSSL_PARAM prm[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest,
		                                 0),
		OSSL_PARAM_construct_end()};
	t->hmac = EVP_MAC_CTX_new(alg_hmac);
	t->aes = EVP_CIPHER_CTX_new();
	t->poly = EVP_MAC_CTX_new(alg_poly);
	if (!t->hmac || !t->aes || !t->poly ||
	    !EVP_MAC_CTX_set_params(t->hmac, prm) ||
	    pthread_setspecific(tls_slot, t) != 0) {
		tls_free(t);
		return NULL;
	}
	return t;
}

/* HMAC-SHA-256 of the pieces under `key` into out (32 bytes). */
static int hmac_sha256(EVP_MAC_CTX *c, const uint8_t *key, size_t key_len,
                       const kvl_iov *parts, size_t n, uint8_t *out)
{
	size_t got = 0;
	if (!EVP_MAC_init(c, key, key_len, NULL))
		return KVL_EIO;
	for (size_t i = 0; i < n; i++)
		if (!EVP_MAC_update(c, parts[i].addr, parts[i].len))
			return KVL_EIO;
	if (!EVP_MAC_final(c, out, &got, 32) || got != 32)
		return KVL_EIO;
	return 0;
}

/* --------------------------------------------------------------- keys */

int kvl__mac_new(const void *secret, size_t len, kvl__mac **out,
                 char *errbuf, size_t errlen)
{
	*out = NULL;
	if (len < KVL__SECRET_MIN || len > KVL__SECRET_MAX)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "a secret needs %d to %d bytes, not %zu",
		                     KVL__SECRET_MIN, KVL__SECRET_MAX, len);
	mac_tls *t = tls_get();
	kvl__mac *k = calloc(1, sizeof *k);
	if (!k)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "secret: out of memory");
	kvl_iov msg = {.addr = (void *)master_label,
	               .len = sizeof master_label - 1};
	k->id = atomic_fetch_add(&next_id, 1);
	if (!t || hmac_sha256(t->hmac, secret, len, &msg, 1, k->master)) {
		kvl__mac_free(k);
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "secret: OpenSSL HMAC-SHA-256 or Poly1305 "
		                     "is unavailable");
	}
	*out = k;
	return 0;
}

int kvl__mac_load(const char *path, kvl__mac **out, char *errbuf,
                  size_t errlen)
{
	*out = NULL;
	/* O_NONBLOCK: a FIFO must not hang the open (it is refused below as
	 * not a regular file); regular files ignore it. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "secret_file '%s': cannot open: %s", path,
		                     strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "secret_file '%s' is not a regular file",
		                     path);
	}
	uint8_t buf[KVL__SECRET_MAX + 2];
	size_t len = 0;
	int err = 0;
	while (len < sizeof buf) {
		ssize_t r = read(fd, buf + len, sizeof buf - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			err = errno;
			break;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	int rc;
	if (err) {
		rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                   "secret_file '%s': cannot read: %s", path,
		                   strerror(err));
		goto out;
	}
	if (len && buf[len - 1] == '\n')
		len--;
	if (len && buf[len - 1] == '\r')
		len--;
	if (len == 0)
		rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                   "secret_file '%s' is empty", path);
	else if (len < KVL__SECRET_MIN)
		rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                   "secret_file '%s' holds %zu bytes; a secret "
		                   "needs at least %d (e.g. 32 random bytes)",
		                   path, len, KVL__SECRET_MIN);
	else if (len > KVL__SECRET_MAX)
		rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                   "secret_file '%s' is longer than %d bytes",
		                   path, KVL__SECRET_MAX);
	else if ((rc = kvl__mac_new(buf, len, out, errbuf, errlen)) < 0)
		kvl__fail_buf(errbuf, errlen, rc, "secret_file '%s': %s", path,
		              rc == KVL_ENOMEM ? "out of memory"
		                               : "OpenSSL cannot derive a key");
out:
	OPENSSL_cleanse(buf, sizeof buf);
	return rc;
}

void kvl__mac_free(kvl__mac *key)
{
	if (!key)
		return;
	OPENSSL_cleanse(key, sizeof *key);
	free(key);
}

int kvl__mac_nonce(uint8_t nonce[KVL__MAC_NONCE])
{
	return RAND_bytes(nonce, KVL__MAC_NONCE) == 1 ? 0 : KVL_EIO;
}

/* --------------------------------------------------------------- tags */

/* The thread's AES context keyed with `key`: 0 or KVL_EIO. */
static int aes_keyed(mac_tls *t, const kvl__mac *key)
{
	if (t->aes_key == key->id)
		return 0;
	t->aes_key = 0;
	if (!EVP_EncryptInit_ex2(t->aes, alg_aes, key->master, NULL, NULL) ||
	    !EVP_CIPHER_CTX_set_padding(t->aes, 0))
		return KVL_EIO;
	t->aes_key = key->id;
	return 0;
}

int kvl__mac_begin(const kvl__mac *key, uint32_t index,
                   const uint8_t nonce[KVL__MAC_NONCE], kvl__mac_stream *st)
{
	st->ctx = NULL;
	st->failed = 1;
	mac_tls *t = tls_get();
	if (!t || aes_keyed(t, key))
		return KVL_EIO;
	uint8_t in[2 * KVL__MAC_NONCE], otk[2 * KVL__MAC_NONCE];
	for (int j = 0; j < 2; j++) {
		uint8_t *b = in + j * KVL__MAC_NONCE, e[5];
		kvl__put_u32le(e, index);
		e[4] = (uint8_t)j;
		memcpy(b, nonce, KVL__MAC_NONCE);
		for (int k = 0; k < 5; k++)
			b[k] ^= e[k];
	}
	int got = 0, rc = 0;
	if (!EVP_EncryptUpdate(t->aes, otk, &got, in, sizeof in) ||
	    got != (int)sizeof otk ||
	    !EVP_MAC_init(t->poly, otk, sizeof otk, NULL))
		rc = KVL_EIO;
	OPENSSL_cleanse(otk, sizeof otk);
	if (rc)
		return rc;
	st->ctx = t->poly;
	st->failed = 0;
	return 0;
}

void kvl__mac_update(kvl__mac_stream *st, const void *data, size_t len)
{
	if (!st->failed && len && !EVP_MAC_update(st->ctx, data, len))
		st->failed = 1;
}

int kvl__mac_end(kvl__mac_stream *st, uint8_t tag[KVL__MAC_TAG])
{
	size_t got = 0;
	if (st->failed ||
	    !EVP_MAC_final(st->ctx, tag, &got, KVL__MAC_TAG) ||
	    got != KVL__MAC_TAG) {
		/* Zeros, and the code says they are no tag: the caller
		 * treats the field as not matching. */
		memset(tag, 0, KVL__MAC_TAG);
		st->failed = 1;
		return KVL_EIO;
	}
	return 0;
}

int kvl__mac_equal(const uint8_t *a, const uint8_t *b)
{
	return CRYPTO_memcmp(a, b, KVL__MAC_TAG) == 0;
}
