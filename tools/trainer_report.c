/* What the tool prints and logs of a run: the plan (delta plan), the
 * result lines and the --json summary (delta train), from the library
 * trainer's figures (delta_trainer_result, delta_trainer_dry_plan). */
#include "trainer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* What a managed policy did over the run, in words, on stdout (keep never
 * swaps or recomputes: nothing to say). */
static void print_policy_totals(const trainer *t) {
    const delta_train_result *r = trainer_result(t);
    if (!strcmp(t->cfg.run.policy, "keep") || r->steps_done == 0) return;
    char out[32], in[32], moved[32];
    const char *secs = t->sim ? " simulated" : "";
    printf("%s over %" PRId64 " steps: dropped %" PRId64 " activations, "
           "recomputed %" PRId64 " ops in %.3f%s s; swapped out %s (%" PRId64
           " copies), swapped in %s (%" PRId64 " copies); compute stalled "
           "%.3f%s s; %" PRId64 " compaction moves (%s)\n",
           t->cfg.run.policy, r->steps_done, r->drops, r->recomputed_ops,
           r->recompute_s, secs,
           delta_format_bytes((double)r->swap_out_bytes, out, sizeof out),
           r->swap_outs,
           delta_format_bytes((double)r->swap_in_bytes, in, sizeof in),
           r->swap_ins, r->stall_s, secs, r->defrag_moves,
           delta_format_bytes((double)r->defrag_bytes, moved, sizeof moved));
}

/* The run's totals of the policy's work into the JSON summary. */
static void add_policy_totals(cJSON *s, const delta_train_result *r) {
    cJSON_AddNumberToObject(s, "swap_out_bytes", (double)r->swap_out_bytes);
    cJSON_AddNumberToObject(s, "swap_in_bytes", (double)r->swap_in_bytes);
    cJSON_AddNumberToObject(s, "swap_outs", (double)r->swap_outs);
    cJSON_AddNumberToObject(s, "swap_ins", (double)r->swap_ins);
    cJSON_AddNumberToObject(s, "drops", (double)r->drops);
    cJSON_AddNumberToObject(s, "dropped_bytes", (double)r->dropped_bytes);
    cJSON_AddNumberToObject(s, "recomputed_ops", (double)r->recomputed_ops);
    cJSON_AddNumberToObject(s, "recompute_s", r->recompute_s);
    cJSON_AddNumberToObject(s, "stall_s", r->stall_s);
    cJSON_AddNumberToObject(s, "defrag_moves", (double)r->defrag_moves);
    cJSON_AddNumberToObject(s, "defrag_bytes", (double)r->defrag_bytes);
    /* blocking host waits inside steps (0 in steady steps), and the host's
     * busy time per step beside the device's: which one bounds a step */
    cJSON_AddNumberToObject(s, "host_syncs", (double)r->host_syncs);
    cJSON_AddNumberToObject(s, "throttle_waits", (double)r->throttle_waits);
    double n = r->steps_done > 0 ? (double)r->steps_done : 1;
    cJSON_AddNumberToObject(s, "host_busy_s_per_step", r->host_busy_s / n);
    cJSON_AddNumberToObject(s, "device_busy_s_per_step", r->device_busy_s / n);
}

/* Shapes and what planning them cost, in words, on stdout. */
static void print_shapes(const trainer *t) {
    const delta_train_result *r = trainer_result(t);
    printf("shapes: %" PRId64 " trained", r->shapes);
    if (r->partial_batches)
        printf(" (%" PRId64 " step%s on an epoch's shorter last batch)",
               r->partial_batches, r->partial_batches == 1 ? "" : "s");
    printf("; planning %.3f s (programs, dry plans and sessions of %d "
           "shape%s; the longest %.3f s)", r->plan_s, (int)r->programs,
           r->programs == 1 ? "" : "s", r->plan_max_s);
    if (r->switches)
        printf("; %" PRId64 " session change%s, %.3f s moving parameters "
               "and state", r->switches, r->switches == 1 ? "" : "s",
               r->switch_s);
    printf("\n");
}

delta_status trainer_report(trainer *t) {
    const train_config *c = &t->cfg;
    const delta_train_result *r = trainer_result(t);
    const delta_model *model = delta_trainer_main_model(t->tr);
    const delta_model_config *m = &model->cfg;
    const delta_dry_plan *plan = delta_trainer_dry_plan(t->tr);
    const delta_dataset *data = delta_trainer_dataset(t->tr);
    size_t budget_bytes = delta_trainer_budget_bytes(t->tr);
    double lr;
    const char *optimizer = delta_trainer_optimizer(t->tr, &lr, NULL, NULL);
    if (t->rank > 0) return DELTA_OK;
    char peak[32], budget[32], line[512];
    delta_format_bytes((double)r->peak_device_bytes, peak, sizeof peak);
    if (budget_bytes)
        delta_format_bytes((double)budget_bytes, budget, sizeof budget);
    else
        snprintf(budget, sizeof budget, "unlimited");
    const char *unit = t->image ? "samples/s" : "tokens/s";
    /* "4", or "4 per rank x 2 ranks" (ZeRO-1 said too); the peak is then
     * the largest rank's */
    char bstr[96];
    if (t->ranks > 1)
        snprintf(bstr, sizeof bstr, "%" PRId64 " per rank x %d ranks%s",
                 m->batch, t->ranks, c->run.zero ? " (ZeRO-1)" : "");
    else
        snprintf(bstr, sizeof bstr, "%" PRId64, m->batch);
    const char *per = t->ranks > 1 ? " per rank" : "";
    int n;
    if (r->steps_done == 0)
        n = snprintf(line, sizeof line, "%s: 0 steps of batch %s, nothing "
                     "trained", m->name, bstr);
    else if (t->sim)
        n = snprintf(line, sizeof line, "%s on simulated %s: %" PRId64
                     " steps of batch %s, median step %.4g s "
                     "(simulated), %.0f %s, peak device memory%s %s of %s "
                     "(policy %s)", m->name, c->run.gpu, r->steps_done, bstr,
                     r->median_step_s, r->units_per_s, unit, per, peak,
                     budget, c->run.policy);
    else
        n = snprintf(line, sizeof line, "%s: %" PRId64 " steps of batch %s "
                     "in %.1f s, final loss %.4f, %.0f %s, peak device "
                     "memory%s %s (budget %s, policy %s)", m->name,
                     r->steps_done, bstr, r->train_s, r->final_loss,
                     r->units_per_s, unit, per, peak, budget, c->run.policy);
    if (c->quiet && r->evaluated && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      ", test accuracy %.4f", r->test_accuracy);
    if (r->validations && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, ", val loss %.4f",
                 r->val_loss);
    printf("%s\n", line);
    if (!c->quiet) print_policy_totals(t);
    if (!c->quiet) print_shapes(t);
    if (r->evaluated && !c->quiet)
        printf("test accuracy: %.4f (%" PRId64 " test images, loss %.4f)\n",
               r->test_accuracy, r->test_samples, r->test_loss);
    fflush(stdout);

    if (!t->json) return DELTA_OK;
    cJSON *top = cJSON_CreateObject();
    cJSON *s = cJSON_AddObjectToObject(top, "summary");
    if (!s) {
        cJSON_Delete(top);
        return trainer_fail(t, DELTA_ERR_NOMEM, "out of memory");
    }
    cJSON_AddStringToObject(s, "model", m->name);
    cJSON_AddNumberToObject(s, "batch", (double)m->batch);
    /* data parallel: batch is per rank, the loss the ranks' mean and the
     * peak the largest rank's */
    cJSON_AddNumberToObject(s, "ranks", (double)t->ranks);
    cJSON_AddNumberToObject(s, "zero",
                            (double)(t->ranks > 1 ? c->run.zero : 0));
    if (t->sim && t->ranks > 1)
        cJSON_AddStringToObject(s, "interconnect", c->run.interconnect
                                    ? c->run.interconnect : "nvlink");
    cJSON_AddNumberToObject(s, "steps", (double)r->steps_done);
    cJSON_AddStringToObject(s, "backend", train_backend(c));
    if (t->sim) cJSON_AddStringToObject(s, "gpu", c->run.gpu);
    else cJSON_AddNullToObject(s, "gpu");
    cJSON_AddBoolToObject(s, "simulated", t->sim);
    cJSON_AddStringToObject(s, "policy", c->run.policy);
    if (budget_bytes)
        cJSON_AddNumberToObject(s, "budget_bytes", (double)budget_bytes);
    else
        cJSON_AddNullToObject(s, "budget_bytes");
    cJSON_AddNumberToObject(s, "peak_device_bytes",
                            (double)r->peak_device_bytes);
    cJSON_AddNumberToObject(s, "baseline_peak_bytes",
                            (double)plan->peak_bytes);
    cJSON_AddNumberToObject(s, "min_budget_bytes",
                            (double)plan->min_budget_bytes);
    add_policy_totals(s, r);
    cJSON_AddNumberToObject(s, "plan_s", r->plan_s);
    cJSON_AddNumberToObject(s, "plan_max_s", r->plan_max_s);
    cJSON_AddNumberToObject(s, "shapes", (double)r->shapes);
    cJSON_AddNumberToObject(s, "programs", (double)r->programs);
    cJSON_AddNumberToObject(s, "shape_switches", (double)r->switches);
    cJSON_AddNumberToObject(s, "switch_s", r->switch_s);
    cJSON_AddNumberToObject(s, "partial_batches", (double)r->partial_batches);
    if (!t->image) {
        cJSON_AddNumberToObject(s, "seq_len", (double)m->seq_len);
        if (c->run.seq_len_max) {
            cJSON_AddNumberToObject(s, "seq_len_min",
                                    (double)c->run.seq_len_min);
            cJSON_AddNumberToObject(s, "seq_len_max",
                                    (double)c->run.seq_len_max);
        }
    }
    cJSON_AddNumberToObject(s, "median_step_s", r->median_step_s);
    json_add_number_or_null(s, "final_loss", r->final_loss);
    cJSON_AddNumberToObject(s, t->image ? "samples_per_s" : "tokens_per_s",
                            r->units_per_s);
    if (r->validations) {
        json_add_number_or_null(s, "val_loss", r->val_loss);
        cJSON_AddNumberToObject(s, "val_samples", (double)r->val_samples);
        cJSON_AddNumberToObject(s, "val_step", (double)r->val_step);
    }
    if (r->evaluated) {
        cJSON_AddNumberToObject(s, "test_accuracy", r->test_accuracy);
        json_add_number_or_null(s, "test_loss", r->test_loss);
        cJSON_AddNumberToObject(s, "test_samples", (double)r->test_samples);
    }
    cJSON_AddStringToObject(s, "data", data ? delta_dataset_name(data)
                                            : "none");
    cJSON_AddStringToObject(s, "optimizer", optimizer);
    cJSON_AddNumberToObject(s, "lr", lr);
    cJSON_AddNumberToObject(s, "seed", (double)c->run.seed);
    cJSON_AddNumberToObject(s, "params", (double)model->n_params);
    bool ok = json_log_write(t->json, top);
    cJSON_Delete(top);
    char sub[512];
    ok = json_log_close(t->json, sub, sizeof sub) && ok;
    t->json = NULL;
    if (!ok)
        return trainer_wrote(t, trainer_fail(t, DELTA_ERR_IO, "%s", sub));
    return DELTA_OK;
}

/* Bytes of the activations the forward pass leaves for backward: roots
 * produced by a forward op and still alive at the first backward op (what
 * PyTorch's saved_tensors_hooks would see, less parameters and inputs);
 * scripts/validate_memory.py compares it with PyTorch's. */
static size_t saved_for_backward_bytes(const delta_ctx *ctx) {
    int n_ops = delta_ctx_n_ops(ctx), bwd0 = n_ops;
    for (int i = 0; i < n_ops && bwd0 == n_ops; i++) {
        delta_op_info oi;
        delta_ctx_op_info(ctx, i, &oi);
        if (oi.phase != DELTA_PHASE_FORWARD) bwd0 = i;
    }
    int n = delta_dry_plan_trace(ctx, NULL, 0);
    delta_dry_block *b = n > 0 ? malloc((size_t)n * sizeof *b) : NULL;
    size_t sum = 0;
    if (b && delta_dry_plan_trace(ctx, b, n) == n)
        for (int i = 0; i < n; i++)
            if (b[i].kind == DELTA_KIND_ACTIVATION && b[i].op >= 0 &&
                b[i].op < bwd0 && b[i].last >= bwd0)
                sum += b[i].size;
    free(b);
    return sum;
}

delta_status trainer_print_plan(trainer *t) {
    const delta_dry_plan *p = delta_trainer_dry_plan(t->tr);
    const delta_model_config *m = &delta_trainer_main_model(t->tr)->cfg;
    const delta_ctx *ctx = delta_trainer_ctx(t->tr);
    char b[8][32];
    printf("%s, batch %" PRId64 ", %s: %d ops, %d blocks, planned in %.1f ms\n",
           m->name, m->batch, delta_trainer_optimizer(t->tr, NULL, NULL, NULL),
           p->n_ops, p->n_blocks, p->plan_seconds * 1e3);
    printf("  parameters %s, gradients (all backward tensors) %s, optimizer and other state %s, "
           "inputs %s, activations %s\n",
           delta_format_bytes((double)p->param_bytes, b[0], 32),
           delta_format_bytes((double)p->grad_bytes, b[1], 32),
           delta_format_bytes((double)(p->state_bytes + p->const_bytes), b[2], 32),
           delta_format_bytes((double)p->input_bytes, b[3], 32),
           delta_format_bytes((double)p->activation_bytes, b[4], 32));
    printf("  unconstrained peak %s (max-live bound %s): what keep needs, "
           "--budget 100%%\n",
           delta_format_bytes((double)p->peak_bytes, b[5], 32),
           delta_format_bytes((double)p->max_live_bytes, b[6], 32));
    printf("  minimum budget %s, for op %d (%s, %s)\n",
           delta_format_bytes((double)p->min_budget_bytes, b[7], 32),
           p->min_budget_op, p->min_budget_op_type, p->min_budget_op_name);
    /* data parallel: the figures above are one rank's */
    int n_coll = 0, n_params = 0, owned = 0;
    for (int i = 0; t->ranks > 1 && i < delta_ctx_n_ops(ctx); i++) {
        delta_op_info oi;
        delta_ctx_op_info(ctx, i, &oi);
        n_coll += !strcmp(oi.type, "allreduce") ||
                  !strcmp(oi.type, "reduce_scatter");
    }
    for (int i = 0; t->ranks > 1 && i < delta_ctx_n_tensors(ctx); i++) {
        const delta_tensor *x = delta_ctx_tensor(ctx, i);
        if (delta_tensor_kind_of(x) != DELTA_KIND_PARAM) continue;
        n_params++;
        owned += delta_dp_owner(x) == t->rank;
    }
    if (t->ranks > 1 && t->cfg.run.zero)
        printf("  data parallel: rank %d of %d, gradients in %d collectives; "
               "ZeRO-1: this rank updates and keeps the optimizer state of %d "
               "of the %d parameters\n", t->rank, t->ranks, n_coll, owned,
               n_params);
    else if (t->ranks > 1)
        printf("  data parallel: rank %d of %d, gradients in %d collectives; "
               "every rank keeps the whole optimizer state (--zero 1 shards "
               "it)\n", t->rank, t->ranks, n_coll);
    if (!t->json) return DELTA_OK;
    cJSON *top = cJSON_CreateObject();
    cJSON *s = cJSON_AddObjectToObject(top, "plan");
    cJSON_AddStringToObject(s, "model", m->name);
    cJSON_AddNumberToObject(s, "batch", (double)m->batch);
    cJSON_AddNumberToObject(s, "ops", p->n_ops);
    cJSON_AddNumberToObject(s, "ranks", t->ranks);
    cJSON_AddNumberToObject(s, "zero", t->ranks > 1 ? t->cfg.run.zero : 0);
    cJSON_AddNumberToObject(s, "param_bytes", (double)p->param_bytes);
    cJSON_AddNumberToObject(s, "grad_bytes", (double)p->grad_bytes);
    cJSON_AddNumberToObject(s, "state_bytes", (double)(p->state_bytes + p->const_bytes));
    cJSON_AddNumberToObject(s, "input_bytes", (double)p->input_bytes);
    cJSON_AddNumberToObject(s, "activation_bytes", (double)p->activation_bytes);
    cJSON_AddNumberToObject(s, "saved_for_backward_bytes",
                            (double)saved_for_backward_bytes(ctx));
    cJSON_AddNumberToObject(s, "baseline_peak_bytes", (double)p->peak_bytes);
    cJSON_AddNumberToObject(s, "max_live_bytes", (double)p->max_live_bytes);
    cJSON_AddNumberToObject(s, "min_budget_bytes", (double)p->min_budget_bytes);
    cJSON_AddNumberToObject(s, "min_budget_op", p->min_budget_op);
    cJSON_AddStringToObject(s, "min_budget_op_type", p->min_budget_op_type);
    cJSON_AddNumberToObject(s, "plan_s", p->plan_seconds);
    char sub[512];
    bool ok = json_log_write(t->json, top);
    cJSON_Delete(top);
    ok = json_log_close(t->json, sub, sizeof sub) && ok;
    t->json = NULL;
    if (!ok)
        return trainer_wrote(t, trainer_fail(t, DELTA_ERR_IO, "--json: %s",
                                             sub));
    return DELTA_OK;
}
