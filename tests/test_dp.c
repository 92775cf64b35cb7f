/* Data parallel in one MPI job of two ranks on the cpu backend: run by
 * `make test` as a plain binary, it starts itself again under `mpirun -np 2`
 * (allowed as root, oversubscribed) and reports what rank 0 found, the
 * failed checks of every rank summed. Skipped in a build without MPI or
 * where mpirun is missing.
 *
 * - the program: collectives inside backward, buckets, ZeRO-1's owners,
 *   state and allgathers (no MPI needed);
 * - exactness: GPT-2, BERT and ResNet (tiny) under every policy at two
 *   budgets, with and without ZeRO-1, bit-identical to keep on two ranks;
 *   ZeRO-1 bit-identical to plain data parallel;
 * - two ranks against one rank with twice the batch (the same samples),
 *   within a tolerance;
 * - ZeRO-1's per-rank peak: the dry plan's state and peak fall by the
 *   optimizer state's share. */
#include "comm/comm_impl.h"
#include "delta/comm.h"
#include "graph/graph_impl.h"
#include "policy_train.h"

#include <unistd.h>

static delta_backend *be;
static int rank_, ranks_;

/* ---- the program ------------------------------------------------------------ */

static void test_dp_program(void) {
    const model_case *mc = &models[2]; /* gpt2 */
    for (int zero = 0; zero <= 1; zero++) {
        delta_dp_opts saved = train_dp;
        train_dp = (delta_dp_opts){.ranks = 2, .rank = 1, .zero = zero,
                                   .bucket_bytes = 16 << 10};
        built b;
        CHECK(build(mc, &b), "gpt2 builds");
        train_dp = saved;
        delta_ctx *c = b.ctx;
        int first_coll = -1, last_bwd = -1, n_coll = 0, n_gather = 0;
        int n_params = 0, owned = 0, n_state = 0;
        for (int i = 0; i < c->n_ops; i++) {
            const delta_op *op = &c->ops[i];
            if (op->type == DELTA_OP_ALLREDUCE ||
                op->type == DELTA_OP_REDUCE_SCATTER) {
                CHECK(op->type == (zero ? DELTA_OP_REDUCE_SCATTER
                                        : DELTA_OP_ALLREDUCE), "op type");
                if (first_coll < 0) first_coll = i;
                n_coll++;
                size_t bytes = 0;
                for (int j = 0; j < op->n_in; j++)
                    bytes += c->tensors[op->in[j]]->bytes;
                CHECK(op->n_in <= DELTA_MAX_OP_OUT &&
                      (op->n_in == 1 || bytes <= (16 << 10)),
                      "bucket of %d tensors, %zu bytes", op->n_in, bytes);
                CHECK(!op->recomputable, "a collective is never recomputed");
                /* each input's producer ran before */
                for (int j = 0; j < op->n_in; j++)
                    CHECK(c->tensors[op->in[j]]->producer < i, "order");
            }
            if (op->type == DELTA_OP_ALLGATHER) {
                n_gather++;
                CHECK(op->phase == DELTA_PHASE_OPTIMIZER && op->inplace,
                      "allgather after the optimizer, in place");
            }
            if (op->phase == DELTA_PHASE_BACKWARD &&
                !delta_op_is_collective(op->type))
                last_bwd = i;
        }
        CHECK(n_coll > 2 && first_coll >= 0 && first_coll < last_bwd,
              "collectives inside backward (first at %d, backward ends at %d, "
              "%d of them)", first_coll, last_bwd, n_coll);
        CHECK(n_gather == (zero ? n_coll : 0), "%d allgathers", n_gather);
        for (int i = 0; i < c->n_tensors; i++) {
            const delta_tensor *t = c->tensors[i];
            if (t->kind == DELTA_KIND_PARAM) {
                n_params++;
                owned += t->owner == 1;
                CHECK(zero ? t->owner >= 0 && t->owner < 2 : t->owner == -1,
                      "%s: owner %d", t->name, t->owner);
                /* the optimizer reads the mean, or nothing on another rank */
                if (zero && t->owner != 1) CHECK(t->grad < 0, "no gradient");
                else
                    CHECK(t->grad >= 0 &&
                              delta_op_is_collective(
                                  c->ops[c->tensors[t->grad]->producer].type),
                          "%s reads its mean", t->name);
            }
            n_state += t->kind == DELTA_KIND_STATE;
        }
        /* AdamW: two moments per parameter this rank updates */
        CHECK(n_state == 2 * (zero ? owned : n_params), "%d state tensors, "
              "%d of %d parameters owned", n_state, owned, n_params);
        if (zero) CHECK(owned > 0 && owned < n_params, "owners balanced");
        delta_ctx_free(c);
    }
}

/* ---- exactness --------------------------------------------------------------- */

/* The parameters alone out of train()'s concatenation of PARAM and STATE
 * tensors (ZeRO-1's state is a rank's share: compared apart). */
static size_t params_prefix(const model_case *mc, int zero, const char *buf,
                            char *params) {
    delta_dp_opts saved = train_dp;
    train_dp.zero = zero;
    built b;
    build(mc, &b);
    train_dp = saved;
    size_t at = 0, n = 0;
    for (int i = 0; i < delta_ctx_n_tensors(b.ctx); i++) {
        delta_tensor *t = delta_ctx_tensor(b.ctx, i);
        if (!trained_state(t)) continue;
        size_t k = delta_tensor_bytes(t);
        if (delta_tensor_kind_of(t) == DELTA_KIND_PARAM) {
            memcpy(params + n, buf + at, k);
            n += k;
        }
        at += k;
    }
    delta_ctx_free(b.ctx);
    return n;
}

static const char *const policies[] = {"delta", "swap", "checkpoint", "dtr",
                                       "capuchin", "autoswap"};

/* The smaller of a rank's dry-plan figures over the ranks is what each
 * policy is given, so both ranks run the same budget. */
static size_t rank_peak(const model_case *mc, size_t *min_budget) {
    built b;
    build(mc, &b);
    delta_dry_plan dp;
    char err[256];
    delta_dry_plan_build(b.ctx, &dp, err, sizeof err);
    delta_ctx_free(b.ctx);
    double v[2] = {(double)dp.peak_bytes, (double)dp.min_budget_bytes};
    delta_comm_max(train_comm, v, 2, "the ranks' plans");
    *min_budget = (size_t)v[1];
    return (size_t)v[0];
}

/* Every rank ran or every rank failed: a policy's outcome is the ranks'. */
static outcome agree(outcome oc) {
    double v = oc == RAN ? 0 : 1;
    delta_comm_max(train_comm, &v, 1, "the ranks' outcomes");
    return v ? (oc == RAN ? FAILED_RUN : oc) : RAN;
}

/* The two budgets (percent of the larger rank's unconstrained peak) each
 * policy runs at on each model, per rank the batch of the one-rank policy
 * tests (test_policies.c). The swapping planners move any tensor: 70 and
 * 50%. swap, checkpoint and dtr release only activations, so where
 * parameters, gradients and optimizer state take most of a budget they
 * stop earlier, as on one rank: these are budgets they reach with a
 * margin (measured with delta train on two ranks). Every run must run: a
 * rank that failed alone would leave the other waiting in a collective. */
static const int *budgets_of(const char *policy, int mi) {
    static const int planners[2] = {70, 50};
    static const struct {
        const char *policy;
        int pct[3][2]; /* gpt2, bert, resnet */
    } floors[] = {
        {"swap", {{80, 60}, {90, 80}, {80, 60}}},
        {"checkpoint", {{90, 80}, {90, 80}, {90, 80}}},
        {"dtr", {{80, 60}, {90, 80}, {80, 60}}},
    };
    for (size_t i = 0; i < sizeof floors / sizeof *floors; i++)
        if (!strcmp(floors[i].policy, policy)) return floors[i].pct[mi];
    return planners;
}

static void test_dp_every_policy(void) {
    static const int model_ix[] = {2, 3, 1}; /* gpt2, bert, resnet */
    for (int mi = 0; mi < 3; mi++) {
        model_case mc = models[model_ix[mi]];
        char *base[2] = {NULL, NULL};
        size_t base_n[2] = {0, 0};
        for (int zero = 0; zero <= 1; zero++) {
            train_dp.zero = zero;
            char why[512];
            size_t peak, min_budget;
            delta_step_stats sum;
            outcome oc = agree(train(&mc, be, "keep", 0, &base[zero],
                                     &base_n[zero], &peak, &sum, why,
                                     sizeof why));
            CHECK(oc == RAN, "keep on %s zero %d: %s", mc.label, zero, why);
            if (oc != RAN) continue;
            size_t rpeak = rank_peak(&mc, &min_budget);
            int ran = 0, refused = 0;
            for (size_t p = 0; p < sizeof policies / sizeof *policies; p++)
                for (int k = 0; k < 2; k++) {
                    const int *pcts = budgets_of(policies[p], mi);
                    size_t budget = rpeak * (size_t)pcts[k] / 100;
                    char *got = NULL;
                    size_t got_n = 0;
                    oc = agree(train(&mc, be, policies[p], budget, &got,
                                     &got_n, &peak, &sum, why, sizeof why));
                    if (oc == RAN) {
                        ran++;
                        CHECK(got_n == base_n[zero] &&
                                  !memcmp(got, base[zero], got_n),
                              "%s on %s zero %d at %d%%: differs from keep on "
                              "2 ranks", policies[p], mc.label, zero, pcts[k]);
                        CHECK(peak <= budget, "peak %zu above %zu", peak,
                              budget);
                    } else {
                        refused++;
                        CHECK(budget < min_budget, "%s must run %s zero %d "
                              "at %d%%: %s", policies[p], mc.label, zero,
                              pcts[k], why);
                    }
                    if (rank_ == 0)
                        printf("  %-10s %-6s zero %d %d%%: %s\n", policies[p],
                               mc.label, zero, pcts[k],
                               oc == RAN ? "bit-identical to keep" : why);
                    free(got);
                }
            CHECK(ran == 12, "%s zero %d: %d runs, %d refused", mc.label,
                  zero, ran, refused);
        }
        /* ZeRO-1 against plain data parallel: the same parameters */
        if (base[0] && base[1]) {
            char *p0 = malloc(base_n[0]), *p1 = malloc(base_n[1]);
            size_t n0 = params_prefix(&mc, 0, base[0], p0);
            size_t n1 = params_prefix(&mc, 1, base[1], p1);
            CHECK(n0 == n1 && !memcmp(p0, p1, n0), "%s: ZeRO-1's parameters "
                  "differ from plain data parallel's", mc.label);
            free(p0);
            free(p1);
        }
        free(base[0]);
        free(base[1]);
        train_dp.zero = 0;
    }
}

/* ---- two ranks against one rank with twice the batch ------------------------- */

/* GPT-2 without dropout, SGD with momentum, 5 steps. The two runs differ
 * only in the order of float sums: the weight gradients' GEMMs sum over
 * the batch's rows (2B x T on one rank; B x T on each rank, then the two
 * halves), the loss's mean divides by 2B x T once instead of by B x T and
 * then 2. Each such sum of n terms is off by at most ~n u |terms| (u =
 * 2^-24), a relative ~1e-5 for n ~ 256; five SGD steps carry that into the
 * parameters about linearly. A tolerance of 1e-6 + 1e-4 |b| holds that with
 * margin (the largest difference measured here is printed), while any
 * real error (a wrong share of the data, a sum instead of a mean, a
 * gradient lost) moves parameters by ~lr |g| >= 1e-3. */
static void matches_one_rank(void) {
    model_case mc = models[2];
    mc.cfg.dropout = 0;
    mc.adamw = false;
    int steps_saved = train_steps;
    train_steps = 5;
    char *got = NULL, *want = NULL, why[512];
    size_t got_n = 0, want_n = 0, peak;
    delta_step_stats sum;
    mc.cfg.batch = 2;
    outcome oc = agree(train(&mc, be, "keep", 0, &got, &got_n, &peak, &sum,
                             why, sizeof why));
    CHECK(oc == RAN, "two ranks: %s", why);
    float norms2[8];
    memcpy(norms2, train_norms, sizeof norms2);
    if (rank_ == 0 && oc == RAN) {
        /* one rank, twice the batch: the same global batches */
        delta_dp_opts saved = train_dp;
        delta_comm *sc = train_comm;
        train_dp = (delta_dp_opts){.ranks = 1};
        train_comm = NULL;
        mc.cfg.batch = 4;
        oc = train(&mc, be, "keep", 0, &want, &want_n, &peak, &sum, why,
                   sizeof why);
        train_dp = saved;
        train_comm = sc;
        CHECK(oc == RAN && want_n == got_n, "one rank: %s", why);
        /* clipping: the norm of the mean gradients, the one rank's */
        for (int i = 0; train_clip > 0 && i < 5; i++)
            CHECK(fabs(norms2[i] - train_norms[i]) <= 1e-5 * train_norms[i] &&
                      norms2[i] > train_clip,
                  "step %d: norm %.9g on 2 ranks, %.9g on one", i, norms2[i],
                  train_norms[i]);
        double worst = 0, worst_rel = 0;
        int bad = 0;
        for (size_t i = 0; oc == RAN && i + 4 <= got_n; i += 4) {
            float a, b;
            memcpy(&a, got + i, 4);
            memcpy(&b, want + i, 4);
            double d = fabs((double)a - (double)b);
            if (d > worst) worst = d;
            if (fabs(b) > 1e-3 && d / fabs(b) > worst_rel)
                worst_rel = d / fabs(b);
            bad += !(d <= 1e-6 + 1e-4 * fabs((double)b));
        }
        CHECK(bad == 0, "%d of %zu values beyond 1e-6 + 1e-4|b|", bad,
              got_n / 4);
        CHECK(memcmp(got, want, got_n) != 0 || got_n == 0,
              "the runs should differ in rounding (else the test sees "
              "nothing)");
        printf("  2 ranks x batch 2 vs 1 rank x batch 4, 5 SGD steps: largest "
               "difference %.3g (relative %.3g)\n", worst, worst_rel);
    }
    free(got);
    free(want);
    train_steps = steps_saved;
}

static void test_dp_matches_one_rank(void) { matches_one_rank(); }

/* Clipping by global norm on two ranks: the norm is of the mean gradients
 * (after the allreduce), so two ranks x batch 2 match one rank x batch 4
 * within rounding as without clipping (a norm of one rank's own
 * gradients would scale each rank's updates differently); the limit is
 * below the norm (the clipped run differs from the unclipped one), and
 * every policy at its tighter budget trains keep's bits on two ranks. */
static void test_dp_clip(void) {
    model_case mc = models[2];
    mc.cfg.dropout = 0;
    mc.adamw = false;
    train_clip = 0.05f;
    matches_one_rank();
    char *clipped = NULL, *plain = NULL, *got = NULL, why[512];
    size_t clipped_n = 0, plain_n = 0, got_n = 0, peak, min_budget;
    delta_step_stats sum;
    outcome oc = agree(train(&mc, be, "keep", 0, &clipped, &clipped_n, &peak,
                             &sum, why, sizeof why));
    CHECK(oc == RAN, "keep, clipped: %s", why);
    size_t rpeak = rank_peak(&mc, &min_budget);
    for (size_t p = 0; oc == RAN && p < sizeof policies / sizeof *policies;
         p++) {
        int pct = budgets_of(policies[p], 0)[1];
        outcome po = agree(train(&mc, be, policies[p], rpeak * (size_t)pct /
                                 100, &got, &got_n, &peak, &sum, why,
                                 sizeof why));
        CHECK(po == RAN && got_n == clipped_n &&
                  !memcmp(got, clipped, got_n),
              "%s at %d%%, clipped: %s", policies[p], pct,
              po == RAN ? "differs from keep on 2 ranks" : why);
        free(got);
        got = NULL;
    }
    train_clip = 0;
    oc = agree(train(&mc, be, "keep", 0, &plain, &plain_n, &peak, &sum, why,
                     sizeof why));
    CHECK(oc == RAN && plain_n == clipped_n &&
              memcmp(plain, clipped, plain_n) != 0,
          "the limit did not clip: %s", why);
    free(clipped);
    free(plain);
}

/* ---- ZeRO-1's per-rank memory --------------------------------------------------- */

/* GPT-2 with AdamW: the state is two moments per parameter, so ZeRO-1 on
 * two ranks must leave each rank about half of it (whole tensors: within
 * the largest parameter), and the dry plan's peak must fall by at least
 * the state it no longer holds. */
static void test_zero_peak(void) {
    model_case mc = models[2];
    delta_dry_plan dp[2];
    for (int zero = 0; zero <= 1; zero++) {
        delta_dp_opts saved = train_dp;
        train_dp = (delta_dp_opts){.ranks = 2, .rank = 0, .zero = zero};
        built b;
        build(&mc, &b);
        train_dp = saved;
        char err[256];
        CHECK(delta_dry_plan_build(b.ctx, &dp[zero], err, sizeof err) ==
              DELTA_OK, "%s", err);
        delta_ctx_free(b.ctx);
    }
    size_t params = dp[0].param_bytes;
    double share = (double)dp[1].state_bytes / (double)dp[0].state_bytes;
    if (rank_ == 0)
        printf("  gpt2 per rank: state %zu -> %zu B (%.2f), peak %zu -> %zu "
               "B\n", dp[0].state_bytes, dp[1].state_bytes, share,
               dp[0].peak_bytes, dp[1].peak_bytes);
    CHECK(dp[0].state_bytes == 2 * params, "AdamW state is 2x the params");
    CHECK(share > 0.35 && share < 0.65, "ZeRO-1 leaves rank 0 %.2f of the "
          "optimizer state", share);
    CHECK(dp[0].peak_bytes - dp[1].peak_bytes >=
              dp[0].state_bytes - dp[1].state_bytes,
          "peak falls by %zu, the state by %zu",
          dp[0].peak_bytes - dp[1].peak_bytes,
          dp[0].state_bytes - dp[1].state_bytes);
}

/* ---- the collectives on tensors of several pieces ---------------------------- */

/* Rank q's value of element e of tensor i: a function both ranks know. */
static float contrib(int q, int i, int64_t e) {
    return (float)((e * 7 + i * 13 + q * 29) % 1000) * 0.001f - 0.4f +
           (float)q * 0.37f;
}

/* Elements of out (tensors this rank owns, or all with owner NULL) that
 * are not the ranks' mean of contrib in rank order. */
static int wrong_means(float *const *out, const int64_t *numel, int n,
                       const int *owner) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int64_t e = 0; (!owner || owner[i] == rank_) && e < numel[i];
             e++) {
            float s = contrib(0, i, e);
            for (int q = 1; q < ranks_; q++) s += contrib(q, i, e);
            bad += out[i][e] != s / (float)ranks_;
        }
    return bad;
}

/* Tensors of more than one DELTA_DP_PIECE (and one tiny one between them):
 * the piecewise allreduce and reduce give, on every rank, exactly the
 * mean taken in rank order (the same float sums). */
static void test_collectives_in_pieces(void) {
    const int n = 3;
    int64_t numel[3] = {DELTA_DP_PIECE + DELTA_DP_PIECE / 2, 7,
                        2 * DELTA_DP_PIECE + 5};
    float *in[3], *out[3];
    for (int i = 0; i < n; i++) {
        in[i] = malloc(sizeof(float) * (size_t)numel[i]);
        out[i] = calloc((size_t)numel[i], sizeof(float));
        for (int64_t e = 0; e < numel[i]; e++) in[i][e] = contrib(rank_, i, e);
    }
    float *ws = malloc(sizeof(float) * (size_t)((ranks_ - 1) * DELTA_DP_PIECE));
    delta_comm_allreduce_mean(train_comm, n, (const float *const *)in, out,
                              numel, ws, "test allreduce");
    int bad = wrong_means(out, numel, n, NULL);
    CHECK(bad == 0, "allreduce: %d elements differ", bad);
    /* rank 1 owns the large ones, rank 0 the small one */
    int owner[3] = {1, 0, 1};
    float *mine[3];
    for (int i = 0; i < n; i++) {
        mine[i] = owner[i] == rank_ ? out[i] : NULL;
        memset(out[i], 0, sizeof(float) * (size_t)numel[i]);
    }
    delta_comm_reduce_mean(train_comm, n, (const float *const *)in, mine,
                           numel, owner, ws, "test reduce");
    bad = wrong_means(out, numel, n, owner);
    CHECK(bad == 0, "reduce: %d elements differ", bad);
    /* and the owners' values back to every rank */
    delta_comm_broadcast(train_comm, n, out, numel, owner, "test broadcast");
    bad = wrong_means(out, numel, n, NULL);
    CHECK(bad == 0, "broadcast: %d elements differ", bad);
    for (int i = 0; i < n; i++) {
        free(in[i]);
        free(out[i]);
    }
    free(ws);
}

/* ---- the harness ------------------------------------------------------------- */

/* Runs fn on every rank; its failed checks are every rank's, summed. */
static void run_all(void (*fn)(void), const char *name) {
    test_failed_checks_ = 0;
    test_skip_why_ = NULL;
    fn();
    double f = test_failed_checks_;
    delta_comm_sum(train_comm, &f, 1, name);
    test_failed_checks_ = (int)f;
    if (rank_ > 0) return;
    if (f) {
        test_failed_++;
        printf("FAIL %s\n", name);
    } else {
        test_passed_++;
        printf("ok   %s\n", name);
    }
    fflush(stdout);
}

/* Not under mpirun: run this binary again under `mpirun -np 2` and pass
 * its output and status on. */
static int relaunch(char **argv) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = '\0';
    fflush(stdout);
    /* Open MPI's own allocations are not ours to report under ASan */
    setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
    char *args[] = {"mpirun", "--allow-run-as-root", "--oversubscribe",
                    "-np", "2", self, NULL};
    (void)argv;
    execvp("mpirun", args);
    return -1; /* no mpirun */
}

int main(int argc, char **argv) {
    (void)argc;
    bool launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") ||
                    getenv("PMIX_RANK");
    if (!launched) {
        if (!delta_comm_built()) {
            printf("skip test_dp: built without MPI (make probes for "
                   "libopenmpi-dev)\n# results: 0 passed, 0 failed, 1 "
                   "skipped\n");
            return 0;
        }
        relaunch(argv);
        printf("skip test_dp: no mpirun on PATH (openmpi-bin)\n# results: 0 "
               "passed, 0 failed, 1 skipped\n");
        return 0;
    }
    char err[512];
    delta_comm *comm = delta_comm_world(err, sizeof err);
    if (!comm) {
        fprintf(stderr, "%s\n", err);
        printf("# results: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    delta_comm_set_timeout(comm, 30);
    rank_ = delta_comm_rank(comm);
    ranks_ = delta_comm_size(comm);
    train_comm = comm;
    train_dp = (delta_dp_opts){.ranks = ranks_, .rank = rank_,
                               .bucket_bytes = 16 << 10};
    delta_cpu_set_threads(1);
    be = delta_backend_cpu_new(&(delta_cpu_backend_opts){.link_gbps = 0},
                               err, sizeof err);
    run_all(test_dp_program, "test_dp_program");
    run_all(test_collectives_in_pieces, "test_collectives_in_pieces");
    run_all(test_dp_every_policy, "test_dp_every_policy");
    run_all(test_dp_matches_one_rank, "test_dp_matches_one_rank");
    run_all(test_dp_clip, "test_dp_clip");
    run_all(test_zero_peak, "test_zero_peak");
    delta_backend_free(be);
    if (rank_ == 0)
        printf("# results: %d passed, %d failed, %d skipped\n", test_passed_,
               test_failed_, test_skipped_);
    int rc = test_failed_ ? 1 : 0;
    delta_comm_free(comm);
    return rc;
}
