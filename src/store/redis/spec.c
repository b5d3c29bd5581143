/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spec.c — key slots, redirection errors and addresses of the
 * Redis Cluster specification, and INFO fields (see spec.h). Pure
 * functions: no state, no I/O, no allocation.
 */
#include <stdlib.h>
#include <string.h>

#include "store/redis/spec.h"

/* CRC16/XMODEM, one table entry per byte value (the table of the spec). */
static const uint16_t crc16_tab[256] = {
	0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
	0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
	0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
	0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
	0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
	0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
	0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
	0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
	0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
	0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
	0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
	0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
	0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
	0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
	0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
	0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
	0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
	0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
	0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
	0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
	0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
	0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
	0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
	0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
	0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
	0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
	0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
	0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
	0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
	0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
	0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
	0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

uint16_t kvl__redis_crc16(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint16_t crc = 0;
	for (size_t i = 0; i < len; i++)
		crc = (uint16_t)((crc << 8) ^ crc16_tab[((crc >> 8) ^ p[i]) & 0xff]);
	return crc;
}

uint16_t kvl__redis_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);
	if (open) {
		size_t at = (size_t)(open - key) + 1;
		const char *close = memchr(key + at, '}', len - at);
		if (close && close > key + at)
			return kvl__redis_crc16(key + at,
			                        (size_t)(close - (key + at))) &
			       (KVL__REDIS_SLOTS - 1);
	}
	return kvl__redis_crc16(key, len) & (KVL__REDIS_SLOTS - 1);
}

/* 1 if msg (len bytes) starts with the word `w` (followed by a space, or
 * the end). */
static int starts_word(const char *msg, size_t len, const char *w)
{
	size_t n = strlen(w);
	return len >= n && memcmp(msg, w, n) == 0 && (len == n || msg[n] == ' ');
}

/* Parses decimal digits [s, end) into *out (at most max). -1 if none, a
 * non-digit, or above max. */
static int parse_uint(const char *s, const char *end, unsigned long max,
                      unsigned long *out)
{
	unsigned long v = 0;
	if (s == end)
		return -1;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > max)
			return -1;
	}
	*out = v;
	return 0;
}

int kvl__redis_parse_addr(const char *s, size_t len, char *host, int *port)
{
	const char *end = s + len, *h = s, *hend, *colon = NULL;
	unsigned long p = KVL__REDIS_DEFAULT_PORT;

	if (len && s[0] == '[') {
		const char *rb = memchr(s, ']', len);
		if (!rb)
			return -1;
		h = s + 1;
		hend = rb;
		if (rb + 1 < end) {
			if (rb[1] != ':')
				return -1;
			colon = rb + 1;
		}
	} else {
		for (const char *c = end; c > s; c--)
			if (c[-1] == ':') {
				colon = c - 1;
				break;
			}
		hend = colon ? colon : end;
	}
	if (colon && parse_uint(colon + 1, end, 65535, &p) < 0)
		return -1;
	if (p == 0)
		return -1;
	size_t hl = (size_t)(hend - h);
	if (hl == 0 || hl >= KVL__REDIS_HOST_MAX)
		return -1;
	for (size_t i = 0; i < hl; i++) /* no NUL, space or control byte */
		if ((unsigned char)h[i] <= ' ' || h[i] == 0x7f)
			return -1;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (int)p;
	return 0;
}

kvl__redis_err_kind kvl__redis_classify(const char *msg, size_t len,
                                        uint16_t *slot, char *host,
                                        int *port)
{
	int moved = starts_word(msg, len, "MOVED");
	if (moved || starts_word(msg, len, "ASK")) {
		/* "MOVED 3999 127.0.0.1:6381" */
		const char *end = msg + len;
		const char *s = msg + (moved ? 6 : 4);
		if (s >= end)
			return KVL__REDIS_ERR_OTHER;
		const char *sp = memchr(s, ' ', (size_t)(end - s));
		unsigned long sl;
		if (!sp || parse_uint(s, sp, KVL__REDIS_SLOTS - 1, &sl) < 0)
			return KVL__REDIS_ERR_OTHER;
		char h[KVL__REDIS_HOST_MAX];
		int p;
		const char *a = sp + 1;
		size_t alen = (size_t)(end - a);
		/* Redirections print "ip:port" with IPv6 unbracketed, and
		 * ":port" when the node does not know its address. */
		if (!memchr(a, ':', alen))
			return KVL__REDIS_ERR_OTHER;
		if (a[0] == ':' && !memchr(a + 1, ':', alen - 1)) {
			unsigned long v;
			if (parse_uint(a + 1, end, 65535, &v) < 0 || v == 0)
				return KVL__REDIS_ERR_OTHER;
			h[0] = '\0';
			p = (int)v;
		} else if (kvl__redis_parse_addr(a, alen, h, &p) < 0) {
			return KVL__REDIS_ERR_OTHER;
		}
		if (slot)
			*slot = (uint16_t)sl;
		if (host)
			memcpy(host, h, strlen(h) + 1);
		if (port)
			*port = p;
		return moved ? KVL__REDIS_ERR_MOVED : KVL__REDIS_ERR_ASK;
	}
	static const char *const again[] = { "TRYAGAIN", "CLUSTERDOWN",
		                             "LOADING", "MASTERDOWN", "BUSY" };
	for (size_t i = 0; i < sizeof again / sizeof again[0]; i++)
		if (starts_word(msg, len, again[i]))
			return KVL__REDIS_ERR_TRYAGAIN;
	if (starts_word(msg, len, "READONLY"))
		return KVL__REDIS_ERR_READONLY;
	if (starts_word(msg, len, "OOM"))
		return KVL__REDIS_ERR_OOM;
	if (starts_word(msg, len, "NOAUTH") || starts_word(msg, len, "WRONGPASS") ||
	    starts_word(msg, len, "NOPERM"))
		return KVL__REDIS_ERR_AUTH;
	return KVL__REDIS_ERR_OTHER;
}

uint64_t kvl__redis_info_u64(const char *text, const char *name, int *found)
{
	size_t n = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (strncmp(p, name, n) == 0 && p[n] == ':') {
			*found = 1;
			return strtoull(p + n + 1, NULL, 10);
		}
	}
	*found = 0;
	return 0;
}
