#!/usr/bin/env bash
# test_samples — what the pictures are drawn from besides the train records
# (docs/pictures.md): GPT-2 tiny at 2 ranks with the test hooks runtime.slowdown = 1:40
# (rank 1 sleeps 40 ms in every step's compute) and runtime.zero_grad_layer = 1 (h.0's
# reduced gradient is zeroed), checked against what must follow from them:
#   - a "ranks" record at every log step with one entry per rank (hosts, step, compute and
#     wait times, CPU, RSS); compute_ms + comm_wait_ms = step_ms; rank 1's compute is at
#     least the 40 ms it slept and rank 0 waits for it (the straggler is the hot row);
#   - the dead layer: AdamW's moments of every h.0 tensor are exactly 0 in the final
#     checkpoint, while every other layer's are not;
#   - an "attention" record every monitor.attention_interval steps, (n_layer, n_head) each
#     way, with entropies within [0, mean_i log(i+1)] (a causal row i has i+1 keys) and
#     mean largest weights within [exp(-entropy), 1] (H >= -log max p, then Jensen);
#   - grad_hist records (monitor.histogram_interval) show the dead layer as all zeros
#     (the gradient heatmap's cold row) and no other;
#   - bad hook values exit 2 naming the key.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_MCA_rmaps_base_oversubscribe=1
licenses_data
run=$tmp/run
licenses_run "$run" 2 --set train.steps=30 --set train.log_interval=5 --set monitor.attention_interval=10 \
    --set monitor.histogram_interval=10 --set runtime.slowdown=1:40 --set runtime.zero_grad_layer=1 --set ckpt.every_steps=30
check "the run with both test hooks ends" grep -q '^summary:' "$run.log"
ck=$(ls -d "$run"/ckpt/step_* 2>/dev/null | tail -1)
check "ranks records, the straggler, the dead layer and the attention records" $PY - "$run/metrics.jsonl" "$ck/state.h5" <<'PY'
import json, math, sys
import h5py, numpy as np
recs = [json.loads(l) for l in open(sys.argv[1])]
ranks = [j for j in recs if j["kind"] == "ranks"]
assert [j["step"] for j in ranks] == [5, 10, 15, 20, 25, 30], [j["step"] for j in ranks]
for j in ranks:
    for k in ("host", "step_ms", "compute_ms", "comm_wait_ms", "cpu_pct", "rss_mb"):
        assert len(j[k]) == 2, (k, j[k])
    for r in range(2):
        assert abs(j["compute_ms"][r] + j["comm_wait_ms"][r] - j["step_ms"][r]) < 1e-6 * j["step_ms"][r], j
        assert j["cpu_pct"][r] > 0 and j["rss_mb"][r] > 10, j
    assert j["compute_ms"][1] >= 40 and j["comm_wait_ms"][0] > j["comm_wait_ms"][1], j
print(f"    {len(ranks)} ranks records; rank 1 compute {ranks[-1]['compute_ms'][1]:.1f} ms, "
      f"rank 0 waits {ranks[-1]['comm_wait_ms'][0]:.1f} ms")
f = h5py.File(sys.argv[2], "r")
dead = [n for n in f["optim/m"] if n.startswith("h.0.")]
live = [n for n in f["optim/m"] if not n.startswith("h.0.")]
assert dead and live
for n in dead:
    assert not np.any(f["optim/m"][n][()]) and not np.any(f["optim/v"][n][()]), n
for n in live:
    assert np.any(f["optim/v"][n][()]), n
print(f"    h.0: {len(dead)} tensors with zero moments; {len(live)} others moved")
att = [j for j in recs if j["kind"] == "attention"]
assert [j["step"] for j in att] == [10, 20, 30], [j["step"] for j in att]
T = 64
bound = sum(math.log(i + 1) for i in range(T)) / T
for j in att:
    assert j["layers"] == 2 and j["heads"] == 4, j
    for l in range(2):
        assert len(j["entropy"][l]) == 4 and len(j["max_weight"][l]) == 4
        for h in range(4):
            e, m = j["entropy"][l][h], j["max_weight"][l][h]
            assert 0 <= e <= bound + 1e-9, (l, h, e, bound)
            assert math.exp(-e) - 1e-9 <= m <= 1, (l, h, e, m)
print(f"    {len(att)} attention records; entropies within [0, {bound:.4f}]")
gh = [j for j in recs if j["kind"] == "grad_hist"]
assert [j["step"] for j in gh] == [10, 20, 30], [j["step"] for j in gh]
for j in gh:
    by = {l["layer"]: l for l in j["layers"]}
    assert by[1]["zero"] == by[1]["count"] > 0 and by[1]["median_log10"] is None, by[1]
    assert all(l["zero"] < l["count"] for k, l in by.items() if k != 1), j
print(f"    {len(gh)} grad_hist records: layer 1 (h.0) all zero, every other layer not")
PY
expect "runtime.slowdown names a rank past the world" 2 "runtime.slowdown" -- \
    $MPIRUN -np 2 build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/bad1" \
    --set data.train="$data/train.bin" --set data.val= --set runtime.slowdown=2:10 --set train.steps=2
expect "runtime.zero_grad_layer past the model's layers" 2 "runtime.zero_grad_layer" -- \
    $MPIRUN -np 2 build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/bad2" \
    --set data.train="$data/train.bin" --set data.val= --set runtime.zero_grad_layer=9 --set train.steps=2
finish
