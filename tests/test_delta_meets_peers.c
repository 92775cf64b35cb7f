/* delta is the default policy: at every budget some peer trains, delta
 * trains too, bit-identically to keep (issue 16, defect 5: ResNet-18 w8
 * batch 16 seed 3 at 30% failed under delta while capuchin and autoswap
 * trained). A grid of small configurations and budgets on the cpu backend
 * (unthrottled link, so the grid runs in seconds): for each cell the peers
 * are tried in turn until one trains; if one does, delta must.
 *
 * Near the minimum budget, a residual network's recomputations are what
 * fails: a block's output, dropped, is recomputed from the previous
 * block's output, itself gone, and so on, under the pinned inputs of the
 * op that needs it (ResNet-50 at 15% on the cpu, and at paper scale on the
 * simulated H100, batch 64 at 620 and 700 MiB: delta failed in its first
 * step, or in the step trying its full plan, where autoswap and capuchin
 * trained). The cpu cells check those bit for bit; the sim cells, at paper
 * scale (no data there: only that delta trains inside the budget), run
 * past delta's mode trials (N_STEPS_SIM). */
#define N_STEPS 4
#define N_STEPS_SIM 6
#include "policy_train.h"

#include <stdlib.h>
#include <string.h>

static const model_case extra[] = {
    {"resnet18-w8-b16", {.name = "resnet18", .batch = 16, .image_size = 28,
                         .channels = 1, .classes = 10, .width = 8}, false},
    {"resnet18-w8-b32", {.name = "resnet18", .batch = 32, .image_size = 28,
                         .channels = 1, .classes = 10, .width = 8}, false},
};

/* near the minimum budget (0.79 MiB; keep's peak 9.8 MiB) */
static const model_case resnet50 = {
    "resnet50-w8-b32", {.name = "resnet50", .batch = 32, .image_size = 28,
                        .channels = 1, .classes = 10, .width = 8}, false};
static const int resnet50_pcts[] = {13, 10};

static const int pcts[] = {50, 40, 35, 30, 25};
static const char *const peers[] = {"swap", "checkpoint", "dtr", "capuchin",
                                    "autoswap"};

static void grid(const model_case *mc, delta_backend *be, const int *pcts,
                 size_t n_pcts, int *cells, int *met) {
    char *ref = NULL, why[512] = "";
    size_t ref_n = 0, peak = 0;
    delta_step_stats sum;
    CHECK(train(mc, be, NULL, 0, &ref, &ref_n, &peak, &sum, why,
                sizeof why) == RAN, "keep on %s: %s", mc->label, why);
    size_t min_budget, base = baseline_peak(mc, &min_budget);
    for (size_t k = 0; k < n_pcts; k++) {
        size_t budget = base * (size_t)pcts[k] / 100;
        if (budget < min_budget) continue;
        const char *who = NULL;
        for (size_t q = 0; q < sizeof peers / sizeof peers[0] && !who; q++) {
            char *got = NULL;
            size_t got_n = 0;
            if (train(mc, be, peers[q], budget, &got, &got_n, &peak, &sum,
                      why, sizeof why) == RAN)
                who = peers[q];
            free(got);
        }
        if (!who) continue; /* no peer trains it: delta may refuse too */
        (*cells)++;
        char *got = NULL;
        size_t got_n = 0;
        outcome oc = train(mc, be, "delta", budget, &got, &got_n, &peak,
                           &sum, why, sizeof why);
        CHECK(oc == RAN, "%s at %d%%: %s trains, delta does not: %s",
              mc->label, pcts[k], who, why);
        if (oc == RAN) {
            (*met)++;
            CHECK(got_n == ref_n && !memcmp(got, ref, ref_n),
                  "%s at %d%%: delta differs from keep", mc->label, pcts[k]);
        }
        printf("  %-16s %2d%%: %s trains; delta %s\n", mc->label, pcts[k],
               who, oc == RAN ? "trains" : "fails");
        free(got);
    }
    free(ref);
}

static void test_delta_meets_every_peer_budget(void) {
    delta_backend *be = delta_backend_cpu_new(
        &(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0}, NULL,
        0);
    CHECK(be != NULL, "cpu backend");
    if (!be) return;
    int cells = 0, met = 0;
    size_t n_pcts = sizeof pcts / sizeof pcts[0];
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        grid(&extra[i], be, pcts, n_pcts, &cells, &met);
    for (int i = 0; i < N_MODELS; i++)
        grid(&models[i], be, pcts, n_pcts, &cells, &met);
    grid(&resnet50, be, resnet50_pcts,
         sizeof resnet50_pcts / sizeof resnet50_pcts[0], &cells, &met);
    printf("  delta trains %d of the %d cells some peer trains\n", met, cells);
    CHECK(cells > 10, "the grid has cells a peer trains (%d)", cells);
    delta_backend_free(be);
}

/* The simulated `gpu`, or NULL (a failed check) when it cannot be made. */
static delta_backend *sim_backend(const char *gpu) {
    char err[256] = "";
    delta_backend *be = delta_backend_sim_new(
        &(delta_sim_backend_opts){.gpu = gpu}, err, sizeof err);
    CHECK(be != NULL, "sim backend %s: %s", gpu, err);
    return be;
}

/* ResNet-50 224x224 batch 64 (SGD) on the simulated H100 at 620 and 700
 * MiB (keep: 5.3 GiB; the minimum 588 MiB): autoswap trains, so delta
 * must, its high-water mark within the budget (train() checks it). */
static void test_delta_meets_peers_sim_resnet50(void) {
    delta_backend *be = sim_backend("h100-80g");
    if (!be) return;
    static const model_case mc = {
        "resnet50-b64", {.name = "resnet50", .batch = 64, .image_size = 224,
                         .channels = 3, .classes = 1000}, false};
    static const size_t mib[] = {620, 700};
    train_steps = N_STEPS_SIM;
    for (size_t k = 0; k < sizeof mib / sizeof mib[0]; k++) {
        size_t budget = mib[k] << 20, peak = 0, n = 0;
        delta_step_stats sum;
        char why[512] = "", *got = NULL;
        CHECK(train(&mc, be, "autoswap", budget, &got, &n, &peak, &sum, why,
                    sizeof why) == RAN,
              "%s: autoswap at %zu MiB: %s", mc.label, mib[k], why);
        free(got);
        got = NULL;
        outcome oc = train(&mc, be, "delta", budget, &got, &n, &peak, &sum,
                           why, sizeof why);
        CHECK(oc == RAN, "%s at %zu MiB: autoswap trains, delta does not: %s",
              mc.label, mib[k], why);
        printf("  %-16s %zu MiB: autoswap trains; delta %s (peak %zu B)\n",
               mc.label, mib[k], oc == RAN ? "trains" : "fails", peak);
        free(got);
    }
    train_steps = N_STEPS;
    delta_backend_free(be);
}

/* The check that keeps those drops out must not refuse drops whose
 * recomputation fits: ResNet-50 224x224 at batch 5143 on the simulated
 * A100-80GB, its whole memory the budget (the largest batch delta reached
 * before that check: 1.3 TB of activations with everything kept). A
 * block's shortcut, recomputed inside the main branch's chain, is there
 * when the add needs it; counting it recomputed again, under the other
 * branch's output, at every block back to the stem estimated 83 GB for
 * recomputing a 16 GB tensor, and the online step swapped 19.7 GB
 * instead of dropping (14.5 s a step against 13.3). */
static void test_delta_drops_what_it_can_recompute(void) {
    delta_backend *be = sim_backend("a100-80g");
    if (!be) return;
    static const model_case mc = {
        "resnet50-b5143", {.name = "resnet50", .batch = 5143,
                           .image_size = 224, .channels = 3,
                           .classes = 1000}, false};
    train_steps = 1; /* the profile: online decisions only */
    size_t budget = (size_t)80 << 30, peak = 0, n = 0;
    delta_step_stats sum = {0};
    char why[512] = "", *got = NULL;
    outcome oc = train(&mc, be, "delta", budget, &got, &n, &peak, &sum, why,
                       sizeof why);
    CHECK(oc == RAN, "%s: %s", mc.label, why);
    printf("  %s in 80 GiB: %.2f GB swapped out, %d drops, %d recomputed\n",
           mc.label, (double)sum.swap_out_bytes / 1e9, sum.drops,
           sum.recomputed_ops);
    CHECK(sum.swap_out_bytes < ((size_t)1 << 30),
          "delta swapped %zu B where drops fit", sum.swap_out_bytes);
    free(got);
    train_steps = N_STEPS;
    delta_backend_free(be);
}

int main(void) {
    TEST_RUN(test_delta_meets_every_peer_budget);
    TEST_RUN(test_delta_meets_peers_sim_resnet50);
    TEST_RUN(test_delta_drops_what_it_can_recompute);
    TEST_MAIN_END();
}
