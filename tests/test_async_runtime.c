/* The asynchronous runtime: the host runs ahead of the device and never
 * waits for it inside a steady step. For every policy, on the cpu and sim
 * backends, at budgets from the unconstrained peak down: host_syncs (the
 * blocking host waits inside a step, the run-ahead throttle and the step's
 * end apart) is 0 in every step after the first two; the host waiting for
 * every op (sync_every_op, the first runtime) counts its waits and trains
 * the same bits; a tight run-ahead bound throttles and trains the same
 * bits. */
#include "policy_train.h"

#include <stdlib.h>
#include <string.h>

#define STEPS 6

typedef struct run_out {
    bool ok;
    int syncs_steady, syncs_all, throttles;
    char *state;
    size_t state_n;
} run_out;

static run_out run(const model_case *mc, delta_backend *be, const char *policy,
                   size_t budget, int run_ahead, bool sync_every_op) {
    run_out r = {0};
    built b;
    if (!build(mc, &b)) return r;
    delta_session_opts so = {.backend = be, .budget_bytes = budget,
                             .policy = policy, .run_ahead = run_ahead,
                             .sync_every_op = sync_every_op};
    delta_status st;
    char err[512];
    delta_session *s = delta_session_new(b.ctx, &so, &st, err, sizeof err);
    if (!s) {
        delta_ctx_free(b.ctx);
        return r; /* a budget this policy cannot work in */
    }
    cbuf cb = {0};
    delta_model_fill_constants(&b.model, cbuf_of, &cb);
    for (int i = 0; i < cb.n; i++) {
        delta_session_write(s, cb.t[i], cb.d[i], delta_tensor_bytes(cb.t[i]));
        free(cb.d[i]);
    }
    r.ok = true;
    for (int step = 0; step < STEPS && r.ok; step++) {
        feed(s, &b, step);
        delta_step_stats ss;
        r.ok = delta_session_run(s, DELTA_RUN_STEP, &ss) == DELTA_OK;
        if (!r.ok) break;
        r.syncs_all += ss.host_syncs;
        r.throttles += ss.throttle_waits;
        if (step >= 2) r.syncs_steady += ss.host_syncs;
        CHECK(ss.host_busy_s >= 0 && ss.device_busy_s >= 0);
    }
    if (r.ok) {
        r.state_n = trained_state_bytes(b.ctx);
        r.state = malloc(r.state_n);
        char *p = r.state;
        for (int i = 0; i < delta_ctx_n_tensors(b.ctx); i++) {
            delta_tensor *t = delta_ctx_tensor(b.ctx, i);
            if (!trained_state(t)) continue;
            delta_session_read(s, t, p, delta_tensor_bytes(t));
            p += delta_tensor_bytes(t);
        }
    }
    delta_session_free(s);
    delta_ctx_free(b.ctx);
    return r;
}

static delta_backend *backend(bool sim) {
    char err[256];
    delta_backend *be =
        sim ? delta_backend_sim_new(
                  &(delta_sim_backend_opts){.gpu = "h100-80g"}, err, sizeof err)
            : delta_backend_cpu_new(
                  &(delta_cpu_backend_opts){.link_gbps = -1,
                                            .link_latency_s = -1},
                  err, sizeof err);
    CHECK(be != NULL, "%s", err);
    return be;
}

/* No blocking host wait in a steady step, for every policy and budget. */
static void test_no_host_waits(void) {
    static const double fractions[] = {1.0, 0.6, 0.4};
    for (int sim = 0; sim < 2; sim++) {
        delta_backend *be = backend(sim);
        for (int mi = 0; mi < N_MODELS; mi += 2) { /* mlp, gpt2 */
            size_t min_budget, peak = baseline_peak(&models[mi], &min_budget);
            for (const char *const *p = delta_session_policies(); *p; p++) {
                for (int f = 0; f < 3; f++) {
                    size_t budget = (size_t)(fractions[f] * (double)peak);
                    if (budget < min_budget) continue;
                    run_out r = run(&models[mi], be, *p, budget, 0, false);
                    if (!r.ok) continue; /* refused: other tests see to it */
                    CHECK(r.syncs_steady == 0,
                          "%s %s %s at %.0f%%: %d blocking host waits in "
                          "steady steps", sim ? "sim" : "cpu",
                          models[mi].label, *p, 100 * fractions[f],
                          r.syncs_steady);
                    free(r.state);
                }
            }
        }
        delta_backend_free(be);
    }
}

/* The first runtime's waits are counted (on the sim, whose device lags its
 * host), and waiting or a tight run-ahead changes no bit of the training
 * (on the cpu). */
static void test_waits_counted_same_bits(void) {
    const model_case *mc = &models[2]; /* gpt2, with dropout */
    size_t min_budget, peak = baseline_peak(mc, &min_budget);
    const char *policies[] = {"keep", "delta", "dtr"};
    for (int sim = 0; sim < 2; sim++) {
        delta_backend *be = backend(sim);
        for (int k = 0; k < 3; k++) {
            size_t budget = k ? (size_t)(0.6 * (double)peak) : 0;
            run_out a = run(mc, be, policies[k], budget, 0, false);
            run_out w = run(mc, be, policies[k], budget, 0, true);
            run_out t = run(mc, be, policies[k], budget, 2, false);
            CHECK(a.ok && w.ok && t.ok, "%s runs", policies[k]);
            if (sim && a.ok && w.ok && t.ok) {
                CHECK(w.syncs_all > 0 && a.syncs_all == 0,
                      "%s: waiting for every op counts %d waits, ahead %d",
                      policies[k], w.syncs_all, a.syncs_all);
                CHECK(t.throttles > 0, "%s: a run-ahead of 2 throttles",
                      policies[k]);
                printf("  sim %s: %d waits with the host waiting for every "
                       "op, %d throttle waits with a run-ahead of 2\n",
                       policies[k], w.syncs_all, t.throttles);
            }
            if (!sim && a.ok && w.ok && t.ok) {
                CHECK(a.state_n == w.state_n &&
                          !memcmp(a.state, w.state, a.state_n),
                      "%s: the host waiting for every op trains the same bits",
                      policies[k]);
                CHECK(a.state_n == t.state_n &&
                          !memcmp(a.state, t.state, a.state_n),
                      "%s: a run-ahead of 2 ops trains the same bits",
                      policies[k]);
            }
            free(a.state);
            free(w.state);
            free(t.state);
        }
        delta_backend_free(be);
    }
}

int main(void) {
    TEST_RUN(test_no_host_waits);
    TEST_RUN(test_waits_counted_same_bits);
    TEST_MAIN_END();
}
