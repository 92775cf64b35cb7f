/* delta is the default policy: at every budget some peer trains, delta
 * trains too, bit-identically to keep (issue 16, defect 5: ResNet-18 w8
 * batch 16 seed 3 at 30% failed under delta while capuchin and autoswap
 * trained). A grid of small configurations and budgets on the cpu backend
 * (unthrottled link, so the grid runs in seconds): for each cell the peers
 * are tried in turn until one trains; if one does, delta must. */
#define N_STEPS 4
#include "policy_train.h"

#include <stdlib.h>
#include <string.h>

static const model_case extra[] = {
    {"resnet18-w8-b16", {.name = "resnet18", .batch = 16, .image_size = 28,
                         .channels = 1, .classes = 10, .width = 8}, false},
    {"resnet18-w8-b32", {.name = "resnet18", .batch = 32, .image_size = 28,
                         .channels = 1, .classes = 10, .width = 8}, false},
};

static const int pcts[] = {50, 40, 35, 30, 25};
static const char *const peers[] = {"swap", "checkpoint", "dtr", "capuchin",
                                    "autoswap"};

static void grid(const model_case *mc, delta_backend *be, int *cells,
                 int *met) {
    char *ref = NULL, why[512] = "";
    size_t ref_n = 0, peak = 0;
    delta_step_stats sum;
    CHECK(train(mc, be, NULL, 0, &ref, &ref_n, &peak, &sum, why,
                sizeof why) == RAN, "keep on %s: %s", mc->label, why);
    size_t min_budget, base = baseline_peak(mc, &min_budget);
    for (size_t k = 0; k < sizeof pcts / sizeof pcts[0]; k++) {
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
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        grid(&extra[i], be, &cells, &met);
    for (int i = 0; i < N_MODELS; i++) grid(&models[i], be, &cells, &met);
    printf("  delta trains %d of the %d cells some peer trains\n", met, cells);
    CHECK(cells > 10, "the grid has cells a peer trains (%d)", cells);
    delta_backend_free(be);
}

int main(void) {
    TEST_RUN(test_delta_meets_every_peer_budget);
    TEST_MAIN_END();
}
