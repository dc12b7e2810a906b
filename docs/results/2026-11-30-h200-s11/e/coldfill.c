/* Cold-cache cost of building a CUDA launch from a cached plan (host only): the steps of
 * weft_cuda_execute between the work item and the launch (unit sizes fitted to the launch, plan
 * cache lookup, the plan's units converted to the kernel's format, block ranges), copied here at
 * ff84357, timed warm, after evicting the CPU caches (a 256 MiB write) and after a 10 ms sleep;
 * then two variants: the fit skipped (a cache keyed on the unfitted model), and the kernel's
 * units copied from a prepared array instead of converted.
 *   gcc -O2 -Iinclude -Isrc -Ibuild e/coldfill.c build/libweft_internal.a -lpthread -lm
 *   ./a.out 4 16777216     (4 slices of 4 MiB: the 16 MiB two-shot's chunk on 4 ranks) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec/exec_cuda.h"
#include "exec/work.h"
#include "model/plan_cache.h"
#include "util/log.h"

static uint64_t now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
static weft_cuda_params_t P;
static weft_plan_cache_t *cache;
static weft_cost_model_t cmodel;
static int NB = 32;
static uint64_t T[4];
static uint64_t now(void);

static int fill(const weft_work_t *work)
{
    uint64_t a0 = now();
    weft_cuda_params_t *p = &P;
    weft_cost_model_t model = cmodel;
    uint64_t wb = 0; for (int i = 0; i < work->nslices; i++) wb += work->slices[i].bytes;
    uint64_t share = (wb + NB - 1) / NB;
    share = (share + 63) / 64 * 64;
    if (share < 16384) share = 16384;
    for (int t = 0; t < WEFT_NUM_TIERS; t++) if (share < model.tier[t].unit_bytes) model.tier[t].unit_bytes = share;
    while (weft_partition_units(&model, work->slices, work->nslices, 64) > WEFT_CUDA_MAX_UNITS)
        for (int t = 0; t < WEFT_NUM_TIERS; t++) model.tier[t].unit_bytes *= 2;
    uint64_t a1 = now();
    const weft_plan_t *plan;
    if (weft_plan_cache_partition(cache, &model, work->slices, work->nslices, NB, 64, &plan)) return -1;
    uint64_t a2 = now();
    for (size_t u = 0; u < plan->nunits; u++)
        p->units[u] = (weft_cuda_unit_t){.slice = plan->units[u].slice, .offset = plan->units[u].offset, .bytes = plan->units[u].bytes};
    int nb = 0;
    for (int b = 0; b < plan->nworkers; b++)
        if (plan->worker_begin[b + 1] > plan->worker_begin[b]) {
            p->block_begin[nb] = plan->worker_begin[b]; p->block_begin[nb + 1] = plan->worker_begin[b + 1]; nb++;
        }
    uint64_t a3 = now(); T[0]+=a1-a0; T[1]+=a2-a1; T[2]+=a3-a2;
    return nb;
}

static weft_cost_model_t adjusted; static weft_cuda_unit_t kunits[256]; static uint16_t kbb[129]; static int knb, knu;
static int fillB(const weft_work_t *work)
{
    const weft_plan_t *plan;
    if (weft_plan_cache_partition(cache, &adjusted, work->slices, work->nslices, NB, 64, &plan)) return -1;
    weft_cuda_params_t *p = &P;
    for (size_t u = 0; u < plan->nunits; u++)
        p->units[u] = (weft_cuda_unit_t){.slice = plan->units[u].slice, .offset = plan->units[u].offset, .bytes = plan->units[u].bytes};
    int nb = 0;
    for (int b = 0; b < plan->nworkers; b++)
        if (plan->worker_begin[b + 1] > plan->worker_begin[b]) {
            p->block_begin[nb] = plan->worker_begin[b]; p->block_begin[nb + 1] = plan->worker_begin[b + 1]; nb++;
        }
    return nb;
}
static int fillC(const weft_work_t *work)
{
    const weft_plan_t *plan;
    if (weft_plan_cache_partition(cache, &adjusted, work->slices, work->nslices, NB, 64, &plan)) return -1;
    memcpy(P.units, kunits, knu * sizeof *kunits);
    memcpy(P.block_begin, kbb, (knb + 1) * sizeof *kbb);
    return knb;
}
static char *junk; static size_t junk_bytes = 256u << 20;
static void evict(void){ for (size_t i = 0; i < junk_bytes; i += 64) junk[i]++; }

static int cmp(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
int main(int argc, char **argv)
{
    int nslices = argc > 1 ? atoi(argv[1]) : 4;
    uint64_t bytes = argc > 2 ? strtoull(argv[2], 0, 0) : (4u << 20);
    for (int t = 0; t < WEFT_NUM_TIERS; t++) { cmodel.tier[t].lat_us = 1; cmodel.tier[t].bw_gbps = 100; }
    for (int t = 0; t < WEFT_NUM_TIERS; t++) { cmodel.tier[t].unit_bytes = 1u << 20; cmodel.tier[t].fanout = NB; }
    weft_plan_cache_create(8, &cache);
    static weft_work_t work;
    memset(&work, 0, sizeof work);
    work.kind = WEFT_WORK_REDUCE; work.nslices = nslices;
    for (int i = 0; i < nslices; i++) work.slices[i] = (weft_slice_t){.peer = i, .tier = WEFT_TIER_PEER, .bytes = bytes / nslices};
    junk = malloc(junk_bytes); memset(junk, 1, junk_bytes);
    enum { N = 101 };
    uint64_t warm[N], cold[N], slp[N];
    int nb = fill(&work);
    for (int i = 0; i < N; i++) { uint64_t t0 = now(); fill(&work); warm[i] = now() - t0; }
    memset(T,0,sizeof T);
    for (int i = 0; i < N; i++) { evict(); uint64_t t0 = now(); fill(&work); cold[i] = now() - t0; }
    printf("evicted mean: fit %.2f lookup %.2f convert %.2f\n", T[0]/1e3/N, T[1]/1e3/N, T[2]/1e3/N);
    adjusted = cmodel; { uint64_t wb = 0; for (int i = 0; i < nslices; i++) wb += work.slices[i].bytes; uint64_t share = (wb + NB - 1) / NB; share = (share + 63) / 64 * 64; if (share < 16384) share = 16384; for (int t = 0; t < WEFT_NUM_TIERS; t++) if (share < adjusted.tier[t].unit_bytes) adjusted.tier[t].unit_bytes = share; }
    fillB(&work); knu = P.block_begin[nb]; knb = nb; memcpy(kunits, P.units, sizeof kunits); memcpy(kbb, P.block_begin, sizeof kbb);
    uint64_t cb[N], cc[N];
    for (int i = 0; i < N; i++) { evict(); uint64_t t0 = now(); fillB(&work); cb[i] = now() - t0; evict(); t0 = now(); fillC(&work); cc[i] = now() - t0; }
    qsort(cb, N, 8, cmp); qsort(cc, N, 8, cmp);
    printf("evicted: no fit %.2f us, no fit + kernel-format copy %.2f us\n", cb[N/2]/1e3, cc[N/2]/1e3);
    for (int i = 0; i < 31; i++) { usleep(10000); uint64_t t0 = now(); fill(&work); slp[i] = now() - t0; }
    qsort(warm, N, 8, cmp); qsort(cold, N, 8, cmp); qsort(slp, 31, 8, cmp);
    printf("nslices %d bytes %llu blocks %d units %d: warm %.2f us, evicted %.2f us, after 10 ms sleep %.2f us\n",
           nslices, (unsigned long long)bytes, nb, P.block_begin[nb], warm[N/2]/1e3, cold[N/2]/1e3, slp[15]/1e3);
    return 0;
}
