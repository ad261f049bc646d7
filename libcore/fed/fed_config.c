/* fed_config — nebula-fed's configuration schema: the [fed] round keys, [dp], [secagg],
 * the audit's attacks ([audit]), the clients' local optimizer ([optim]), the data
 * ([data]) and the server's checkpoints ([ckpt]), beside the shared [runtime], [comm]
 * and [model] sections. */
#include "base/runtime.h"
#include "comm/comm.h"
#include "fed.h"
#include "nn/model.h"

static const config_key fed_keys[] = {
    { "fed", "run_dir", CONFIG_TYPE_STRING, "runs/fed", .help = "run directory: metrics.jsonl, tb/, ckpt/" },
    { "fed", "seed", CONFIG_TYPE_INT, "1234", .min = 0, .max = 9e18,
      .help = "every draw: initial model, partitions, sampling, batches, noise" },
    { "fed", "rounds", CONFIG_TYPE_INT, "50", .min = 1, .max = 1e9, .help = "rounds of the run" },
    { "fed", "clients", CONFIG_TYPE_INT, "20", .min = 1, .max = 1 << 20,
      .help = "simulated clients in all, dealt to ranks 1.. round-robin (all on rank 0 without other ranks)" },
    { "fed", "sampling", CONFIG_TYPE_ENUM, "fixed", .choices = "fixed|poisson",
      .help = "clients per round: a fixed count drawn without replacement, or each with probability sample_rate" },
    { "fed", "clients_per_round", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 20,
      .help = "fixed sampling: clients per round (0: all)" },
    { "fed", "sample_rate", CONFIG_TYPE_FLOAT, "0.5", .min = 1e-9, .max = 1,
      .help = "poisson sampling: each client's probability q of taking part in a round" },
    { "fed", "local_steps", CONFIG_TYPE_INT, "5", .min = 1, .max = 1e6,
      .help = "E: optimizer steps of a client per round, on batches of local_batch from its shard" },
    { "fed", "local_batch", CONFIG_TYPE_INT, "16", .min = 1, .max = 1 << 20, .help = "samples per local step" },
    { "fed", "partition", CONFIG_TYPE_ENUM, "iid", .choices = "iid|dirichlet|by_file",
      .help = "client shards: iid, dirichlet (label skew over images, alpha), by_file (text: whole source files)" },
    { "fed", "alpha", CONFIG_TYPE_FLOAT, "0.5", .min = 1e-6, .max = 1e6,
      .help = "dirichlet partition: concentration (small: each client sees few classes)" },
    { "fed", "aggregator", CONFIG_TYPE_ENUM, "mean", .choices = "mean|trimmed_mean|median",
      .help = "mean (FedAvg, weighted by samples; fixed denominator under DP) or coordinate-wise robust rules" },
    { "fed", "trim", CONFIG_TYPE_FLOAT, "0.1", .min = 0, .max = 0.49,
      .help = "trimmed_mean: fraction of the updates cut at each end, per coordinate" },
    { "fed", "server_optimizer", CONFIG_TYPE_ENUM, "avg", .choices = "avg|adam|yogi",
      .help = "server step on the aggregate: avg (FedAvg), adam (FedAdam), yogi (FedYogi)" },
    { "fed", "server_lr", CONFIG_TYPE_FLOAT, "1", .min = 0, .max = 1e3, .help = "server learning rate" },
    { "fed", "server_beta1", CONFIG_TYPE_FLOAT, "0.9", .min = 0, .max = 0.999999, .help = "FedAdam/FedYogi" },
    { "fed", "server_beta2", CONFIG_TYPE_FLOAT, "0.99", .min = 0, .max = 0.999999, .help = "FedAdam/FedYogi" },
    { "fed", "server_tau", CONFIG_TYPE_FLOAT, "1e-3", .min = 1e-12, .max = 1e3,
      .help = "FedAdam/FedYogi: adaptivity (v starts at tau^2)" },
    { "fed", "max_update_norm", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e30,
      .help = "refuse an update whose L2 norm is above this (0: off; under DP the clip norm is the limit)" },
    { "fed", "round_timeout", CONFIG_TYPE_FLOAT, "600", .min = 0.1, .max = 1e7,
      .help = "seconds the server waits for the clients' messages of one phase; later ones are dropped" },
    { "fed", "eval_every", CONFIG_TYPE_INT, "1", .min = 0, .max = 1e9,
      .help = "held-out evaluation every N rounds and after the last (0: after the last only)" },
    { "fed", "eval_batch", CONFIG_TYPE_INT, "256", .min = 1, .max = 1 << 20, .help = "samples per evaluation forward" },
    { "fed", "threads", CONFIG_TYPE_INT, "0", .min = 0, .max = 4096,
      .help = "OpenMP and BLAS threads of a rank (0: its cores, shared among the ranks bound to them)" },
    { "fed", "plant", CONFIG_TYPE_STRING, "",
      .help = "tests: hostile or failing clients, WHAT:ID[@ROUND],... (scale nan size stale norm fail drop; "
              "kill:RANK@ROUND ends a rank's process)" },
    { "dp", "mode", CONFIG_TYPE_ENUM, "off", .choices = "off|central|distributed",
      .help = "client-level DP: noise added by the server to the sum, or by the clients in shares (needs secagg)" },
    { "dp", "clip", CONFIG_TYPE_FLOAT, "1", .min = 1e-12, .max = 1e12, .help = "C: every update clipped to this L2 norm" },
    { "dp", "noise_multiplier", CONFIG_TYPE_FLOAT, "1", .min = 0, .max = 1e6,
      .help = "sigma: the sum's noise has standard deviation sigma C (derived when target_epsilon and budget = noise)" },
    { "dp", "delta", CONFIG_TYPE_FLOAT, "1e-5", .min = 1e-30, .max = 0.5, .help = "delta of the (epsilon, delta) reported" },
    { "dp", "target_epsilon", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e9,
      .help = "privacy budget of the run (0: none); the run stops before a round would exceed it" },
    { "dp", "budget", CONFIG_TYPE_ENUM, "noise", .choices = "noise|rounds",
      .help = "what target_epsilon derives: noise (sigma for fed.rounds) or rounds (as many as sigma allows)" },
    { "dp", "adaptive_clip", CONFIG_TYPE_BOOL, "false",
      .help = "the clip norm follows a quantile of the update norms, privately estimated (Andrew et al. 2021)" },
    { "dp", "clip_quantile", CONFIG_TYPE_FLOAT, "0.5", .min = 0.01, .max = 0.99, .help = "adaptive: target quantile" },
    { "dp", "clip_lr", CONFIG_TYPE_FLOAT, "0.2", .min = 0, .max = 10, .help = "adaptive: geometric step of C" },
    { "dp", "clip_noise", CONFIG_TYPE_FLOAT, "0",  .min = 0, .max = 1e6,
      .help = "adaptive: std of the noise on the count of updates under C (0: expected clients / 20)" },
    { "dp", "sample_clip", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e12,
      .help = "sample-level DP-SGD in the clients' local steps: every example's gradient clipped to this L2 norm "
              "(0: off)" },
    { "dp", "sample_noise", CONFIG_TYPE_FLOAT, "1", .min = 0, .max = 1e6,
      .help = "DP-SGD: the noise multiplier of the local steps (noise std sample_noise x sample_clip on the sum)" },
    { "secagg", "enable", CONFIG_TYPE_BOOL, "false",
      .help = "secure aggregation: the server learns only the sum of the updates" },
    { "secagg", "threshold", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 20,
      .help = "t: survivors needed to unmask (0: two thirds of the clients sampled, at least 2)" },
    { "secagg", "frac_bits", CONFIG_TYPE_INT, "24", .min = 8, .max = 40,
      .help = "fixed point: fractional bits of the encoded updates" },
    { "optim", "name", CONFIG_TYPE_ENUM, "auto", .choices = "auto|adamw|sgd",
      .help = "the clients' optimizer (auto: AdamW for GPT-2 and BERT, SGD with momentum for ResNet)" },
    { "optim", "lr", CONFIG_TYPE_FLOAT, "0.05", .min = 0, .max = 1e3, .help = "the clients' learning rate" },
    { "optim", "weight_decay", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e3,
      .help = "AdamW: decoupled; SGD: coupled L2 (weights only)" },
    { "optim", "momentum", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 0.999999, .help = "SGD (reset every round)" },
    { "optim", "beta1", CONFIG_TYPE_FLOAT, "0.9", .min = 0, .max = 0.999999, .help = "AdamW" },
    { "optim", "beta2", CONFIG_TYPE_FLOAT, "0.999", .min = 0, .max = 0.999999999, .help = "AdamW" },
    { "optim", "eps", CONFIG_TYPE_FLOAT, "1e-8", .min = 1e-30, .max = 1, .help = "AdamW" },
    { "data", "train", CONFIG_TYPE_STRING, "",
      .help = "training data: an HDF5 image set or CIFAR-10 file, or token files (comma-separated: by_file "
              "deals whole files)" },
    { "data", "val", CONFIG_TYPE_STRING, "", .help = "held-out data the server evaluates (empty: none)" },
    { "data", "seq_len", CONFIG_TYPE_INT, "64", .min = 1, .max = 1 << 20, .help = "tokens: sequence length T" },
    { "data", "mean", CONFIG_TYPE_STRING, "0.5,0.5,0.5",
      .help = "images: per-channel mean of x/255 (the file's attribute wins)" },
    { "data", "std", CONFIG_TYPE_STRING, "0.5,0.5,0.5",
      .help = "images: per-channel std of x/255 (the file's attribute wins)" },
    { "ckpt", "every_rounds", CONFIG_TYPE_INT, "0", .min = 0, .max = 1e9,
      .help = "checkpoint the server every N rounds (0: off; with it, the last round is always saved)" },
    { "ckpt", "keep_last", CONFIG_TYPE_INT, "3", .min = 1, .max = 1e6, .help = "newest committed checkpoints kept" },
    { "ckpt", "resume", CONFIG_TYPE_STRING, "auto",
      .help = "auto (newest committed checkpoint of run_dir, if any), none, or a checkpoint directory" },
    { "audit", "shadows", CONFIG_TYPE_INT, "0", .min = 0, .max = 4096,
      .help = "nebula-fed audit: LiRA shadow runs, each on a random half of data.train + data.val (0: no LiRA)" },
    { "audit", "attribute_levels", CONFIG_TYPE_INT, "4", .min = 2, .max = 64,
      .help = "nebula-fed audit, attribute inference: equal-width bins of the hidden pixel's value the attacker "
              "guesses among" },
    { "audit", "inversion_steps", CONFIG_TYPE_INT, "100", .min = 0, .max = 1e6,
      .help = "nebula-fed audit, model inversion: gradient steps per class (0: no inversion)" },
    { "audit", "inversion_lr", CONFIG_TYPE_FLOAT, "0.1", .min = 1e-9, .max = 1e6,
      .help = "nebula-fed audit, model inversion: the step on the normalised image per unit of gradient" },
};

int fed_config_schema(config_key *out, int cap)
{
    const config_key base[] = { RUNTIME_CONFIG_KEYS, MODEL_CONFIG_KEYS,
                                { "comm", "timeout", CONFIG_TYPE_FLOAT, "300", .min = 0, .max = 1e6,
                                  .help = "seconds a client waits for the server beyond fed.round_timeout" } };
    int n = 0, nbase = (int)(sizeof base / sizeof base[0]), nfed = (int)(sizeof fed_keys / sizeof fed_keys[0]);
    CHECK(nbase + nfed <= cap, "the schema array holds every key");
    for (int i = 0; i < nbase; i++) out[n++] = base[i];
    for (int i = 0; i < nfed; i++) out[n++] = fed_keys[i];
    return n;
}
