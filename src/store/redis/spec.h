/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spec.h — the pure parts of the Redis Cluster specification (and of
 * INFO replies) that the redis:// store needs (internal; no I/O, no
 * hiredis types).
 *
 *  - Key slots: CRC16 (XMODEM: polynomial 0x1021, initial value 0, no
 *    reflection) of the key, or of its hash tag, modulo 16384. The hash tag
 *    is the part between the first '{' and the first '}' after it, when that
 *    part is not empty; otherwise the whole key is hashed.
 *  - Redirections: the error replies "MOVED <slot> <host>:<port>" and
 *    "ASK <slot> <host>:<port>" (the host may be empty when the node does
 *    not know its address: the caller then uses the host it asked).
 *  - Addresses: "host:port", "[v6addr]:port" or "host" (port 6379); an
 *    unbracketed address with several ':' splits at the last one, as Redis
 *    prints IPv6 endpoints in redirections.
 *  - INFO replies: lines "name:value" (CRLF-terminated), under "# Section"
 *    headings.
 *
 * Every function is thread-safe and allocates nothing.
 */
#ifndef KVL_REDIS_SPEC_H
#define KVL_REDIS_SPEC_H

#include <stddef.h>
#include <stdint.h>

#define KVL__REDIS_SLOTS 16384
#define KVL__REDIS_HOST_MAX 256 /* bytes of a host name, with its NUL */
#define KVL__REDIS_DEFAULT_PORT 6379

/* CRC16/XMODEM of len bytes. crc16("123456789") == 0x31c3. */
uint16_t kvl__redis_crc16(const void *buf, size_t len);

/* The cluster slot (0..16383) of a key of len bytes, hash tags honoured. */
uint16_t kvl__redis_key_slot(const char *key, size_t len);

/* Kinds of error reply that route a command elsewhere or ask for a retry. */
typedef enum kvl__redis_err_kind {
	KVL__REDIS_ERR_OTHER = 0, /* anything else: a failure of the key */
	KVL__REDIS_ERR_MOVED,     /* the slot lives elsewhere from now on */
	KVL__REDIS_ERR_ASK,       /* this one command goes elsewhere */
	KVL__REDIS_ERR_TRYAGAIN,  /* TRYAGAIN, CLUSTERDOWN, LOADING,
	                           * MASTERDOWN, BUSY: retry later */
	KVL__REDIS_ERR_READONLY,  /* a write reached a replica */
	KVL__REDIS_ERR_OOM,       /* maxmemory reached with noeviction */
	KVL__REDIS_ERR_AUTH,      /* NOAUTH, WRONGPASS, NOPERM */
} kvl__redis_err_kind;

/* Classifies the error reply `msg` (len bytes, without the leading '-' and
 * the trailing CRLF). For MOVED and ASK also parses the slot and target:
 * host (NUL-terminated, possibly empty) into host[KVL__REDIS_HOST_MAX] and
 * the port into *port; a malformed redirection is KVL__REDIS_ERR_OTHER.
 * slot, host and port may be NULL for the other kinds. */
kvl__redis_err_kind kvl__redis_classify(const char *msg, size_t len,
                                        uint16_t *slot, char *host,
                                        int *port);

/* Parses one address of `len` bytes (see above) into host (NUL-terminated,
 * KVL__REDIS_HOST_MAX bytes) and *port. Returns 0, or -1 when the host is
 * empty, too long or holds a NUL, space or control byte, or the port is not
 * 1..65535. */
int kvl__redis_parse_addr(const char *s, size_t len, char *host, int *port);

/* The value of "name:value" in the INFO text `text` (NUL-terminated), as
 * an unsigned decimal, with *found = 1; 0 with *found = 0 when no line
 * starts with "name:". */
uint64_t kvl__redis_info_u64(const char *text, const char *name, int *found);

#endif /* KVL_REDIS_SPEC_H */
