/*
 * config.h - the configuration table: every environment variable weft reads is one row
 * (name, default as a string, unit, help). The table is parsed once per process, on first use;
 * nobody else calls getenv. `weft-info -c` prints the table; docs/config.md is generated from it.
 *
 * Numbers are read and printed in the C locale ('.' as the decimal point), whatever locale the
 * program selected with setlocale.
 *
 * Thread safety: weft_config_get() parses under pthread_once and then returns a read-only struct.
 */
#ifndef WEFT_UTIL_CONFIG_H
#define WEFT_UTIL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft.h"

#define WEFT_CONFIG_STR_BYTES 256

/* A byte-size variable set to "auto" (accepted by the rows whose default is "auto"): the user of
 * the value picks it, as the row's help says. */
#define WEFT_CONFIG_AUTO UINT64_MAX

/* The accepted deadline of every wait, s (WEFT_TIMEOUT_S and weft_config_t.timeout_s): positive,
 * and short enough that the GPU's deadline (now + timeout in ns) cannot overflow. */
#define WEFT_TIMEOUT_S_MIN 1e-3
#define WEFT_TIMEOUT_S_MAX 1e7

/* WEFT_CUDA_COPY_ENGINE: when pure copies run on the copy engines. */
typedef enum {
    WEFT_COPY_ENGINE_NEVER,
    WEFT_COPY_ENGINE_ALWAYS,
    WEFT_COPY_ENGINE_AUTO /* across GPUs, copies of at least WEFT_CUDA_COPY_ENGINE_BYTES */
} weft_copy_engine_t;

/* WEFT_REMOTE_STORES: when collectives write into the peers' outputs (all-gather, all-to-all,
 * two-shot all-reduce). */
typedef enum {
    WEFT_REMOTE_STORES_NEVER,
    WEFT_REMOTE_STORES_ALWAYS,
    WEFT_REMOTE_STORES_AUTO /* on the CUDA backend */
} weft_remote_stores_t;

/* Parsed values. Field names carry their unit. */
typedef struct weft_env {
    /* identity and bootstrap */
    int rank;       /* WEFT_RANK, else RANK; -1 if neither is set */
    int nranks;     /* WEFT_NRANKS, else WORLD_SIZE; -1 if neither is set */
    int local_rank; /* WEFT_LOCAL_RANK, else LOCAL_RANK; -1 if neither is set */
    char master_addr[WEFT_CONFIG_STR_BYTES]; /* WEFT_MASTER_ADDR, else MASTER_ADDR */
    int master_port;                         /* WEFT_MASTER_PORT, else MASTER_PORT */
    char job_secret[WEFT_CONFIG_STR_BYTES];  /* WEFT_JOB_SECRET ("" : rank 0 makes one) */

    /* communicator */
    weft_backend_t backend;           /* WEFT_BACKEND */
    weft_registration_t registration; /* WEFT_REGISTRATION */
    double timeout_s;                 /* WEFT_TIMEOUT_S */
    int log_level;                    /* WEFT_LOG_LEVEL (weft_log_level_t) */
    uint64_t window_slice_bytes;      /* WEFT_WINDOW_SLICE_BYTES (0: backend default) */
    uint64_t staging_bytes;           /* WEFT_STAGING_BYTES: initial staging scratch */
    int registration_backlog; /* WEFT_REGISTRATION_BACKLOG: registrations sent, unacknowledged */

    /* host backend */
    int host_workers;                 /* WEFT_HOST_WORKERS */
    uint64_t inline_bytes;            /* WEFT_INLINE_BYTES: payloads sent through the flag slot */
    uint64_t allreduce_twoshot_bytes; /* WEFT_ALLREDUCE_TWOSHOT_BYTES, or WEFT_CONFIG_AUTO */
    uint64_t allreduce_inplace_twoshot_bytes; /* WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES (ditto) */
    uint64_t wait_spin_ns;                    /* WEFT_WAIT_SPIN_NS: busy-poll before yielding */
    uint64_t wait_yield_ns;                   /* WEFT_WAIT_YIELD_NS: sched_yield before sleeping */
    int remote_stores;                        /* WEFT_REMOTE_STORES: a weft_remote_stores_t */

    /* cost model and partitioner (tier "self" = local copy, "peer" = another rank) */
    double tier_self_lat_us, tier_self_bw_gbps;
    double tier_peer_lat_us, tier_peer_bw_gbps;
    double tier_remote_numa_lat_us, tier_remote_numa_bw_gbps;
    uint64_t part_unit_bytes; /* WEFT_PART_UNIT_BYTES: unit size S_t */
    int part_fanout;          /* WEFT_PART_FANOUT: workers per peer at once, H_t */
    int plan_cache_entries;   /* WEFT_PLAN_CACHE_ENTRIES: plans kept for reuse (0: none) */

    /* CUDA backend */
    int cuda_max_blocks;      /* WEFT_CUDA_MAX_BLOCKS: thread blocks per launch and rank */
    uint64_t cuda_unit_bytes; /* WEFT_CUDA_UNIT_BYTES: partitioner unit size on the GPU */
    int cuda_fanout;          /* WEFT_CUDA_FANOUT: blocks per peer at once (0: no cap) */
    int cuda_moe_blocks;      /* WEFT_CUDA_MOE_BLOCKS: blocks of the MoE data kernels (0: auto) */
    int cuda_copy_engine;     /* WEFT_CUDA_COPY_ENGINE: a weft_copy_engine_t */
    uint64_t cuda_copy_engine_bytes; /* WEFT_CUDA_COPY_ENGINE_BYTES: the threshold of "auto" */
    uint64_t cuda_fused_copy_bytes;  /* WEFT_CUDA_FUSED_COPY_BYTES: local copies run in-kernel */
    uint64_t cuda_push_bytes;  /* WEFT_CUDA_PUSH_BYTES: payloads pushed to the peers (or auto) */
    uint64_t cuda_chunk_bytes; /* WEFT_CUDA_CHUNK_BYTES: smallest registered chunk */
    uint64_t seq_start;        /* WEFT_SEQ_START: where the operation numbers start (tests) */

    /* launcher */
    double run_grace_s; /* WEFT_RUN_GRACE_S: weftrun's wait for survivors after a rank dies */
} weft_env_t;

/* The process-wide parsed configuration. Never NULL. A value that is malformed or out of range
 * is reported once (WARN, naming what is used instead) and not taken: a row's fallback variable
 * (the torchrun name) is used in its place when set to a valid value, else the default. Under
 * torchrun, WEFT_MASTER_PORT refused counts as unset (the port is MASTER_PORT's + 1). */
const weft_env_t *weft_config_get(void);

/* Print the table (name, value in force, default, unit, help) as aligned text. */
void weft_config_print(FILE *out);

/* Print the table as a Markdown page (docs/config.md). */
void weft_config_print_markdown(FILE *out);

#endif /* WEFT_UTIL_CONFIG_H */
