/* nebula-fed — federated learning over libcore: a server (rank 0) and simulated clients
 * on the other ranks, with differential privacy, secure aggregation and robust
 * aggregation (libcore/fed).
 *
 *   mpirun -np 4 nebula-fed --config configs/fed/digits-resnet.ini [--set k=v ...]
 *
 * main() reads like a script over libcore/fed: parse -> runtime -> setup (data, shards,
 * model, server state) -> resume -> rounds -> free. Exit status: 0 the rounds (or the
 * privacy budget) are done, 1 a runtime failure, 2 bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "fed/fed.h"

static const char fed_usage[] =
    "usage: mpirun -np N nebula-fed --config FILE [--set section.key=value ...] [options]\n"
    "  rank 0 is the server; fed.clients simulated clients are dealt to ranks 1..N-1 (all on rank 0 when\n"
    "  N = 1). Every round: sample clients, local training, checks, aggregation (FedAvg / FedAdam / FedYogi,\n"
    "  or trimmed mean / median), optional DP-FedAvg (dp.mode) with an RDP accountant and a budget\n"
    "  (dp.target_epsilon), optional DP-SGD in the clients' local steps (dp.sample_clip: per-example\n"
    "  clipping, dp.sample_noise), optional secure aggregation (secagg.enable); clients that fail or miss\n"
    "  fed.round_timeout are dropped for the round. A killed client rank is survived only when mpirun\n"
    "  runs with --enable-recovery.\n"
    "       nebula-fed audit --config FILE [--set ...] [--resume CKPT_DIR] [--shadows K] [--json]\n"
    "  membership inference against the run's released global model (its newest committed checkpoint, or\n"
    "  --resume): members are data.train, non-members data.val; Yeom's loss threshold, the AUC and the TPR at\n"
    "  1% and 0.1% FPR of the loss as a score; attribute inference (Yeom et al.: the bin of the pixel of\n"
    "  largest variance, guessed by the least loss; member and non-member accuracy, audit.attribute_levels);\n"
    "  model inversion (Fredrikson et al.'s MI-FACE by finite differences, audit.inversion_steps; SSIM and\n"
    "  NCC with each class's mean member image); with --shadows K (audit.shadows), LiRA (Carlini et al.):\n"
    "  K shadow runs of this configuration on random halves of data.train + data.val, online and offline\n"
    "  scores. One process.\n"
    "exit status: 0 done (rounds or privacy budget), 1 runtime failure, 2 usage or input error";

static const cli_option fed_options[] = {
    { "ranks-per-node", "runtime.ranks_per_node", NULL },
    { "model", "model.name", NULL },
    { "rounds", "fed.rounds", NULL },
    { "clients", "fed.clients", NULL },
    { "seed", "fed.seed", NULL },
    { "run-dir", "fed.run_dir", NULL },
    { "data", "data.train", NULL },
    { "val", "data.val", NULL },
    { "resume", "ckpt.resume", NULL },
    { "ckpt-every", "ckpt.every_rounds", NULL },
    { "dp", "dp.mode", NULL },
    { "epsilon", "dp.target_epsilon", NULL },
    { "secagg", "secagg.enable", "true" },
    { "shadows", "audit.shadows", NULL },
};

/* What nebula-fed audit found. */
typedef struct audit_results {
    const fed_ledger *led;
    fed_audit_report a;        /* membership inference by the loss */
    bool attr, invert, lira_on; /* which of the others ran */
    fed_attr_report at;
    fed_inv_report inv;
    fed_lira_report lira;
} audit_results;

static void audit_print_json(const audit_results *r)
{
    const fed_audit_report *a = &r->a;
    printf("{\"round\": %lld, \"epsilon\": %.6g, \"members\": %lld, \"nonmembers\": %lld, \"member_loss\": %.6g, "
           "\"nonmember_loss\": %.6g, \"member_acc\": %.6g, \"nonmember_acc\": %.6g, \"auc\": %.6g, "
           "\"tpr_at_1pct_fpr\": %.6g, \"tpr_at_0.1pct_fpr\": %.6g, \"yeom_advantage\": %.6g, \"yeom_accuracy\": %.6g",
           (long long)r->led->round, r->led->eps, (long long)a->members, (long long)a->nonmembers, a->member_loss,
           a->nonmember_loss, a->member_conf, a->nonmember_conf, a->auc, a->tpr_1pct, a->tpr_01pct, a->yeom_advantage,
           a->yeom_accuracy);
    const fed_attr_report *at = &r->at;
    if (r->attr)
        printf(", \"attr_member_acc\": %.6g, \"attr_nonmember_acc\": %.6g, \"attr_baseline\": %.6g, "
               "\"attr_advantage\": %.6g, \"attr_levels\": %d, \"attr_pixel\": %d", at->member_acc, at->nonmember_acc,
               at->baseline, at->advantage, at->levels, at->pixel);
    const fed_inv_report *inv = &r->inv;
    char ssim[32] = "null";  /* NaN (an image under 7x7 has no SSIM) is no JSON number */
    if (!isnan(inv->ssim)) snprintf(ssim, sizeof ssim, "%.6g", inv->ssim);
    if (r->invert)
        printf(", \"inv_classes\": %d, \"inv_ssim\": %s, \"inv_ncc\": %.6g, \"inv_cosine\": %.6g, "
               "\"inv_identified\": %.6g", inv->classes, ssim, inv->ncc, inv->cosine, inv->identified);
    const fed_lira_report *l = &r->lira;
    if (r->lira_on)
        printf(", \"lira_shadows\": %d, \"lira_scored\": %lld, \"lira_auc\": %.6g, \"lira_tpr_at_1pct_fpr\": %.6g, "
               "\"lira_tpr_at_0.1pct_fpr\": %.6g, \"lira_offline_auc\": %.6g, \"lira_offline_tpr_at_1pct_fpr\": %.6g",
               l->shadows, (long long)l->scored, l->auc, l->tpr_1pct, l->tpr_01pct, l->off_auc, l->off_tpr_1pct);
    printf("}\n");
}

static void audit_print_text(const audit_results *r)
{
    const fed_audit_report *a = &r->a;
    const char *conf = a->images ? "p(true) > 1/2" : "mean exp(-loss)";
    printf("audit: round %lld, epsilon %.4g; %lld members (loss %.4f, %s: %.4f), %lld non-members (loss %.4f, %.4f)\n",
           (long long)r->led->round, r->led->eps, (long long)a->members, a->member_loss, conf, a->member_conf,
           (long long)a->nonmembers, a->nonmember_loss, a->nonmember_conf);
    printf("audit: membership inference: AUC %.4f, TPR %.4f at 1%% FPR, %.4f at 0.1%% FPR; Yeom's threshold: "
           "advantage %.4f, accuracy %.4f\n", a->auc, a->tpr_1pct, a->tpr_01pct, a->yeom_advantage, a->yeom_accuracy);
    const fed_attr_report *at = &r->at;
    if (r->attr)
        printf("audit: attribute inference (pixel %d, %d levels): members %.4f, non-members %.4f, baseline %.4f; "
               "advantage %.4f\n", at->pixel, at->levels, at->member_acc, at->nonmember_acc, at->baseline, at->advantage);
    const fed_inv_report *inv = &r->inv;
    if (r->invert)
        printf("audit: model inversion (%d steps, %d classes, %d without members skipped): SSIM %.4f, NCC %.4f, "
               "cosine %.4f; identified %.4f (chance %.4f)\n", inv->steps, inv->classes, inv->skipped, inv->ssim,
               inv->ncc, inv->cosine, inv->identified, 1.0 / inv->classes);
    if (!a->images) printf("audit: attribute inference and model inversion read pixels: not run on a language model\n");
    const fed_lira_report *l = &r->lira;
    if (r->lira_on)
        printf("audit: LiRA (%d shadows, %lld examples scored, %lld not): online AUC %.4f, TPR %.4f at 1%% FPR, %.4f "
               "at 0.1%% FPR; offline AUC %.4f, TPR %.4f at 1%% FPR\n", l->shadows, (long long)l->scored,
               (long long)l->unscored, l->auc, l->tpr_1pct, l->tpr_01pct, l->off_auc, l->off_tpr_1pct);
}

/* nebula-fed audit: the server's checkpoint against members and non-members. */
static int audit_main(int argc, char **argv)
{
    bool json = false;
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--json")) {
            json = true;
            for (int k = i; k < argc - 1; k++) argv[k] = argv[k + 1];
            argc--, i--;
        }
    static config_key schema[256];
    config cfg;
    config_init(&cfg, schema, fed_config_schema(schema, 256));
    cli_action action;
    status st = cli_parse(&cfg, fed_options, (int)(sizeof fed_options / sizeof fed_options[0]), argc, argv, 2,
                          fed_usage, &action);
    if (st != STATUS_OK) return runtime_exit_early(status_exit_code(st));
    if (action == CLI_ACTION_EXIT) return 0;
    runtime_options ro;
    runtime_options_from_config(&cfg, &ro);
    ro.timeout_s = config_float(&cfg, "comm.timeout");
    runtime rt;
    st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    int world = 1;
    MPI_Comm_size(rt.world, &world);
    if (world != 1) {
        log_error0("nebula-fed audit runs in one process (it found %d ranks)", world);
        runtime_exit(&rt, STATUS_USAGE);
    }
    fed_run *f = NULL;
    audit_results r;
    memset(&r, 0, sizeof r);
    st = fed_setup_audit(&f, &cfg, &rt);
    if (st == STATUS_OK) st = fed_resume(f);
    if (st == STATUS_OK && fed_get_ledger(f)->round == 0) {
        log_error0("nebula-fed audit: %s/ckpt holds no committed checkpoint of the run (ckpt.resume = %s): there is no "
                   "released model to attack", config_str(&cfg, "fed.run_dir"), config_str(&cfg, "ckpt.resume"));
        st = STATUS_INPUT;
    }
    if (st == STATUS_OK) st = fed_audit_membership(f, &r.a);
    if (st == STATUS_OK) r.led = fed_get_ledger(f);
    r.attr = r.a.images;  /* the attribute and inversion attacks read pixels */
    r.invert = r.a.images && config_int(&cfg, "audit.inversion_steps") > 0;
    r.lira_on = config_int(&cfg, "audit.shadows") > 0;
    if (st == STATUS_OK && r.attr) st = fed_audit_attribute(f, &r.at);
    if (st == STATUS_OK && r.invert) st = fed_audit_inversion(f, &r.inv);
    if (st == STATUS_OK && r.lira_on) st = fed_audit_lira(f, (int)config_int(&cfg, "audit.shadows"), &r.lira);
    if (st == STATUS_OK) (json ? audit_print_json : audit_print_text)(&r);
    if (st != STATUS_OK) log_error0("nebula-fed audit: %s", status_str(st));
    fed_free(f);
    runtime_exit(&rt, st);
}

int main(int argc, char **argv)
{
    runtime_preinit(argv[0]);
    if (argc >= 2 && !strcmp(argv[1], "audit")) return audit_main(argc, argv);
    static config_key schema[256];
    config cfg;
    config_init(&cfg, schema, fed_config_schema(schema, 256));
    cli_action action;
    status st = cli_parse(&cfg, fed_options, (int)(sizeof fed_options / sizeof fed_options[0]), argc, argv, 1,
                          fed_usage, &action);
    if (st != STATUS_OK) return runtime_exit_early(status_exit_code(st));
    if (action == CLI_ACTION_EXIT) return 0;

    runtime_options ro;
    runtime_options_from_config(&cfg, &ro);
    ro.timeout_s = config_float(&cfg, "comm.timeout") + 4 * config_float(&cfg, "fed.round_timeout");
    runtime rt;
    st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    if (rt.rank == 0) {
        printf("nebula-fed %s\n", cli_version());
        config_print(&cfg, stdout);
    }

    fed_run *f = NULL;
    st = fed_setup(&f, &cfg, &rt);
    if (st == STATUS_OK) fed_print(f, stdout);
    if (st == STATUS_OK) st = fed_resume(f);
    if (st == STATUS_OK) st = fed_run_rounds(f);
    if (st == STATUS_OK && rt.rank == 0) {
        const fed_ledger *l = fed_get_ledger(f);
        printf("fed: done after %lld rounds (%s): %lld clients sampled, %lld dropped, %lld updates refused",
               (long long)l->round, l->stop == 2 ? "privacy budget spent" : "all rounds", (long long)l->sampled,
               (long long)l->dropped, (long long)l->refused);
        if (l->eps > 0) printf(", epsilon %.4f", l->eps);
        printf("\n");
    }
    if (runtime_must_abort(st)) runtime_exit(&rt, st);
    if (f && fed_peers_lost(f)) {
        /* a dead rank never reaches MPI_Finalize's barrier: the survivors end without it
         * (mpirun --enable-recovery reports the dead one, not these) */
        if (rt.rank == 0) printf("fed: a rank was lost during the run: the processes end without MPI_Finalize\n");
        fflush(stdout), fflush(stderr);
        _exit(status_exit_code(st));
    }
    fed_free(f);
    runtime_exit(&rt, st);
}
