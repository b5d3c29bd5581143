/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mac.h — keyed integrity for objects kept outside the process (internal):
 * a store's secret and the one-time Poly1305 tags the page codec seals
 * objects with (format in codec.h, choice of MAC in docs/reliability.md).
 *
 * A key is the 32-byte master HMAC-SHA-256(file bytes, label) of a secret
 * file; the file's bytes are wiped once it is derived. Each tag has its own
 * Poly1305 key, derived from the master (as an AES-256 key), the tag's
 * index and the object's random 16-byte nonce, drawn for every object
 * written, so no Poly1305 key ever authenticates two different messages
 * (mac.c says how).
 *
 * A key is immutable once made and may be shared by every thread. The
 * OpenSSL contexts the tags are computed with are the calling thread's own,
 * made on its first tag and freed when it exits.
 */
#ifndef KVL_MAC_H
#define KVL_MAC_H

#include "core/internal.h"

#define KVL__MAC_TAG 16         /* bytes of a tag */
#define KVL__MAC_NONCE 16       /* bytes of an object's nonce */
#define KVL__SECRET_MIN 16      /* shortest secret accepted */
#define KVL__SECRET_MAX 4096    /* longest secret file accepted */

typedef struct kvl__mac kvl__mac;

/* A key from `len` secret bytes (KVL__SECRET_MIN..KVL__SECRET_MAX): 0 and
 * *out, or KVL_EINVAL (length) / KVL_ENOMEM / KVL_EIO (OpenSSL failed),
 * with a message in errbuf that never holds the bytes. */
int kvl__mac_new(const void *secret, size_t len, kvl__mac **out,
                 char *errbuf, size_t errlen);

/* A key from the secret file at `path`: its bytes less one trailing "\n"
 * or "\r\n". KVL_EIO when it cannot be opened or read; KVL_EINVAL when it
 * is not a regular file, is empty, shorter than KVL__SECRET_MIN bytes or
 * longer than KVL__SECRET_MAX. Every message names the path, never a byte
 * of the file. */
int kvl__mac_load(const char *path, kvl__mac **out, char *errbuf,
                  size_t errlen);

/* Frees a key (NULL: nothing), wiping it first. */
void kvl__mac_free(kvl__mac *key);

/* A random nonce for a new object: 0, or KVL_EIO when OpenSSL's random
 * generator fails (nothing may then be sealed). */
int kvl__mac_nonce(uint8_t nonce[KVL__MAC_NONCE]);

/* A one-time tag being computed: start it for tag number `index` of the
 * object whose nonce is `nonce`, feed it the message in any number of
 * pieces, finish it into tag. Each returns 0 or KVL_EIO (OpenSSL failed; a tag that could
 * not be computed never matches). A stream belongs to the calling thread
 * and holds one tag at a time. */
typedef struct kvl__mac_stream {
	void *ctx; /* the thread's Poly1305 context */
	int failed;
} kvl__mac_stream;

int kvl__mac_begin(const kvl__mac *key, uint32_t index,
                   const uint8_t nonce[KVL__MAC_NONCE], kvl__mac_stream *st);
void kvl__mac_update(kvl__mac_stream *st, const void *data, size_t len);
int kvl__mac_end(kvl__mac_stream *st, uint8_t tag[KVL__MAC_TAG]);

/* Whether two tags are equal, in time that does not depend on where they
 * differ: 1 or 0. */
int kvl__mac_equal(const uint8_t *a, const uint8_t *b);

#endif /* KVL_MAC_H */
