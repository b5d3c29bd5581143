/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_file_store.c — what the file: store promises beyond the contract
 * every store keeps (test_store.c runs that on it): bad directories and
 * options, processes sharing one directory at once, a writer killed with
 * SIGKILL at random moments, a restart, the capacity held across
 * processes with LRU order between them, damaged object and index files,
 * a tmpfs directory (where O_DIRECT may be refused), and a process whose
 * seccomp filter refuses io_uring (as Docker's default profile does; in a
 * build without liburing, io=uring reading through preads instead).
 *
 * Processes are forked children that open the store themselves (a handle
 * belongs to the process that opened it) and report through their exit
 * status; every byte they read is compared with the pattern it must have.
 * Each test works in a throwaway directory under $TMPDIR.
 */
#include <dirent.h>
#include <pthread.h>
#include <sys/resource.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/kvl_assert.h"
#include "support/rand.h"
#include "support/stores.h"
#include "support/tmpdir.h"

#include "kvl_config.h"
#include "store/store.h"
#include "kvlink.h"

/* --------------------------------------------------------------- helpers */

/* Object i's length: 1 to ~300 KiB, often not a multiple of a page. */
static size_t obj_len(unsigned i)
{
	return 1 + (size_t)(i * 7919u % 300) * 1021u;
}

static void obj_key(char *buf, size_t n, unsigned i)
{
	snprintf(buf, n, "obj/%u", i);
}

static char *uri_of(const char *dir, const char *opts)
{
	size_t n = strlen(dir) + (opts ? strlen(opts) : 0) + 8;
	char *u = malloc(n);
	assert_non_null(u);
	snprintf(u, n, "file:%s%s%s", dir, opts ? "?" : "", opts ? opts : "");
	return u;
}

static kvl_store *open_dir(const char *dir, const char *opts)
{
	char *u = uri_of(dir, opts);
	kvl_store *s = open_ok(u);
	free(u);
	return s;
}

/* In a child: opens the store or exits with 100. */
static kvl_store *child_open(const char *dir, const char *opts)
{
	char *u = uri_of(dir, opts);
	kvl_store *s = NULL;
	char eb[512];
	if (kvl_store_open(u, &s, eb, sizeof eb)) {
		fprintf(stderr, "child: open %s: %s\n", u, eb);
		_exit(100);
	}
	free(u);
	return s;
}

/* Asserts that s's open had nothing to say but how it reads: "" where
 * io_uring works, else the one note that reads use preads (a build
 * without liburing, a kernel that refuses io_uring). */
static void assert_clean_open(kvl_store *s)
{
	const char *m = kvl_store_errmsg(s);
	if (m[0] && (strstr(m, "; ") || !strstr(m, ": reads use preads")))
		fail_msg("the open noted more than how it reads: \"%s\"", m);
}

/* Stores object i (pattern seed i): the put's result. */
static int put_obj(kvl_store *s, unsigned i)
{
	char key[32];
	obj_key(key, sizeof key, i);
	size_t len = obj_len(i);
	uint8_t *p = malloc(len);
	if (!p)
		return KVL_ENOMEM;
	fill_pattern(p, len, i);
	kvl_iov iov = {p, len};
	size_t one = 1;
	int res = -100;
	if (kvl_store_put(s, (const char *[]){key}, 1, &iov, &one, &res))
		res = -101;
	free(p);
	return res;
}

/* Reads object i whole: 1 found with exactly its bytes, 0 absent, -1
 * wrong bytes or an unexpected result (said on stderr). */
static int check_obj(kvl_store *s, unsigned i)
{
	char key[32];
	obj_key(key, sizeof key, i);
	size_t len = obj_len(i);
	uint8_t *want = malloc(len), *got = malloc(len + 1);
	if (!want || !got)
		return -1;
	fill_pattern(want, len, i);
	kvl_range r = {0, got, len};
	size_t one = 1;
	int res = -100, out;
	if (kvl_store_get(s, (const char *[]){key}, 1, &r, &one, &res))
		res = -101;
	if (res == KVL_ENOTFOUND)
		out = 0;
	else if (res == 0 && memcmp(want, got, len) == 0)
		out = 1;
	else {
		fprintf(stderr, "%s: result %d (%s)%s\n", key, res,
		        kvl_store_errmsg(s),
		        res == 0 ? ", wrong bytes" : "");
		out = -1;
	}
	free(want);
	free(got);
	return out;
}

static int wait_child(pid_t pid)
{
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 200 + WTERMSIG(st);
}

/* Files under dir/sub's subdirectories (data/XX) or in it (tmp). */
static unsigned count_files(const char *dir, const char *sub)
{
	char p[4200];
	unsigned n = 0;
	snprintf(p, sizeof p, "%s/%s", dir, sub);
	DIR *d = opendir(p);
	if (!d)
		return 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.') {
			if (strcmp(sub, "data") == 0) {
				char s2[4300];
				snprintf(s2, sizeof s2, "data/%s", de->d_name);
				n += count_files(dir, s2);
			} else {
				n++;
			}
		}
	closedir(d);
	return n;
}

/* The path of the one object file of a store that holds one object. */
static void only_file(const char *dir, char *out, size_t n)
{
	for (int x = 0; x < 256; x++) {
		char p[4000];
		snprintf(p, sizeof p, "%s/data/%02x", dir, x);
		DIR *d = opendir(p);
		assert_non_null(d);
		struct dirent *de;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.') {
				snprintf(out, n, "%s/%s", p, de->d_name);
				closedir(d);
				return;
			}
		closedir(d);
	}
	fail_msg("no object file in %s", dir);
}

#define ASSERT_NOT_CONTAINS(hay, needle)                                   \
	ASSERT_TRUE_MSG(!strstr(hay, needle), "\"%s\" contains \"%s\"",  \
	                hay, needle)

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ------------------------------------------------------------ bad opens */

static void test_bad_open(void **state)
{
	(void)state;
	char *root = tmpdir_make("file-open");
	char p[4200];
	snprintf(p, sizeof p, "%s/plain", root);
	FILE *fp = fopen(p, "w");
	assert_non_null(fp);
	fclose(fp);
	char u[4400];
	snprintf(u, sizeof u, "file:%s/missing?capacity=1MiB", root);
	open_fails(u, KVL_EIO, "must exist");
	snprintf(u, sizeof u, "file:%s/plain?capacity=1MiB", root);
	open_fails(u, KVL_EINVAL, "not a directory");
	snprintf(u, sizeof u, "file:%s?capacity=0", root);
	open_fails(u, KVL_EPARSE, "capacity=0");
	snprintf(u, sizeof u, "file:%s?capacity=12Q", root);
	open_fails(u, KVL_EPARSE, "capacity=12Q");
	snprintf(u, sizeof u, "file:%s", root);
	open_fails(u, KVL_EPARSE, "capacity=SIZE");
	snprintf(u, sizeof u, "file:%s?capacity=1MiB&bogus=1", root);
	open_fails(u, KVL_EPARSE, "unknown option 'bogus'");
	snprintf(u, sizeof u, "file:%s?capacity=1MiB&io=aio", root);
	open_fails(u, KVL_EPARSE, "io=aio");
	snprintf(u, sizeof u, "file:%s?capacity=1MiB&max_objects=0", root);
	open_fails(u, KVL_EPARSE, "max_objects=0");
	snprintf(u, sizeof u, "file:%s?capacity=1MiB&check_threads=5", root);
	open_fails(u, KVL_EPARSE, "check_threads=5");
	open_fails("file://host/dir?capacity=1MiB", KVL_EPARSE, "host");
	open_fails("file:?capacity=1MiB", KVL_EPARSE, "absolute");

	/* None of the refused opens made a store in the directory. */
	snprintf(p, sizeof p, "%s/kvlink.index", root);
	ASSERT_EQ(access(p, F_OK), -1);

	/* Made once; the geometry stays, the capacity may change. */
	char *made = root;
	root = tmpdir_sub(made, "made");
	kvl_store *s = open_dir(root, "capacity=1MiB&max_objects=5000");
	kvl_store_close(s);
	snprintf(u, sizeof u, "file:%s?max_objects=6000", root);
	open_fails(u, KVL_EINVAL, "max_objects=5000");
	s = open_dir(root, NULL); /* keeps the directory's capacity */
	ASSERT_U64(store_stats(s).capacity, 1u << 20);
	assert_clean_open(s);
	kvl_store_close(s);
	s = open_dir(root, "capacity=2MiB");
	ASSERT_U64(store_stats(s).capacity, 2u << 20);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "capacity changed");
	kvl_store_close(s);

	/* A handle belongs to its process: a forked child reopens. */
	s = open_dir(root, NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int r = exists1_rc(s, "k");
		_exit(r == KVL_EINVAL ? 0 : 1);
	}
	ASSERT_EQ(wait_child(pid), 0);
	ASSERT_EQ(exists1(s, "k"), 0);
	kvl_store_close(s);
	free(root);
	tmpdir_remove(made);
}

/* -------------------------------------------- two processes at once */

#define SHARE_N 300

static void test_two_processes(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-share");
	kvl_store_close(open_dir(dir, "capacity=1GiB"));
	pid_t w = fork();
	if (w == 0) { /* writes every object, reading back others' too */
		kvl_store *s = child_open(dir, NULL);
		int bad = 0;
		for (unsigned i = 0; i < SHARE_N; i++) {
			int r = put_obj(s, i);
			bad += r != KVL_PUT_STORED && r != KVL_PUT_PRESENT;
			bad += check_obj(s, i) != 1;
			bad += check_obj(s, SHARE_N - 1 - i) < 0;
		}
		kvl_store_close(s);
		_exit(bad ? 1 : 0);
	}
	pid_t r = fork();
	if (r == 0) { /* reads while the other writes; writes the top half */
		kvl_store *s = child_open(dir, "io=pread");
		int bad = 0;
		unsigned seen = 0;
		uint64_t rs = 7;
		for (unsigned round = 0; round < 3 * SHARE_N; round++) {
			int c = check_obj(s, rand_below(&rs, SHARE_N));
			bad += c < 0;
			seen += c == 1;
			if (round % 3 == 0) {
				int p = put_obj(s, SHARE_N / 2 +
				                   rand_below(&rs, SHARE_N / 2));
				bad += p != KVL_PUT_STORED &&
				       p != KVL_PUT_PRESENT;
			}
		}
		kvl_store_close(s);
		_exit(bad ? 1 : seen ? 0 : 2);
	}
	ASSERT_EQ(wait_child(w), 0);
	ASSERT_EQ(wait_child(r), 0);
	/* Both see all of it; the other's puts are this one's present. */
	kvl_store *s = open_dir(dir, NULL);
	for (unsigned i = 0; i < SHARE_N; i++) {
		ASSERT_EQ_MSG(check_obj(s, i), 1, "object %u", i);
		ASSERT_CODE(put_obj(s, i), KVL_PUT_PRESENT);
	}
	ASSERT_U64(store_stats(s).objects, SHARE_N);
	kvl_store_close(s);
	tmpdir_remove(dir);
}

/* ------------------------------------------------------- kill -9, restart */

#define KILL_ROUNDS 8
#define KILL_N 400

static void test_kill_writer(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-kill");
	/* Capacity for about 60 objects: the writer evicts as it goes. */
	kvl_store_close(open_dir(dir, "capacity=10MiB"));
	uint64_t rs = (uint64_t)getpid();
	for (int round = 0; round < KILL_ROUNDS; round++) {
		pid_t w = fork();
		if (w == 0) {
			kvl_store *s = child_open(dir, NULL);
			for (unsigned i = 0;; i = (i + 1) % KILL_N) {
				put_obj(s, i);
				if (i % 5 == 0) { /* and removes some */
					char key[32];
					obj_key(key, sizeof key, (i * 13) % KILL_N);
					remove1_rc(s, key);
				}
			}
		}
		usleep(1000 * (5 + rand_below(&rs, 60)));
		kill(w, SIGKILL);
		ASSERT_EQ(wait_child(w), 200 + SIGKILL);
	}
	/* Every object that reads as present has exactly its bytes; the
	 * index stays within its capacity. */
	kvl_store *s = open_dir(dir, NULL);
	unsigned present = 0;
	for (unsigned i = 0; i < KILL_N; i++) {
		int c = check_obj(s, i);
		ASSERT_TRUE_MSG(c >= 0, "object %u read wrong", i);
		present += (unsigned)c;
	}
	kvl_store_stats st = store_stats(s);
	print_message("    %u objects present after %d kills (%" PRIu64
	              " in the index); note: %s\n",
	              present, KILL_ROUNDS, st.objects, kvl_store_errmsg(s));
	assert_true(present > 0);
	assert_true(st.bytes <= st.capacity);
	/* The open was alone: it swept what the writers left (files no
	 * entry names, temporary files) in the background. */
	double t0 = now_s();
	unsigned files;
	while ((files = count_files(dir, "data")) != st.objects &&
	       now_s() - t0 < 10)
		usleep(10000);
	ASSERT_U64(files, st.objects);
	ASSERT_EQ(count_files(dir, "tmp"), 0);
	kvl_store_close(s);

	/* A clean restart finds the same objects and repairs nothing. */
	s = open_dir(dir, NULL);
	assert_clean_open(s);
	unsigned again = 0;
	for (unsigned i = 0; i < KILL_N; i++) {
		int c = check_obj(s, i);
		ASSERT_TRUE(c >= 0);
		again += (unsigned)c;
	}
	ASSERT_EQ(again, present);
	kvl_store_close(s);
	tmpdir_remove(dir);
}

static void test_restart(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-restart");
	const unsigned n = 2000;
	kvl_store *s = open_dir(dir, "capacity=4GiB");
	for (unsigned i = 0; i < n; i++)
		ASSERT_CODE(put_obj(s, i), KVL_PUT_STORED);
	kvl_store_close(s);
	double t0 = now_s();
	s = open_dir(dir, NULL);
	double open_ms = (now_s() - t0) * 1e3;
	print_message("    reopened with %u objects in %.2f ms\n", n, open_ms);
	assert_clean_open(s); /* no repair */
	ASSERT_U64(store_stats(s).objects, n);
	for (unsigned i = 0; i < n; i++)
		ASSERT_EQ_MSG(check_obj(s, i), 1, "object %u", i);
	/* A layer-like range read after the restart. */
	char key[32];
	obj_key(key, sizeof key, 7);
	uint8_t *want = pattern(obj_len(7), 7), got[100];
	ASSERT_EQ(get1(s, key, obj_len(7) - 100, got, 100), 100);
	assert_memory_equal(got, want + obj_len(7) - 100, 100);
	free(want);
	kvl_store_close(s);

	/* A process that died with the store open leaves it unclean: the
	 * next lone open repairs and keeps every object. */
	pid_t c = fork();
	if (c == 0) {
		kvl_store *cs = child_open(dir, NULL);
		(void)cs;
		raise(SIGKILL);
	}
	ASSERT_EQ(wait_child(c), 200 + SIGKILL);
	s = open_dir(dir, NULL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "repaired");
	ASSERT_U64(store_stats(s).objects, n);
	for (unsigned i = 0; i < n; i += 97)
		ASSERT_EQ(check_obj(s, i), 1);
	kvl_store_close(s);
	tmpdir_remove(dir);
}

/* ------------------------------------------------- a get of many bytes */

#define BIG_N 20             /* objects of BIG_LEN: more than one segment */
#define BIG_LEN (4u << 20)
#define HUGE_LEN (65u << 20) /* larger than a segment alone */

/* One get whose reads outgrow a bounce buffer (64 MiB) is read in
 * segments: every key of it, a huge one alone among them, an absent one
 * and a range, reads its own bytes. */
static void test_get_many_bytes(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-big");
	kvl_store *s = open_dir(dir, "capacity=1GiB");
	enum { N = BIG_N + 2 };
	char names[N][32];
	const char *keys[N];
	size_t lens[N];
	for (unsigned i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "big/%u", i);
		keys[i] = names[i];
		lens[i] = i == BIG_N / 2 ? HUGE_LEN : BIG_LEN - 17 * i;
		if (i == N - 1)
			continue; /* never stored */
		uint8_t *p = pattern(lens[i], 100 + i);
		ASSERT_EQ_MSG(put1(s, keys[i], p, lens[i]), KVL_PUT_STORED,
		              "put of %s", keys[i]);
		free(p);
	}
	kvl_range rg[N];
	size_t nr[N];
	int res[N];
	for (unsigned i = 0; i < N; i++) {
		rg[i] = (kvl_range){0, malloc(lens[i]), lens[i]};
		assert_non_null(rg[i].addr);
		nr[i] = 1;
	}
	rg[3].offset = 12345; /* a range, not the whole object */
	rg[3].len = lens[3] - 12345 - 99;
	ASSERT_CODE(kvl_store_get(s, keys, N, rg, nr, res), KVL_OK);
	for (unsigned i = 0; i < N; i++) {
		if (i == N - 1) {
			ASSERT_CODE(res[i], KVL_ENOTFOUND);
			free(rg[i].addr);
			continue;
		}
		ASSERT_CODE_MSG(res[i], 0, "get of %s", keys[i]);
		uint8_t *want = pattern(lens[i], 100 + i);
		ASSERT_TRUE_MSG(memcmp(rg[i].addr, want + rg[i].offset,
		                       rg[i].len) == 0,
		                "%s read wrong bytes", keys[i]);
		free(want);
		free(rg[i].addr);
	}
	kvl_store_close(s);
	tmpdir_remove(dir);
}

/* ------------------------------------------------ capacity, LRU order */

static void test_capacity_two_processes(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-cap");
	const uint64_t cap = 4u << 20;
	kvl_store_close(open_dir(dir, "capacity=4MiB"));
	pid_t kids[2];
	for (int k = 0; k < 2; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			kvl_store *s = child_open(dir, NULL);
			int bad = 0;
			for (unsigned i = 0; i < 300; i++) {
				int r = put_obj(s, 1000 * (unsigned)(k + 1) + i);
				bad += r != KVL_PUT_STORED;
				kvl_store_stats st;
				kvl_store_stats_get(s, &st);
				bad += st.bytes > st.capacity;
			}
			kvl_store_close(s);
			_exit(bad ? 1 : 0);
		}
	}
	for (int k = 0; k < 2; k++)
		ASSERT_EQ(wait_child(kids[k]), 0);
	kvl_store *s = open_dir(dir, NULL);
	kvl_store_stats st = store_stats(s);
	assert_true(st.bytes <= cap);
	assert_true(st.objects > 0);
	/* Files on disk: those of the index (evicted ones were unlinked). */
	ASSERT_U64(count_files(dir, "data"), st.objects);
	kvl_store_close(s);

	/* LRU across processes: a read in another process protects. */
	char *d2 = tmpdir_make("file-lru");
	const size_t len = 100000;
	char u[4400];
	/* Room for three objects of len bytes and their header pages. */
	snprintf(u, sizeof u, "capacity=%zu", 3 * (len + 4096) + 10);
	kvl_store_close(open_dir(d2, u));
	uint8_t *p = pattern(len, 3), got[16];
	s = open_dir(d2, NULL);
	ASSERT_CODE(put1(s, "a", p, len), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "b", p, len), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "c", p, len), KVL_PUT_STORED);
	pid_t r = fork();
	if (r == 0) {
		kvl_store *cs = child_open(d2, NULL);
		_exit(get1_rc(cs, "a", 0, got, 16) == 16 ? 0 : 1);
	}
	ASSERT_EQ(wait_child(r), 0);
	ASSERT_CODE(put1(s, "d", p, len), KVL_PUT_STORED);
	ASSERT_EQ(exists1(s, "a"), 1);
	ASSERT_EQ(exists1(s, "b"), 0); /* the least recently used */
	ASSERT_EQ(exists1(s, "c"), 1);
	ASSERT_U64(store_stats(s).evictions, 1);
	free(p);
	kvl_store_close(s);
	tmpdir_remove(d2);
	tmpdir_remove(dir);
}

/* --------------------------------------------------------- damaged files */

static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	uint8_t b;
	ASSERT_EQ(pread(fd, &b, 1, at), 1);
	b ^= 0x40;
	ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

static void test_damaged(void **state)
{
	(void)state;
	const size_t len = 50000;
	uint8_t *p = pattern(len, 5), *got = malloc(len);
	assert_non_null(got);
	char f[4300];
	static const char *const how[] = {"payload", "header", "truncated"};
	for (int h = 0; h < 3; h++) {
		char *dir = tmpdir_make("file-damage");
		kvl_store *s = open_dir(dir, "capacity=16MiB");
		ASSERT_CODE(put1(s, "k", p, len), KVL_PUT_STORED);
		only_file(dir, f, sizeof f);
		if (h == 0)
			flip_byte(f, 4096 + 30000);
		else if (h == 1)
			flip_byte(f, 70); /* in the key */
		else
			ASSERT_EQ(truncate(f, 4096 + 20000), 0);
		/* A range in an untouched block still reads (payload). */
		if (h == 0) {
			ASSERT_EQ(get1(s, "k", 0, got, 1000), 1000);
			assert_memory_equal(got, p, 1000);
		}
		memset(got, 0, len);
		ASSERT_CODE_MSG(get1(s, "k", 0, got, len), KVL_ENOTFOUND,
		                "damaged %s", how[h]);
		ASSERT_CONTAINS(kvl_store_errmsg(s), "removed");
		ASSERT_EQ(exists1(s, "k"), 0);
		ASSERT_U64(store_stats(s).objects, 0);
		ASSERT_EQ(count_files(dir, "data"), 0);
		/* It can be stored again. */
		ASSERT_CODE(put1(s, "k", p, len), KVL_PUT_STORED);
		ASSERT_EQ(get1(s, "k", 0, got, len), (int64_t)len);
		assert_memory_equal(got, p, len);
		kvl_store_close(s);
		tmpdir_remove(dir);
	}

	/* The index: not ours, or cut short: a clear error at open. */
	char *dir = tmpdir_make("file-damage-ix");
	kvl_store_close(open_dir(dir, "capacity=16MiB"));
	char ix[4300], u[4400];
	snprintf(ix, sizeof ix, "%s/kvlink.index", dir);
	snprintf(u, sizeof u, "file:%s", dir);
	ASSERT_EQ(truncate(ix, 8192), 0);
	open_fails(u, KVL_EINVAL, "not a kvlink file-store index");
	flip_byte(ix, 0);
	open_fails(u, KVL_EINVAL, "not a kvlink file-store index");
	tmpdir_remove(dir);

	/* Entries scribbled over after an unclean end: the repair keeps what
	 * looks sane, and reads check every object against its file. */
	dir = tmpdir_make("file-damage-entries");
	kvl_store *s = open_dir(dir, "capacity=64MiB");
	for (unsigned i = 0; i < 100; i++)
		ASSERT_CODE(put_obj(s, i), KVL_PUT_STORED);
	kvl_store_close(s);
	pid_t c = fork();
	if (c == 0) {
		child_open(dir, NULL);
		raise(SIGKILL);
	}
	ASSERT_EQ(wait_child(c), 200 + SIGKILL);
	snprintf(ix, sizeof ix, "%s/kvlink.index", dir);
	int fd = open(ix, O_RDWR);
	assert_true(fd >= 0);
	uint64_t rs = 11;
	for (int k = 0; k < 400; k++) { /* single bytes of 100 entries */
		uint8_t b = (uint8_t)splitmix64(&rs);
		off_t at = 4096 + (off_t)rand_below(&rs, 100 * 48);
		ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
	}
	close(fd);
	s = open_dir(dir, NULL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "repaired");
	unsigned ok = 0;
	for (unsigned i = 0; i < 100; i++) {
		int r = check_obj(s, i);
		ASSERT_TRUE_MSG(r >= 0, "object %u", i);
		ok += (unsigned)r;
	}
	print_message("    %u of 100 objects still read after the scribbles\n",
	              ok);
	assert_true(store_stats(s).bytes <= store_stats(s).capacity);
	for (unsigned i = 0; i < 100; i++) /* the store goes on working */
		ASSERT_TRUE(put_obj(s, 200 + i) >= 0);
	kvl_store_close(s);
	tmpdir_remove(dir);
	free(got);
	free(p);
}

/* Holds keep at most a quarter of the open-file limit: with a limit of
 * 64, 16 keys are held and the rest are not (0), and a get of them all
 * still reads every key. In a child, whose limit is its own. */
static void test_holds_bounded(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-holds-fds");
	kvl_store_close(open_dir(dir, "capacity=16MiB"));
	pid_t c = fork();
	if (c == 0) {
		struct rlimit rl = {64, 64};
		if (setrlimit(RLIMIT_NOFILE, &rl))
			_exit(100);
		kvl_store *s = child_open(dir, NULL);
		enum { N = 30 };
		char names[N][32];
		const char *keys[N];
		kvl_range rg[N];
		size_t nr[N];
		int res[N], bad = 0, held = 0;
		for (unsigned i = 0; i < N; i++) {
			bad |= put_obj(s, i) != KVL_PUT_STORED;
			obj_key(names[i], sizeof names[i], i);
			keys[i] = names[i];
			rg[i] = (kvl_range){0, malloc(obj_len(i)), obj_len(i)};
			nr[i] = 1;
		}
		bad |= kvl__store_hold(s, keys, N, res) != 0;
		for (unsigned i = 0; i < N; i++) {
			bad |= res[i] != (i < 16);
			held += res[i] == 1;
		}
		bad |= kvl_store_get(s, keys, N, rg, nr, res) != 0;
		for (unsigned i = 0; i < N; i++) {
			uint8_t *want = pattern(obj_len(i), i);
			bad |= res[i] != 0 ||
			       memcmp(rg[i].addr, want, obj_len(i)) != 0;
			free(want);
			free(rg[i].addr);
		}
		bad |= kvl__store_unhold(s, keys, 16, res) != 0;
		for (unsigned i = 0; i < 16; i++)
			bad |= res[i] != 0;
		if (bad)
			fprintf(stderr, "held %d: %s\n", held,
			        kvl_store_errmsg(s));
		kvl_store_close(s);
		_exit(bad);
	}
	ASSERT_EQ(wait_child(c), 0);
	tmpdir_remove(dir);
}

/* -------------------------------------------------- checker threads */

#define SHARE_THREADS 4

/* One of several threads reading the objects of test_check_threads
 * through one handle, 8 keys a call: 0, or the key that read wrong. */
static void *check_reader(void *arg)
{
	kvl_store *s = arg;
	for (unsigned round = 0; round < 20; round++)
		for (unsigned i = 0; i + 8 <= 40; i += 8) {
			char names[8][32];
			const char *keys[8];
			kvl_range rg[8];
			size_t nr[8];
			int res[8];
			for (unsigned k = 0; k < 8; k++) {
				obj_key(names[k], sizeof names[k], i + k);
				keys[k] = names[k];
				rg[k] = (kvl_range){0, malloc(obj_len(i + k)),
				                    obj_len(i + k)};
				nr[k] = 1;
			}
			int bad = kvl_store_get(s, keys, 8, rg, nr, res) != 0;
			for (unsigned k = 0; k < 8; k++) {
				uint8_t *want = pattern(obj_len(i + k), i + k);
				bad |= res[k] != 0 ||
				       memcmp(rg[k].addr, want, rg[k].len) != 0;
				free(want);
				free(rg[k].addr);
			}
			if (bad)
				return (void *)(uintptr_t)(i + 1);
		}
	return NULL;
}

/* Gets checked on checker threads (check_threads=3, whatever the cores):
 * every key of calls over two chunks reads its own bytes, whole or a
 * range, also with four threads calling at once, and a damaged one among
 * them is found and dropped, with the caller's message saying why. */
static void test_check_threads(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-checkers");
	kvl_store *s = open_dir(dir, "capacity=64MiB&check_threads=3");
	enum { N = 45 };
	char names[N][32];
	const char *keys[N];
	kvl_range rg[N];
	size_t nr[N];
	int res[N];
	for (unsigned i = 0; i < N; i++) {
		ASSERT_CODE(put_obj(s, i), KVL_PUT_STORED);
		obj_key(names[i], sizeof names[i], i);
		keys[i] = names[i];
		nr[i] = 1;
	}
	for (int round = 0; round < 2; round++) {
		for (unsigned i = 0; i < N; i++) {
			size_t len = obj_len(i), off = round && len > 10 ? len / 3 : 0;
			rg[i] = (kvl_range){off, malloc(len - off), len - off};
			assert_non_null(rg[i].addr);
		}
		ASSERT_CODE(kvl_store_get(s, keys, N, rg, nr, res), KVL_OK);
		for (unsigned i = 0; i < N; i++) {
			ASSERT_CODE_MSG(res[i], 0, "key %u, round %d", i, round);
			uint8_t *want = pattern(obj_len(i), i);
			ASSERT_TRUE_MSG(memcmp(rg[i].addr, want + rg[i].offset,
			                       rg[i].len) == 0,
			                "key %u read wrong bytes", i);
			free(want);
			free(rg[i].addr);
		}
	}
	/* Threads that share the handle share its checkers. */
	pthread_t th[SHARE_THREADS];
	for (int t = 0; t < SHARE_THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, check_reader, s), 0);
	for (int t = 0; t < SHARE_THREADS; t++) {
		void *bad = NULL;
		assert_int_equal(pthread_join(th[t], &bad), 0);
		ASSERT_TRUE_MSG(bad == NULL, "thread %d read a wrong object", t);
	}

	/* Damage one object's payload: only it fails, and is dropped. */
	kvl_store_close(s);
	s = open_dir(dir, "check_threads=3");
	char key[32], path[4300];
	obj_key(key, sizeof key, 7);
	for (unsigned i = 0; i < N; i++)
		if (i != 7)
			ASSERT_EQ(remove1(s, keys[i]), 1);
	only_file(dir, path, sizeof path);
	flip_byte(path, 4096 + obj_len(7) / 2);
	for (unsigned i = 0; i < N; i++)
		if (i != 7)
			ASSERT_CODE(put_obj(s, i), KVL_PUT_STORED);
	for (unsigned i = 0; i < N; i++) {
		rg[i] = (kvl_range){0, malloc(obj_len(i)), obj_len(i)};
		assert_non_null(rg[i].addr);
	}
	ASSERT_CODE(kvl_store_get(s, keys, N, rg, nr, res), KVL_OK);
	for (unsigned i = 0; i < N; i++) {
		ASSERT_CODE_MSG(res[i], i == 7 ? KVL_ENOTFOUND : 0, "key %u", i);
		free(rg[i].addr);
	}
	ASSERT_CONTAINS(kvl_store_errmsg(s), "checksum");
	ASSERT_EQ(exists1(s, key), 0);
	kvl_store_close(s);
	tmpdir_remove(dir);
}

/* ------------------------------------------------------------- holds */

static int hold_keys(kvl_store *s, const char *const *keys, size_t n,
                     int *res)
{
	for (size_t i = 0; i < n; i++)
		res[i] = 99;
	return kvl__store_hold(s, keys, n, res);
}

/* A held object is read through its own descriptor: after a remove or an
 * eviction it still reads its bytes here (and nowhere else), a key put
 * again reads its new bytes, and once the last hold goes it is gone. */
static void test_holds(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-holds");
	kvl_store *s = open_dir(dir, "capacity=1MiB");
	const size_t len = 100000;
	uint8_t *a = pattern(len, 21), *a2 = pattern(len, 22),
		*b = pattern(len, 23), *got = malloc(len);
	assert_non_null(got);
	ASSERT_CODE(put1(s, "a", a, len), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "b", b, len), KVL_PUT_STORED);
	const char *keys[3] = {"a", "b", "c"};
	int res[3];
	ASSERT_CODE(hold_keys(s, keys, 3, res), KVL_OK);
	ASSERT_CODE(res[0], 1);
	ASSERT_CODE(res[1], 1);
	ASSERT_CODE(res[2], 0); /* absent */
	ASSERT_CODE(hold_keys(s, keys, 1, res), KVL_OK); /* "a" twice */
	ASSERT_CODE(res[0], 1);

	/* Removed: gone for lookups, still read by the holder. */
	ASSERT_EQ(remove1(s, "a"), 1);
	ASSERT_EQ(exists1(s, "a"), 0);
	ASSERT_EQ(get1(s, "a", 0, got, len), (int64_t)len);
	assert_memory_equal(got, a, len);
	ASSERT_EQ(get1(s, "a", 5000, got, 3000), 3000); /* a layer of it */
	assert_memory_equal(got, a + 5000, 3000);

	/* Evicted by puts that fill the capacity: still read. */
	for (unsigned i = 0; i < 12; i++) {
		char k[16];
		snprintf(k, sizeof k, "fill%u", i);
		ASSERT_CODE(put1(s, k, a2, len), KVL_PUT_STORED);
	}
	ASSERT_EQ(exists1(s, "b"), 0);
	ASSERT_EQ(get1(s, "b", 0, got, len), (int64_t)len);
	assert_memory_equal(got, b, len);

	/* Put again: the new object is the one read. */
	ASSERT_CODE(put1(s, "a", a2, len), KVL_PUT_STORED);
	ASSERT_EQ(get1(s, "a", 0, got, len), (int64_t)len);
	assert_memory_equal(got, a2, len);
	ASSERT_EQ(remove1(s, "a"), 1);
	ASSERT_EQ(get1(s, "a", 0, got, len), (int64_t)len); /* held: old */
	assert_memory_equal(got, a, len);

	/* Let go: one hold of "a" is left, none of "b". */
	ASSERT_CODE(kvl__store_unhold(s, keys, 2, res), KVL_OK);
	ASSERT_CODE(res[0], 0);
	ASSERT_CODE(res[1], 0);
	ASSERT_CODE(get1(s, "b", 0, got, len), KVL_ENOTFOUND);
	ASSERT_EQ(get1(s, "a", 0, got, len), (int64_t)len);
	ASSERT_CODE(kvl__store_unhold(s, keys, 1, res), KVL_OK);
	ASSERT_CODE(get1(s, "a", 0, got, len), KVL_ENOTFOUND);
	ASSERT_CODE(kvl__store_unhold(s, keys, 1, res), KVL_OK);
	ASSERT_CODE(res[0], KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "not held");

	/* A hold that cannot reach the index (a forked child on its
	 * parent's handle) holds nothing, not even a key held already. */
	ASSERT_CODE(put1(s, "d", b, len), KVL_PUT_STORED);
	const char *d = "d";
	ASSERT_CODE(hold_keys(s, &d, 1, res), KVL_OK);
	ASSERT_CODE(res[0], 1);
	pid_t c = fork();
	if (c == 0) {
		int bad = hold_keys(s, &d, 1, res) != KVL_EINVAL ||
		          res[0] != KVL_EINVAL;
		bad |= kvl__store_unhold(s, &d, 1, res) || res[0] != 0;
		bad |= kvl__store_unhold(s, &d, 1, res) ||
		       res[0] != KVL_ENOTFOUND; /* only the parent's was left */
		_exit(bad);
	}
	ASSERT_EQ(wait_child(c), 0);

	/* Closing with holds left lets them go. */
	kvl_store_close(s);
	free(a);
	free(a2);
	free(b);
	free(got);
	tmpdir_remove(dir);
}

/* ---------------------------------------------------- the header cache */

/* The header pages the store copied from its cache and read from disk for
 * ranges that missed their object's first block (the JSON stats). */
static void hdr_counts(kvl_store *s, uint64_t *cached, uint64_t *read)
{
	char buf[4096];
	ASSERT_RC(s, kvl_store_stats_render(s, KVL_STATS_JSON, buf, sizeof buf,
	                                    NULL),
	          KVL_OK);
	const char *c = strstr(buf, "\"header_pages_cached\":");
	const char *r = strstr(buf, "\"header_pages_read\":");
	ASSERT_TRUE_MSG(c && r, "no header counts in %s", buf);
	*cached = strtoull(strchr(c, ':') + 1, NULL, 10);
	*read = strtoull(strchr(r, ':') + 1, NULL, 10);
}

/* A range beyond an object's first block (a later layer) reads the header
 * page once and copies it from the cache after (a whole read keeps none);
 * a copy still guards every block (a damaged block is found, and the
 * object dropped), and a key put again is a new object whose header is
 * read anew. */
static void test_header_cache(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-hdrs");
	kvl_store *s = open_dir(dir, "capacity=16MiB");
	const size_t len = 300000, part = 30000;
	uint8_t *p = pattern(len, 9), *q = pattern(len, 10), got[30000];
	uint64_t cached, read;
	ASSERT_CODE(put1(s, "k", p, len), KVL_PUT_STORED);
	/* A whole read keeps nothing (no range of it is left to read). */
	uint8_t *all = malloc(len);
	assert_non_null(all);
	ASSERT_EQ(get1(s, "k", 0, all, len), (int64_t)len);
	free(all);
	ASSERT_EQ(get1(s, "k", part, got, part), (int64_t)part);
	hdr_counts(s, &cached, &read);
	ASSERT_U64(cached, 0);
	ASSERT_U64(read, 1);
	ASSERT_EQ(get1(s, "k", 0, got, part), (int64_t)part); /* with block 0 */
	for (unsigned l = 1; l < 10; l++) {
		ASSERT_EQ(get1(s, "k", l * part, got, part), (int64_t)part);
		assert_memory_equal(got, p + l * part, part);
	}
	hdr_counts(s, &cached, &read);
	ASSERT_U64(read, 1);
	ASSERT_U64(cached, 9);

	/* A new object under the key: its own header, its own bytes. */
	ASSERT_EQ(remove1(s, "k"), 1);
	ASSERT_CODE(put1(s, "k", q, len), KVL_PUT_STORED);
	ASSERT_EQ(get1(s, "k", 5 * part, got, part), (int64_t)part);
	assert_memory_equal(got, q + 5 * part, part);
	hdr_counts(s, &cached, &read);
	ASSERT_U64(read, 2);
	ASSERT_EQ(get1(s, "k", 6 * part, got, part), (int64_t)part);
	hdr_counts(s, &cached, &read);
	ASSERT_U64(cached, 10);

	/* A damaged block under a cached header is found. */
	char f[4300];
	only_file(dir, f, sizeof f);
	flip_byte(f, 4096 + 7 * part + 5);
	ASSERT_CODE(get1(s, "k", 7 * part, got, part), KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "checksum");
	ASSERT_EQ(exists1(s, "k"), 0);
	hdr_counts(s, &cached, &read);
	ASSERT_U64(cached, 11);
	free(p);
	free(q);
	kvl_store_close(s);
	tmpdir_remove(dir);
}

/* ------------------------------------------- tmpfs: buffered, said so */

static void test_tmpfs(void **state)
{
	(void)state;
	struct stat st;
	if (stat("/dev/shm", &st) || !S_ISDIR(st.st_mode) ||
	    access("/dev/shm", W_OK))
		skip(); /* no tmpfs here to try */
	char *old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
	setenv("TMPDIR", "/dev/shm", 1);
	char *dir = tmpdir_make("file-tmpfs");
	if (old)
		setenv("TMPDIR", old, 1);
	else
		unsetenv("TMPDIR");
	free(old);
	/* tmpfs takes O_DIRECT from Linux 6.6 on; before, the store says
	 * that it does buffered I/O, in its message and its stats. */
	kvl_store *s = open_dir(dir, "capacity=16MiB");
	char buf[4096];
	size_t need = 0;
	ASSERT_CODE(kvl_store_stats_render(s, KVL_STATS_JSON, buf, sizeof buf,
	                                   &need),
	            0);
	if (strstr(kvl_store_errmsg(s), "O_DIRECT")) {
		ASSERT_CONTAINS(buf, "buffered I/O");
	} else {
		assert_clean_open(s);
		if (!kvl_store_errmsg(s)[0])
			ASSERT_NOT_CONTAINS(buf, "note");
	}
	for (unsigned i = 0; i < 50; i++)
		ASSERT_CODE(put_obj(s, i), KVL_PUT_STORED);
	for (unsigned i = 0; i < 50; i++)
		ASSERT_EQ(check_obj(s, i), 1);
	kvl_store_close(s);
	tmpdir_remove(dir);
}

/* ------------------------------------------- io_uring refused: preads */

/* In this process from now on, io_uring_setup fails with EPERM, as under
 * Docker's default seccomp profile. 0, or -1 when the filter cannot be
 * installed. */
static int refuse_io_uring(void)
{
#ifdef __NR_io_uring_setup
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		         offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof f / sizeof f[0], f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return -1;
	return 0;
#else
	return -1;
#endif
}

static void test_uring_refused(void **state)
{
	(void)state;
	char *dir = tmpdir_make("file-nouring");
	if (!KVL_HAVE_URING) {
		/* A build without liburing: io=uring reads with preads, and
		 * says so. */
		print_message("    io_uring is not built (no liburing): "
		              "io=uring reads through preads\n");
		kvl_store *s = open_dir(dir, "capacity=64MiB&io=uring");
		char buf[4096];
		size_t need;
		ASSERT_CONTAINS(kvl_store_errmsg(s), "this build has no io_uring");
		ASSERT_CODE(kvl_store_stats_render(s, KVL_STATS_PROMETHEUS, buf,
		                                   sizeof buf, &need),
		            0);
		ASSERT_CONTAINS(buf, "preads");
		ASSERT_CONTAINS(buf, "kvlink_store_file_io_uring 0");
		for (unsigned i = 0; i < 64; i++)
			ASSERT_CODE(put_obj(s, i), KVL_PUT_STORED);
		for (unsigned i = 0; i < 64; i++)
			ASSERT_EQ(check_obj(s, i), 1);
		kvl_store_close(s);
		tmpdir_remove(dir);
		return;
	}
	kvl_store_close(open_dir(dir, "capacity=64MiB"));
	pid_t c = fork();
	if (c == 0) {
		if (refuse_io_uring())
			_exit(77);
		kvl_store *s = child_open(dir, NULL);
		char buf[4096];
		size_t need;
		int bad = !strstr(kvl_store_errmsg(s), "io_uring refused");
		bad |= kvl_store_stats_render(s, KVL_STATS_PROMETHEUS, buf,
		                              sizeof buf, &need) != 0 ||
		       !strstr(buf, "preads") ||
		       !strstr(buf, "kvlink_store_file_io_uring 0");
		for (unsigned i = 0; i < 64; i++)
			bad |= put_obj(s, i) != KVL_PUT_STORED;
		for (unsigned i = 0; i < 64; i++)
			bad |= check_obj(s, i) != 1;
		if (bad)
			fprintf(stderr, "note: %s\n", kvl_store_errmsg(s));
		kvl_store_close(s);
		_exit(bad);
	}
	int rc = wait_child(c);
	if (rc == 77) {
		tmpdir_remove(dir);
		skip(); /* no seccomp filters here */
	}
	ASSERT_EQ(rc, 0);
	/* Back in a process that may use io_uring: the same objects. */
	kvl_store *s = open_dir(dir, NULL);
	assert_string_equal(kvl_store_errmsg(s), "");
	char buf[4096];
	ASSERT_RC(s, kvl_store_stats_render(s, KVL_STATS_JSON, buf, sizeof buf,
	                                    NULL),
	          KVL_OK);
	ASSERT_CONTAINS(buf, "\"io\":\"uring\"");
	for (unsigned i = 0; i < 64; i++)
		ASSERT_EQ(check_obj(s, i), 1);
	kvl_store_close(s);
	tmpdir_remove(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_open),
		cmocka_unit_test(test_two_processes),
		cmocka_unit_test(test_kill_writer),
		cmocka_unit_test(test_restart),
		cmocka_unit_test(test_get_many_bytes),
		cmocka_unit_test(test_capacity_two_processes),
		cmocka_unit_test(test_damaged),
		cmocka_unit_test(test_header_cache),
		cmocka_unit_test(test_holds),
		cmocka_unit_test(test_holds_bounded),
		cmocka_unit_test(test_check_threads),
		cmocka_unit_test(test_tmpfs),
		cmocka_unit_test(test_uring_refused),
	};
	return cmocka_run_group_tests_name("file_store", tests, NULL, NULL);
}
