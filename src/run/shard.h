/*
 * shard: past one machine. Splits a plan's models into N shares by cost (the
 * same split for `--shard I/N` and for MPI ranks), keeps one share in a run,
 * and merges the results.json of shares back into one, in plan order.
 */
#ifndef COHORT_SHARD_H
#define COHORT_SHARD_H

#include "run/run.h"
#include "util/json.h"
#include "util/util.h"

#define SHARD_MAX 4096 /* the most shares (or ranks) a plan is split into */

/*
 * The share of each model entry of run among n: share[i] in [0, n) for
 * run->m[i]. Longest processing time first: models by estimated cost
 * (training FLOPs times epochs) descending, ties by plan order, each to the
 * share with the least cost so far (ties: the least planned memory, then
 * the lowest share). Deterministic: every rank computes the same split.
 * COHORT_ERR_USAGE when n is not in [1, SHARD_MAX].
 */
cohort_status shard_split(const cohort_run *run, int n, int *share, cohort_error *err);

/*
 * With run->opt.shard_count > 0, keep in run->m only the models of share
 * run->opt.shard_index (in plan order) and renumber their entries; the
 * others are not part of the run. Called by cohort_run_create once memory
 * plans are made, before placement. COHORT_ERR_USAGE when the index is not
 * below the count.
 */
cohort_status run_shard_select(cohort_run *run, cohort_error *err);

/*
 * A directory trained with --shard I/N keeps "I/N" in DIR/.shard, so that a
 * --resume with another share, or with none, which would train other models
 * into it (and leave them twice among the shares to merge), is refused.
 * shard_dir_check: on resume, COHORT_ERR_USAGE when DIR/.shard names
 * another share than index/count (count 0: no --shard); a directory
 * without the file (a whole run, a merged one, one older than the file)
 * is not checked. shard_dir_mark: write DIR/.shard for count > 0, remove it
 * for count 0. Not for MPI ranks, whose directories resume with any number
 * of ranks.
 */
cohort_status shard_dir_check(const char *dir, int index, int count, cohort_error *err);
cohort_status shard_dir_mark(const char *dir, int index, int count, cohort_error *err);

/* One results.json to merge. */
typedef struct shard_source {
    const char *name;          /* where it came from, for messages (a directory) */
    const json_value *results; /* its parsed results.json (borrowed) */
    int rank;                  /* >= 0: add "rank": rank to each of its records */
    const char *unfinished;    /* non-NULL: its records that did not end (ok,
                                  pruned, diverged, failed) become "failed" with this
                                  error */
} shard_source;

typedef struct shard_merge_info {
    int models;                /* records in the merged results */
    int not_ok;                /* of them, with a status other than "ok" or "pruned" */
    int pruned;                /* of them, "pruned": a success, as cohort train counts it */
    int plan_models;           /* the plan's model count; 0 when the records do not say */
    int missing;               /* plan models none of the sources holds */
    char missing_list[256];    /* their plan indices, "1, 3" (cut short when long) */
} shard_merge_info;

/* Duplicates are no error: the record of a model that ended (ok, pruned, diverged)
 * wins over one that did not, else the later source wins. For journals of
 * the same run (an MPI run being resumed). */
#define SHARD_MERGE_PREFER_ENDED 1

/*
 * Append to out one results.json holding every model record of the n
 * sources, ordered by their "plan_index" (by order of appearance when a
 * record lacks it). The top-level fields are the first source's but for
 * "ranks" and "merged_from" (how it was merged); extra (may be NULL) is JSON
 * text of more top-level members ("\"ranks\": 2") added after them. On COHORT_ERR_INPUT, out is left as it was and err names the
 * source: results that are not cohort results, sources of different plans
 * (plan name, data or the plan's model at an index differ), the same model
 * in two sources (unless flags has SHARD_MERGE_PREFER_ENDED).
 * COHORT_ERR_NOMEM when out could not grow. info (may be NULL) is filled
 * on success.
 */
cohort_status shard_merge(const shard_source *src, int n, int flags, const char *extra,
                          strbuf *out, shard_merge_info *info, cohort_error *err);

/* 1 when this process was started by an MPI launcher (mpirun, srun) with
 * more than one rank, judged from its environment (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE, PMIX_SIZE); MPI is not started. Also without an MPI build. */
int mpi_launched(void);

#ifdef COHORT_HAVE_MPI
/*
 * MPI ranks (mpi.c, built where MPI is found). One `cohort train` process
 * per rank: each trains its share of the plan into DIR/.ranks/R, whose
 * models/, history/ and checkpoints/ are links to DIR's own, so that
 * weights and checkpoints land in DIR; rank 0 merges the ranks' own
 * results.json into DIR/results.json as they change and at the end.
 */
typedef struct cohort_mpi cohort_mpi;

/* Start MPI. On error *out is NULL. */
cohort_status mpi_create(cohort_mpi **out, cohort_error *err);
/* Rank and size of MPI_COMM_WORLD. */
int mpi_rank(const cohort_mpi *m);
int mpi_size(const cohort_mpi *m);

/*
 * Prepare every rank for training into out_dir (collective). Rank 0 locks
 * out_dir, makes its folders, and on opt->resume merges the results of the
 * previous run (out_dir's and every rank's) so that each rank resumes its
 * share, whatever the previous number of ranks; without resume it clears
 * the ranks' old results. Each rank then gets in opt: its share
 * (shard_index/count = rank/size), out_dir/.ranks/R as out_dir, threads
 * (the cores it is bound to, else the node's cores over its ranks there;
 * unless opt->threads is set), and its events, forwarded to opt's. The
 * same status on every rank; err says which rank failed. opt and its
 * strings must outlive m.
 */
cohort_status mpi_prepare(cohort_mpi *m, cohort_run_options *opt, const char *out_dir,
                          cohort_error *err);

/*
 * Every rank has tried cohort_run_create (st: this rank's status; run its
 * result, may be NULL) (collective). Returns the worst status of all ranks,
 * with err "rank R: its message" for the first that failed. On success,
 * where the node has GPUs, this rank's unpinned models move to its own
 * GPU(s): gpu number local_rank (modulo the GPUs), or every local_size-th
 * GPU from local_rank when there are GPUs enough.
 */
cohort_status mpi_ready(cohort_mpi *m, cohort_run *run, cohort_status st, cohort_error *err);

/*
 * This rank's training ended with st (what cohort_run_train returned)
 * (collective; waits for the other ranks without spinning, rank 0 merging
 * results meanwhile). Rank 0 gathers every rank's results, writes
 * out_dir/results.json and report.html. Returns the status of the whole
 * job, the same on every rank: COHORT_OK when every model of the plan
 * ended ok, COHORT_ERR_PARTIAL when some did not, COHORT_ERR_INTERRUPTED
 * when a rank was stopped, else the error of the first rank that had one.
 * *summary (may be NULL) gets the merge counts (rank 0).
 */
cohort_status mpi_finish(cohort_mpi *m, cohort_run *run, cohort_status st,
                         shard_merge_info *summary, cohort_error *err);

/* MPI_Finalize, unlock, free. NULL is a no-op. */
void mpi_end(cohort_mpi *m);
#endif

#endif
