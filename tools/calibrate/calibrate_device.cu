/*
 * calibrate_device.cu - weft-calibrate's points measured on the GPU (calibrate.h): the
 * communicator, the stream and the receive buffers, the gap loop's calibration to %globaltimer,
 * and the burst kernel whose timestamps make a point (the method is in weft_calibrate.c). C
 * written as C++ only where nvcc needs it: the kernels and their launches. The timestamps are
 * reduced to points here too, next to the kernel that lays them out.
 *
 * Every function is collective (all ranks call it in the same order) and blocks until the
 * stream is idle. Thread safety: single-threaded, on the thread that made the communicator.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"
#include "bench_util.h"
#include "gpu_prog.h"
#include "calibrate.h"

#define SPIN_CAL_ITERS 200000 /* gap-loop iterations timed by the calibration */

struct cal_device {
    weft_comm_t comm;
    cudaStream_t stream;
    uint8_t *buf;           /* this rank's receive buffer (weft_malloc) */
    uint64_t *peer_buf;     /* host: every rank's buf */
    uint4 **d_dst;          /* device: destination pointers of the current pattern */
    uint64_t *d_ts, *h_ts;  /* (block, burst, start/end) timestamps, ns */
    double *d_mine, *d_all; /* points: this rank's, every rank's (device) */
};

/* ------------------------------------------------------------------------------------------- */
/* Kernels                                                                                      */
/* ------------------------------------------------------------------------------------------- */

static __device__ __forceinline__ uint64_t globaltimer_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The gap: iters x 8 dependent FMAs. The result feeds the next burst's data, so it stays. */
static __device__ __forceinline__ float spin(float x, long iters)
{
    for (long i = 0; i < iters; i++) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            x = fmaf(x, 0.9999999f, 1e-7f);
    }
    return x;
}

/* One block of BLOCK_THREADS: the time of iters gap-loop iterations into *ns_out. */
static __global__ void spin_kernel(long iters, uint64_t *ns_out, float *sink)
{
    __syncthreads();
    uint64_t t0 = globaltimer_ns();
    float x = spin((float)threadIdx.x, iters);
    __syncthreads();
    if (threadIdx.x == 0)
        *ns_out = globaltimer_ns() - t0;
    if (x == -1.0f) /* never true; keeps x live */
        *sink = x;
}

/*
 * Bursts of vecs 16-byte stores, all blocks together, each block a contiguous range of 32-vector
 * (512-byte) chunks; chunk c goes to peer c mod npeers at chunk c / npeers of that peer's
 * destination. ts[(block * bursts + b) * 2 + {0, 1}] = the block's start and end of burst b.
 */
static __global__ void burst_kernel(uint4 *const *dst, int npeers, uint64_t vecs, int bursts,
                                    long gap_iters, uint64_t *ts)
{
    uint64_t t0 = 0, chunks = vecs / 32; /* t0: thread 0's start of the current burst */
    uint64_t lo = chunks * blockIdx.x / gridDim.x * 32,
             hi = chunks * (blockIdx.x + 1) / gridDim.x * 32;
    float x = (float)threadIdx.x;
    for (int b = 0; b < bursts; b++) {
        __syncthreads();
        if (threadIdx.x == 0)
            t0 = globaltimer_ns();
        uint32_t tag = __float_as_uint(x);
        for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            uint64_t c = i / 32;
            uint64_t off = (c / (uint64_t)npeers) * 32 + i % 32;
            dst[c % (uint64_t)npeers][off] =
                make_uint4(tag, (uint32_t)i, (uint32_t)b, tag ^ (uint32_t)i);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint64_t t1 = globaltimer_ns();
            ts[((uint64_t)blockIdx.x * bursts + b) * 2] = t0;
            ts[((uint64_t)blockIdx.x * bursts + b) * 2 + 1] = t1;
        }
        x = spin(x, gap_iters);
    }
}

/* ------------------------------------------------------------------------------------------- */
/* Measurement                                                                                  */
/* ------------------------------------------------------------------------------------------- */

/*
 * One point from the timestamps ts[(block * bursts + b) * 2 + {0, 1}] of nblocks blocks: the
 * medians over bursts WARM_BURSTS.. (bursts > WARM_BURSTS) of the issue time, the gap before the
 * burst and the period, in us (see weft_calibrate.c). scratch holds bursts doubles.
 */
static void reduce_point(const uint64_t *ts, int nblocks, int bursts, double *scratch,
                         double out[NPV])
{
    uint64_t prev_start = 0, prev_end = 0;
    int n = bursts - WARM_BURSTS;
    double *issue = scratch, gap[64], period[64]; /* bursts <= 64, checked by the options */
    for (int b = 0; b < bursts; b++) {
        uint64_t start = UINT64_MAX, end = 0;
        for (int k = 0; k < nblocks; k++) {
            const uint64_t *t = ts + ((size_t)k * bursts + b) * 2;
            start = t[0] < start ? t[0] : start;
            end = t[1] > end ? t[1] : end;
        }
        if (b >= WARM_BURSTS) {
            issue[b - WARM_BURSTS] = (double)(end - start) / 1e3;
            gap[b - WARM_BURSTS] = (double)(int64_t)(start - prev_end) / 1e3;
            period[b - WARM_BURSTS] = (double)(start - prev_start) / 1e3;
        }
        prev_start = start;
        prev_end = end;
    }
    out[P_ISSUE] = bench_median_double(issue, (size_t)n);
    out[P_GAP] = bench_median_double(gap, (size_t)n);
    out[P_PERIOD] = bench_median_double(period, (size_t)n);
}

/* Gap-loop iterations per microsecond: the median of 5 timed runs of SPIN_CAL_ITERS. */
static void calibrate_spin(cal_t *c)
{
    cudaStream_t stream = c->dev->stream;
    uint64_t *d_ns;
    float *d_sink;
    cuda_ok(cudaMalloc((void **)&d_ns, sizeof *d_ns), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&d_sink, sizeof *d_sink), "cudaMalloc");
    double rate[5];
    for (int i = 0; i < 5; i++) {
        spin_kernel<<<1, BLOCK_THREADS, 0, stream>>>(SPIN_CAL_ITERS, d_ns, d_sink);
        cuda_ok(cudaGetLastError(), "spin_kernel launch");
        uint64_t ns = 0;
        cuda_ok(cudaMemcpyAsync(&ns, d_ns, sizeof ns, cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync");
        cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize after spin_kernel");
        rate[i] = ns ? SPIN_CAL_ITERS / (ns / 1e3) : 0;
    }
    c->iters_per_us = bench_median_double(rate, 5);
    if (!(c->iters_per_us > 0))
        fatal("gap-loop calibration: %%globaltimer did not advance");
    cuda_ok(cudaFree(d_ns), "cudaFree");
    cuda_ok(cudaFree(d_sink), "cudaFree");
}

/* Destination pointers of a pattern into d_dst; returns the number of peers. */
static int set_pattern(cal_t *c, int pattern)
{
    cal_device_t *d = c->dev;
    uint4 *dst[64]; /* nranks <= 65, checked at start */
    int n = 0;
    size_t region = (size_t)c->rank * c->s->max_bytes; /* this rank's region at every receiver */
    if (pattern == PAT_ONEWAY)
        dst[n++] = (uint4 *)(uintptr_t)(d->peer_buf[(c->rank + 1) % c->nranks] + region);
    else if (pattern == PAT_LOCAL)
        dst[n++] = (uint4 *)(d->buf + region);
    else
        for (int p = 1; p < c->nranks; p++)
            dst[n++] = (uint4 *)(uintptr_t)(d->peer_buf[(c->rank + p) % c->nranks] + region);
    cuda_ok(
        cudaMemcpyAsync(d->d_dst, dst, (size_t)n * sizeof *dst, cudaMemcpyHostToDevice, d->stream),
        "cudaMemcpyAsync (destinations)");
    return n;
}

void cal_measure(cal_t *c, int pattern, int K, const uint64_t *bytes, const double *gap_us, int n)
{
    cal_device_t *d = c->dev;
    int npeers = set_pattern(c, pattern);
    double mine[MAX_SETTINGS * NPV], scratch[64];
    for (int i = 0; i < n; i++) {
        long iters = (long)(gap_us[i] * c->iters_per_us + 0.5);
        weft_ok(weft_barrier(d->comm, d->stream), "weft_barrier");
        burst_kernel<<<K, BLOCK_THREADS, 0, d->stream>>>(d->d_dst, npeers, bytes[i] / 16,
                                                         c->s->bursts, iters, d->d_ts);
        cuda_ok(cudaGetLastError(), "burst_kernel launch");
        cuda_ok(cudaMemcpyAsync(d->h_ts, d->d_ts, (size_t)K * c->s->bursts * 2 * sizeof(uint64_t),
                                cudaMemcpyDeviceToHost, d->stream),
                "cudaMemcpyAsync (timestamps)");
        cuda_ok(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize after burst_kernel");
        reduce_point(d->h_ts, K, c->s->bursts, scratch, mine + (size_t)i * NPV);
    }
    size_t count = (size_t)n * NPV;
    cuda_ok(
        cudaMemcpyAsync(d->d_mine, mine, count * sizeof(double), cudaMemcpyHostToDevice, d->stream),
        "cudaMemcpyAsync (points)");
    weft_ok(weft_all_gather(d->comm, d->d_mine, d->d_all, count, WEFT_FLOAT64, d->stream),
            "weft_all_gather of the points");
    cuda_ok(cudaMemcpyAsync(c->h_all, d->d_all, count * c->nranks * sizeof(double),
                            cudaMemcpyDeviceToHost, d->stream),
            "cudaMemcpyAsync (points to the host)");
    cuda_ok(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize after the points");
}

/* ------------------------------------------------------------------------------------------- */
/* Setup                                                                                        */
/* ------------------------------------------------------------------------------------------- */

/* Every rank's value of mine into all_out[nranks] (through a small cudaMalloc buffer). */
static void gather_u64(cal_t *c, uint64_t mine, uint64_t *all_out, const char *what)
{
    cal_device_t *d = c->dev;
    uint64_t *buf;
    cuda_ok(cudaMalloc((void **)&buf, (size_t)(c->nranks + 1) * sizeof *buf), "cudaMalloc");
    cuda_ok(cudaMemcpyAsync(buf, &mine, sizeof mine, cudaMemcpyHostToDevice, d->stream),
            "cudaMemcpyAsync");
    weft_ok(weft_all_gather(d->comm, buf, buf + 1, 1, WEFT_UINT64, d->stream), what);
    cuda_ok(cudaMemcpyAsync(all_out, buf + 1, (size_t)c->nranks * sizeof *buf,
                            cudaMemcpyDeviceToHost, d->stream),
            "cudaMemcpyAsync");
    cuda_ok(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize");
    cuda_ok(cudaFree(buf), "cudaFree");
}

/* Machine: device, SM count, driver; GPUs and ranks per GPU from the all-gathered device UUIDs. */
static void describe_machine(cal_t *c)
{
    int dev = 0, drv = 0;
    struct cudaDeviceProp prop;
    cuda_ok(cudaGetDevice(&dev), "cudaGetDevice");
    cuda_ok(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    snprintf(c->device, sizeof c->device, "%s", prop.name);
    c->sms = prop.multiProcessorCount;
    cuda_ok(cudaDriverGetVersion(&drv), "cudaDriverGetVersion");
    snprintf(c->driver, sizeof c->driver, "%d.%d", drv / 1000, drv % 1000 / 10);

    uint64_t id = 1469598103934665603ull; /* FNV-1a of the UUID */
    for (int i = 0; i < 16; i++)
        id = (id ^ (uint8_t)prop.uuid.bytes[i]) * 1099511628211ull;
    uint64_t *ids = (uint64_t *)calloc((size_t)c->nranks, sizeof *ids);
    if (!ids)
        fatal("calloc: out of memory");
    gather_u64(c, id, ids, "weft_all_gather of the device ids");
    c->ngpus = 0;
    c->ranks_per_gpu = 0;
    for (int r = 0; r < c->nranks; r++) {
        int same = 0, first = 1;
        for (int q = 0; q < c->nranks; q++) {
            same += ids[q] == ids[r];
            first &= !(q < r && ids[q] == ids[r]);
        }
        c->ngpus += first;
        c->ranks_per_gpu = same > c->ranks_per_gpu ? same : c->ranks_per_gpu;
    }
    free(ids);
}

/* Receive buffer, its registration, and every rank's address. */
static void open_buffers(cal_t *c)
{
    cal_device_t *d = c->dev;
    size_t bytes = (size_t)c->nranks * c->s->max_bytes;
    weft_ok(weft_malloc(d->comm, (void **)&d->buf, bytes), "weft_malloc (receive buffer)");
    /* A collective on the buffer waits until every peer has mapped it (first use). */
    weft_ok(weft_all_reduce(d->comm, d->buf, d->buf, 1, WEFT_UINT64, WEFT_SUM, d->stream),
            "weft_all_reduce on the receive buffer");
    d->peer_buf = (uint64_t *)calloc((size_t)c->nranks, sizeof(uint64_t));
    if (!d->peer_buf)
        fatal("calloc: out of memory");
    gather_u64(c, (uint64_t)(uintptr_t)d->buf, d->peer_buf,
               "weft_all_gather of the buffer addresses");
    weft_ok(weft_barrier(d->comm, d->stream), "weft_barrier"); /* every buffer mapped everywhere */
    cuda_ok(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize");

    size_t nts = (size_t)c->k[c->nk - 1] * c->s->bursts * 2, npts = MAX_SETTINGS * NPV;
    cuda_ok(cudaMalloc((void **)&d->d_dst, (size_t)c->nranks * sizeof(uint4 *)), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&d->d_ts, nts * sizeof(uint64_t)), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&d->d_mine, npts * sizeof(double)), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&d->d_all, npts * c->nranks * sizeof(double)), "cudaMalloc");
    d->h_ts = (uint64_t *)calloc(nts, sizeof(uint64_t));
    if (!d->h_ts)
        fatal("calloc: out of memory");
}

static void close_buffers(cal_t *c)
{
    cal_device_t *d = c->dev;
    cuda_ok(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize");
    weft_ok(weft_barrier(d->comm, d->stream), "weft_barrier"); /* no peer still storing */
    cuda_ok(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize");
    weft_ok(weft_free(d->comm, d->buf), "weft_free");
    cuda_ok(cudaFree(d->d_dst), "cudaFree");
    cuda_ok(cudaFree(d->d_ts), "cudaFree");
    cuda_ok(cudaFree(d->d_mine), "cudaFree");
    cuda_ok(cudaFree(d->d_all), "cudaFree");
    free(d->peer_buf);
    free(d->h_ts);
}

void cal_device_open(cal_t *c)
{
    require_device();
    c->dev = (cal_device_t *)calloc(1, sizeof *c->dev);
    if (!c->dev)
        fatal("calloc: out of memory");
    cal_device_t *d = c->dev;
    d->comm = gpu_prog_comm_open(WEFT_REGISTRATION_ROA);
    c->rank = gpu_prog_rank;
    c->nranks = weft_comm_size(d->comm);
    if (c->nranks < 2 || c->nranks > 65)
        fatal("needs 2 to 65 ranks (weftrun -n N), got %d", c->nranks);
    /* gpu_prog_comm_open made the rank's device current on this thread. */
    cuda_ok(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    describe_machine(c);
    cal_choose_k(c);
    open_buffers(c);
    calibrate_spin(c);
}

void cal_device_close(cal_t *c)
{
    close_buffers(c);
    cuda_ok(cudaStreamDestroy(c->dev->stream), "cudaStreamDestroy");
    weft_ok(weft_comm_destroy(c->dev->comm), "weft_comm_destroy");
    free(c->dev);
    c->dev = NULL;
}
