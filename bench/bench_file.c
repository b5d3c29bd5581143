/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_file.c — the file: store against raw O_DIRECT reads of the same
 * files, and its open time with many objects.
 *
 *   open   puts N small objects, closes the store, and times the reopen
 *          (a warm restart: no rescan) and one existence query of each;
 *   read   puts M objects of SIZE bytes, then, best of 3 repetitions,
 *          reads them whole with kvl_store_get, B keys a call (through
 *          io_uring, then io=pread), and reads the same files' payloads
 *          with O_DIRECT preads of the same sizes into aligned buffers,
 *          one at a time, on 8 threads and on 32 (the device's rate is
 *          its best of the three); prints GB/s and get/raw (target
 *          >= 0.9).
 *
 * Usage: bench_file DIR [--objects N] [--size KIB] [--count M] [--batch B]
 *                  [--layers L] [--opts K=V&...]
 *   DIR       an empty directory on the device to measure (it is filled)
 *   --objects objects for the open measurement (default 100000)
 *   --size    object size for the read measurement (default 4096 KiB)
 *   --count   objects read (default 256)
 *   --batch   keys per get call (default 8; the linker asks for a layer
 *             of every page of a batch in one call)
 *   --layers  read each object as L equal ranges, one call per range over
 *             the batch, the batch held for its calls, as the linker's
 *             layer-wise loads do (default 1: whole); the raw reads then
 *             read L parts of each file
 *   --opts    more options of the store read, e.g. check_threads=0
 * Not a test: nothing here fails on a slow machine.
 */
#include <dirent.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvlink.h"
#include "store/store.h" /* batch holds, as the linker takes them */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static kvl_store *open_or_die(const char *uri)
{
	kvl_store *s;
	char eb[512];
	if (kvl_store_open(uri, &s, eb, sizeof eb)) {
		fprintf(stderr, "bench_file: %s: %s\n", uri, eb);
		exit(1);
	}
	return s;
}

static void put_or_die(kvl_store *s, const char *key, void *p, size_t len)
{
	kvl_iov iov = {p, len};
	size_t one = 1;
	int r;
	if (kvl_store_put(s, &key, 1, &iov, &one, &r) || r < 0) {
		fprintf(stderr, "bench_file: put %s: %s\n", key,
		        kvl_store_errmsg(s));
		exit(1);
	}
}

/* Reads every object, `batch` per call: whole (layers 1), or as `layers`
 * equal ranges, one call per range over the batch (as the linker reads a
 * layer of every page of a batch): seconds taken. */
static double read_store(const char *uri, unsigned m, size_t size,
                         unsigned batch, unsigned layers, uint8_t *dst)
{
	kvl_store *s = open_or_die(uri);
	char (*names)[32] = calloc(batch, sizeof *names);
	const char **keys = calloc(batch, sizeof *keys);
	kvl_range *rg = calloc(batch, sizeof *rg);
	size_t *nr = calloc(batch, sizeof *nr);
	int *res = calloc(batch, sizeof *res);
	int *held = calloc(batch, sizeof *held);
	if (!names || !keys || !rg || !nr || !res || !held)
		exit(1);
	size_t part = size / layers;
	double t0 = now_s();
	for (unsigned i = 0; i < m; i += batch) {
		unsigned n = m - i < batch ? m - i : batch;
		for (unsigned k = 0; k < n; k++) {
			snprintf(names[k], sizeof names[k], "big/%u", i + k);
			keys[k] = names[k];
			nr[k] = 1;
		}
		if (layers > 1) /* the linker holds a batch for its layers */
			kvl__store_hold(s, keys, n, held);
		for (unsigned l = 0; l < layers; l++) {
			for (unsigned k = 0; k < n; k++)
				rg[k] = (kvl_range){(uint64_t)l * part,
				                    dst + (size_t)k * size +
				                            (size_t)l * part,
				                    part};
			int bad = kvl_store_get(s, keys, n, rg, nr, res);
			for (unsigned k = 0; k < n && !bad; k++)
				bad = res[k] != 0;
			if (bad) {
				fprintf(stderr, "bench_file: get: %s\n",
				        kvl_store_errmsg(s));
				exit(1);
			}
		}
		if (layers > 1)
			kvl__store_unhold(s, keys, n, held);
	}
	double t = now_s() - t0;
	kvl_store_close(s);
	free(names);
	free(keys);
	free(rg);
	free(nr);
	free(res);
	free(held);
	return t;
}

#define RAW_THREADS_MAX 32

/* The payload files of the read measurement (size bytes each). */
typedef struct raw_files {
	char (*path)[4800];
	unsigned n;
	size_t padded;
	uint8_t *buf; /* RAW_THREADS_MAX aligned buffers of padded bytes */
	unsigned threads;
	unsigned layers; /* preads per file (equal parts of its payload) */
} raw_files;

static void list_files(const char *dir, size_t size, unsigned m,
                       raw_files *rf)
{
	rf->path = calloc(m, sizeof *rf->path);
	rf->padded = (size + 4095) / 4096 * 4096;
	rf->n = 0;
	if (!rf->path)
		exit(1);
	for (int x = 0; x < 256; x++) {
		char p[4400];
		snprintf(p, sizeof p, "%.4096s/data/%02x", dir, x);
		DIR *d = opendir(p);
		struct dirent *de;
		while (d && (de = readdir(d)) && rf->n < m) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(rf->path[rf->n], sizeof rf->path[0], "%s/%s", p,
			         de->d_name);
			struct stat st;
			if (!stat(rf->path[rf->n], &st) &&
			    (size_t)st.st_size == rf->padded + 4096)
				rf->n++;
		}
		if (d)
			closedir(d);
	}
	if (rf->n != m)
		fprintf(stderr, "bench_file: %u files, not %u\n", rf->n, m);
}

typedef struct raw_arg {
	raw_files *rf;
	unsigned t;
} raw_arg;

/* Thread t of rf->threads: O_DIRECT preads of files t, t + threads, … */
static void *raw_thread(void *p)
{
	raw_arg *a = p;
	raw_files *rf = a->rf;
	uint8_t *buf = rf->buf + (size_t)a->t * rf->padded;
	for (unsigned i = a->t; i < rf->n; i += rf->threads) {
		int fd = open(rf->path[i], O_RDONLY | O_DIRECT);
		size_t part = rf->padded / rf->layers;
		for (unsigned l = 0; l < rf->layers; l++)
			if (fd < 0 || pread(fd, buf + l * part, part,
			                    4096 + (off_t)(l * part)) !=
			                      (ssize_t)part) {
				perror("bench_file: raw pread");
				exit(1);
			}
		close(fd);
	}
	return NULL;
}

/* Raw O_DIRECT reads of every payload, `threads` at once: seconds. */
static double read_raw(raw_files *rf, unsigned threads)
{
	pthread_t th[RAW_THREADS_MAX];
	raw_arg a[RAW_THREADS_MAX];
	rf->threads = threads;
	double t0 = now_s();
	for (unsigned t = 0; t < threads; t++) {
		a[t] = (raw_arg){rf, t};
		pthread_create(&th[t], NULL, raw_thread, &a[t]);
	}
	for (unsigned t = 0; t < threads; t++)
		pthread_join(th[t], NULL);
	return now_s() - t0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_file DIR [--objects N] "
		                "[--size KIB] [--count M] [--batch B] "
		                "[--layers L] [--opts K=V&...]\n");
		return 2;
	}
	const char *dir = argv[1];
	unsigned long objects = 100000, count = 256, batch = 8, layers = 1;
	const char *opts = NULL;
	size_t size = 4096u << 10;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--objects"))
			objects = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--size"))
			size = strtoul(argv[i + 1], NULL, 10) << 10;
		else if (!strcmp(argv[i], "--count"))
			count = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--batch"))
			batch = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--layers"))
			layers = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--opts"))
			opts = argv[i + 1];
	}
	if (!layers || size % (layers * 4096u)) {
		fprintf(stderr, "bench_file: --layers must divide the size "
		                "into parts of whole 4 KiB pages\n");
		return 2;
	}
	char sub[4200], uri[4400];

	/* Open time with many objects. */
	snprintf(sub, sizeof sub, "%s/open", dir);
	mkdir(sub, 0755);
	snprintf(uri, sizeof uri, "file:%s?capacity=1TiB&max_objects=%lu", sub,
	         objects + 1024);
	kvl_store *s = open_or_die(uri);
	char key[32], small[1024] = {1};
	double t0 = now_s();
	for (unsigned long i = 0; i < objects; i++) {
		snprintf(key, sizeof key, "small/%lu", i);
		put_or_die(s, key, small, sizeof small);
	}
	double put_s = now_s() - t0;
	kvl_store_close(s);
	snprintf(uri, sizeof uri, "file:%s", sub);
	t0 = now_s();
	s = open_or_die(uri);
	double open_s = now_s() - t0;
	t0 = now_s();
	for (unsigned long i = 0; i < objects; i++) {
		snprintf(key, sizeof key, "small/%lu", i);
		const char *k = key;
		int r;
		if (kvl_store_exists(s, &k, 1, &r) || r != 1) {
			fprintf(stderr, "bench_file: %s lost\n", key);
			return 1;
		}
	}
	double exists_s = now_s() - t0;
	kvl_store_close(s);
	printf("open: %lu objects: put %.0f/s, reopen %.2f ms, first "
	       "exists of each %.2f us\n",
	       objects, objects / put_s, open_s * 1e3,
	       exists_s / objects * 1e6);

	/* Reads against raw O_DIRECT. */
	snprintf(sub, sizeof sub, "%s/read", dir);
	mkdir(sub, 0755);
	snprintf(uri, sizeof uri, "file:%s?capacity=1TiB%s%.200s", sub,
	         opts ? "&" : "", opts ? opts : "");
	unsigned slots = batch > RAW_THREADS_MAX ? (unsigned)batch : RAW_THREADS_MAX;
	uint8_t *buf = aligned_alloc(4096, (size_t)slots * size + 4096);
	if (!buf)
		return 1;
	for (size_t i = 0; i < (size_t)slots * size; i++)
		buf[i] = (uint8_t)(i * 131);
	s = open_or_die(uri);
	for (unsigned long i = 0; i < count; i++) {
		snprintf(key, sizeof key, "big/%lu", i);
		put_or_die(s, key, buf, size);
	}
	kvl_store_close(s);
	raw_files rf;
	list_files(sub, size, (unsigned)count, &rf);
	rf.buf = buf;
	rf.layers = (unsigned)layers;
	/* Best of 3, each way in turn (the device's rate drifts). */
	static const unsigned depth[3] = {1, 8, RAW_THREADS_MAX};
	double best_raw[3] = {1e9, 1e9, 1e9}, best_u = 1e9, best_p = 1e9;
	char up[4500];
	snprintf(up, sizeof up, "%s&io=pread", uri);
	for (int rep = 0; rep < 3; rep++) {
		for (int d = 0; d < 3; d++) {
			double t = read_raw(&rf, depth[d]);
			best_raw[d] = t < best_raw[d] ? t : best_raw[d];
		}
		double t = read_store(uri, (unsigned)count, size, (unsigned)batch,
		               (unsigned)layers, buf);
		best_u = t < best_u ? t : best_u;
		t = read_store(up, (unsigned)count, size, (unsigned)batch,
		               (unsigned)layers, buf);
		best_p = t < best_p ? t : best_p;
	}
	/* The device's rate: its best at any depth. */
	double best_r = best_raw[0];
	for (int d = 1; d < 3; d++)
		best_r = best_raw[d] < best_r ? best_raw[d] : best_r;
	double bytes = (double)count * (double)size;
	if (layers > 1)
		printf("read: in %lu ranges of %zu KiB each\n", layers,
		       (size >> 10) / layers);
	printf("read: %lu objects of %zu KiB: raw O_DIRECT %.2f GB/s (1 at a "
	       "time %.2f, 8 at once %.2f, %u at once %.2f)\n"
	       "      get (io_uring, %u a call) %.2f GB/s = %.2f x raw, "
	       "get (pread) %.2f GB/s = %.2f x raw\n",
	       count, size >> 10, bytes / best_r / 1e9,
	       bytes / best_raw[0] / 1e9, bytes / best_raw[1] / 1e9,
	       RAW_THREADS_MAX, bytes / best_raw[2] / 1e9, (unsigned)batch,
	       bytes / best_u / 1e9, best_r / best_u, bytes / best_p / 1e9,
	       best_r / best_p);
	free(rf.path);
	free(buf);
	return 0;
}
