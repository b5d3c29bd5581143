/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stage.c — the view path's loads through the copy engines (gpu.h).
 *
 * A gather kernel reading mapped memory takes SMs for as long as a load
 * crosses PCIe, and an engine whose compute fills the GPU then slows it
 * down and is slowed down by it. The DMA engines need no SM: where the
 * objects of a batch lie at a constant pitch in store memory (the
 * embedded store puts the objects of one offload one after another), a
 * layer of such a run is one 2D copy (rows = objects) into a half of the
 * GPU staging ring, and one short scatter kernel per half moves the rows
 * from there into the slots. (Copying straight into slots that follow one
 * another, with no scatter, loads 2-3 % faster alone but overlapped GEMMs
 * worse on an H200: 1.16 x ideal against the ring's 1.03.) Reads outside
 * runs, and runs too short to pay (gpu_copy AUTO), go by the gather
 * kernel as before. Whichever way a read goes, path_view.c checks it
 * before the layer is published. Issuing a layer waits for the ring to
 * free a half, so the loader learns there when the layer before has
 * landed (kvl__lk_loader_poll) rather than after this one is issued.
 */
#include <stdlib.h>

#include "linker/gpu.h"

/* gpu_copy AUTO: a run goes to the copy engines when each object's read
 * is at least this long and the run's reads are this many bytes in all.
 * Measured on an H200 (bench_gpu, gpu_copy DMA against KERNEL): runs of
 * whole prefixes with reads of 32 KiB load through the ring at 0.95 of
 * the PCIe ceiling against the kernel's 0.90, of 64 KiB and more at
 * 0.96-0.97 against 0.91-0.92; runs of 16 reads of 32 KiB (512 KiB a
 * copy) at 0.74 against 0.89, of 64 KiB at 0.84 against 0.91, of 128 KiB
 * (2 MiB) at 0.91 against 0.915, of 512 KiB at 0.96 against 0.915. */
#define STAGE_MIN_SPAN (32u << 10)
#define STAGE_MIN_RUN (4u << 20)

int kvl__lk_stage_open(kvl_linker *lk, char *errbuf, size_t errlen)
{
	lk_gpu *g = lk->gpu;
	if (lk->opts.gpu_copy == KVL_GPU_COPY_KERNEL)
		return 0;
	const char *why = "out of memory";
	g->run = calloc(lk->opts.io_batch, sizeof *g->run);
	/* Halves of whole 64-byte units keep every row aligned. */
	size_t half = (lk->opts.gpu_staging / 2) & ~(size_t)63;
	if (!g->run ||
	    kvl__stager_create(g->load, g->device, half, g->max_chunks,
	                       &g->stager, &why))
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "cannot set up the GPU staging ring of "
		                     "%u bytes on device %d: %s (gpu_copy "
		                     "KERNEL needs none)",
		                     lk->opts.gpu_staging, g->device, why);
	return 0;
}

void kvl__lk_stage_close(kvl_linker *lk)
{
	lk_gpu *g = lk->gpu;
	kvl__stager_destroy(g->stager);
	free(g->run);
	g->stager = NULL;
	g->run = NULL;
}

/* Whether run r goes to the copy engines. */
static int worth_dma(const kvl_linker *lk, const lk_run *r)
{
	if (kvl__round64(r->rd.span) > kvl__stager_half_bytes(lk->gpu->stager))
		return 0;
	if (lk->opts.gpu_copy == KVL_GPU_COPY_DMA)
		return 1;
	return r->rd.span >= STAGE_MIN_SPAN &&
	       r->n * r->rd.span >= STAGE_MIN_RUN;
}

/* Scatters the open half. */
static void close_half(kvl_linker *lk, lk_gather *gt)
{
	lk_gpu *g = lk->gpu;
	if (!g->stage_list)
		return;
	if (kvl__stager_scatter(g->stager, g->stage_n) && !gt->err)
		gt->err = kvl__fail(&lk->err, KVL_EIO,
		                    "load: GPU scatter failed: %s",
		                    kvl__cuda_last_error());
	g->stage_list = NULL;
}

/* Copies rows [i, ...) of run r into the open half, as many as fit (in
 * bytes and chunks); returns the first row left. */
static size_t fill_half(kvl_linker *lk, lk_gather *gt, const lk_run *r,
                        size_t i)
{
	lk_gpu *g = lk->gpu;
	size_t half = kvl__stager_half_bytes(g->stager);
	size_t dpitch = kvl__round64(r->rd.span), j = i;
	for (; j < r->n && g->stage_at + (j - i + 1) * dpitch <= half; j++) {
		size_t n = kvl__read_into_slot(r->p, &r->rd, NULL,
		                               g->run[j]->slot, g->scatter);
		if (g->stage_n + n > g->max_chunks)
			break;
		uint8_t *row = g->stage_mem + g->stage_at + (j - i) * dpitch;
		for (size_t k = 0; k < n; k++)
			g->stage_list[g->stage_n++] = (kvl__chunk){
				.src = row + (g->scatter[k].offset -
				              r->rd.offset),
				.dst = g->scatter[k].addr,
				.len = g->scatter[k].len};
	}
	if (j == i)
		return j;
	if (kvl__stager_copy(g->stager, g->stage_at, dpitch,
	                     r->first + i * r->pitch, r->pitch, r->rd.span,
	                     j - i) &&
	    !gt->err)
		gt->err = kvl__fail(&lk->err, KVL_EIO,
		                    "load: GPU 2D copy failed: %s",
		                    kvl__cuda_last_error());
	g->stage_at += (j - i) * dpitch;
	KVL__COUNT(&lk->stats, loaded_bytes, (j - i) * r->rd.span);
	KVL__COUNT(&lk->stats, loaded_dma_bytes, (j - i) * r->rd.span);
	return j;
}

void kvl__lk_stage_send(kvl_linker *lk, lk_gather *gt)
{
	lk_gpu *g = lk->gpu;
	lk_run *r = &gt->run;
	if (r->n && !worth_dma(lk, r)) {
		for (size_t i = 0; i < r->n; i++)
			kvl__lk_gather_read(lk, gt, r->p, &r->rd, g->run[i],
			                    r->first + i * r->pitch);
	} else {
		for (size_t i = 0; i < r->n;) {
			if (!g->stage_list) {
				g->stage_mem = kvl__stager_half(g->stager,
				                                &g->stage_list);
				g->stage_at = g->stage_n = 0;
				/* That may have waited for the ring, long
				 * enough for the last layer to land. */
				kvl__lk_loader_poll(lk);
			}
			size_t j = fill_half(lk, gt, r, i);
			if (j < r->n)
				close_half(lk, gt); /* full */
			i = j;
		}
	}
	r->n = 0;
}

/* Whether a read at src of pool p extends run r: its object is the next
 * block after the run's last (the pitch at which the embedded store puts
 * objects of one size one after another). */
static int extends(const kvl_linker *lk, const lk_run *r, const kvl__pool *p,
                   const uint8_t *src)
{
	return r->n && r->p == p && r->n < lk->opts.io_batch &&
	       src == r->first + r->n * r->pitch;
}

void kvl__lk_stage_read(kvl_linker *lk, lk_gather *gt, const kvl__pool *p,
                        const kvl__read *rd, const lk_item *it,
                        const uint8_t *src)
{
	lk_gpu *g = lk->gpu;
	if (!g->stager) {
		kvl__lk_gather_read(lk, gt, p, rd, it, src);
		return;
	}
	lk_run *r = &gt->run;
	if (!extends(lk, r, p, src)) {
		kvl__lk_stage_send(lk, gt);
		*r = (lk_run){.p = p, .rd = *rd, .first = src,
		              .pitch = kvl__round64(p->object_size)};
	}
	g->run[r->n++] = it;
}

void kvl__lk_stage_end(kvl_linker *lk, lk_gather *gt)
{
	if (!lk->gpu->stager)
		return;
	kvl__lk_stage_send(lk, gt);
	close_half(lk, gt);
}
