#!/usr/bin/env bash
# test_trace — the communication timeline (nebula-train --trace, docs/profile.md
# "Communication timeline"). GPT-2 tiny at 4 ranks as 2 virtual nodes x 2, the
# hierarchical allreduce, 32 KiB buckets (12 of them), asynchronous checkpoints every 2
# steps, trace.steps = 3 (steps 2-4 of 6):
#   - trace_check.py passes on RUN_DIR/trace.json (and its own --self-test);
#   - every bucket of every traced step is on every rank once, as an allreduce event with
#     its three phases (intra_reduce_scatter, inter_allreduce, intra_allgather) inside it
#     on its track; every rank has one step event per traced step, named processes;
#   - the trace agrees with metrics.jsonl (rank 0's train records) within 5% (or 0.05 ms,
#     for waits of a few microseconds): the step event's dur against step_ms, the
#     comm_wait event's dur against comm_wait_ms, and compute = step - comm_wait on both
#     sides; the main track's phases and layers tile the step event;
#   - otherData holds a clock comparison per rank at the start and the end: rank 0's
#     offset 0, every rank's round trip > 0 and, the ranks sharing one clock here, every
#     |offset| at most half its round trip (what the ping-pong estimate guarantees);
#   - the checkpoint's stall on the main track, its background copy and write on rank 0's
#     writer track;
# then a flat algorithm (ring, 2 ranks, trace.steps = 2-3: one "flat" phase per bucket),
# a ring of 64 events (the oldest dropped and counted, the file still valid), and a bad
# trace.steps (exit 2 naming the key).
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_MCA_rmaps_base_oversubscribe=1
TRAIN=build/bin/nebula-train
CHECK=validation/cli/trace_check.py
common=(--model gpt2-tiny --micro-batch 4 --seq-len 64 --steps 6 --set train.log_interval=1 --set dgc.mode=off
        --set profile.mode=off --set train.bucket_bytes=32K)

check "trace_check.py --self-test: every broken trace rejected, the good ones accepted" \
    bash -c "$PY $CHECK --self-test >$tmp/self.out || { grep FAIL $tmp/self.out | sed 's/^/    /'; false; }"

run=$tmp/hier
expect "--trace, 4 ranks as 2 x 2, hier, async checkpoints: trace.json written" 0 "trace: $run/trace.json:" -- \
    $MPIRUN -np 4 $TRAIN "${common[@]}" --ranks-per-node 2 --set comm.algo=hier --run-dir $run --trace \
    --set trace.steps=3 --async-ckpt --ckpt-every 2
check "trace_check.py: the trace-event format, nesting on every track" $PY $CHECK $run/trace.json

check "every bucket of steps 2-4 on every rank, with its three phases inside it; a step event each" $PY - $run <<'PY'
import json, sys
run = sys.argv[1]
j = json.load(open(f"{run}/trace.json"))
o, ev = j["otherData"], [e for e in j["traceEvents"] if e["ph"] == "X"]
nb, (s0, s1) = o["buckets"], o["steps"]
assert nb >= 3 and (s0, s1) == (2, 4) and o["world"] == 4 and o["nodes"] == 2, (nb, s0, s1, o["world"])
names = {e["pid"]: e["args"]["name"] for e in j["traceEvents"] if e["name"] == "process_name"}
assert all(names.get(r, "").startswith(f"rank {r} (") for r in range(4)), names
want = ["intra_reduce_scatter", "inter_allreduce", "intra_allgather"]
for r in range(4):
    for s in range(s0, s1 + 1):
        steps = [e for e in ev if e["pid"] == r and e["cat"] == "step" and e["args"]["step"] == s]
        assert len(steps) == 1, (r, s, len(steps))
        for b in range(nb):
            mine = [e for e in ev if e["pid"] == r and e["cat"] == "comm" and e["args"].get("step") == s
                    and e["args"].get("bucket") == b]
            whole = [e for e in mine if e["args"]["phase"] == "allreduce"]
            assert len(whole) == 1, (r, s, b, len(whole))
            w = whole[0]
            phases = [e["args"]["phase"] for e in mine if e is not w]
            assert sorted(set(phases)) == sorted(want), (r, s, b, phases)
            for p in mine:
                assert p["tid"] == w["tid"] and w["ts"] <= p["ts"] and p["ts"] + p["dur"] <= w["ts"] + w["dur"] + 1e-6, (r, s, b, p, w)
            assert w["name"] == f"bucket {b}" and w["tid"] >= 2, w
print(f"    {nb} buckets x 3 steps x 4 ranks, each with its 3 phases")
PY

check "step, comm_wait and compute of rank 0 agree with metrics.jsonl within 5%; the laps tile the step" $PY - $run <<'PY'
import json, sys
run = sys.argv[1]
j = json.load(open(f"{run}/trace.json"))
ev = [e for e in j["traceEvents"] if e["ph"] == "X" and e["pid"] == 0 and e["tid"] == 0]
rec = {r["step"]: r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if r["kind"] == "train"}
s0, s1 = j["otherData"]["steps"]
def near(a, b):
    return abs(a - b) <= max(0.05 * abs(b), 0.05)
for s in range(s0, s1 + 1):
    mine = [e for e in ev if e["args"].get("step") == s]
    step = [e for e in mine if e["cat"] == "step"][0]["dur"] / 1e3
    wait = sum(e["dur"] for e in mine if e["name"] == "comm_wait") / 1e3
    tiles = sum(e["dur"] for e in mine if e["cat"] not in ("step", "ckpt", "dgc")) / 1e3
    m = rec[s]
    print(f"    step {s}: step {step:.3f} / {m['step_ms']:.3f} ms, comm_wait {wait:.3f} / {m['comm_wait_ms']:.3f} ms, "
          f"compute {step - wait:.3f} / {m['step_ms'] - m['comm_wait_ms']:.3f} ms (trace / metrics.jsonl)")
    assert near(step, m["step_ms"]), ("step", s, step, m["step_ms"])
    assert near(wait, m["comm_wait_ms"]), ("comm_wait", s, wait, m["comm_wait_ms"])
    assert near(step - wait, m["step_ms"] - m["comm_wait_ms"]), ("compute", s)
    assert abs(tiles - step) <= 0.001, ("the laps do not tile the step", s, tiles, step)
PY

check "otherData: the clock comparisons of every rank at the start and the end" $PY - $run <<'PY'
import json, sys
o = json.load(open(f"{sys.argv[1]}/trace.json"))["otherData"]
cs = o["clock_sync"]
assert [c["rank"] for c in cs] == [0, 1, 2, 3], cs
for c in cs:
    for at in ("start", "end"):
        x = c[at]
        if c["rank"] == 0:
            assert x["offset_us"] == 0 and x["rtt_us"] == 0, c
        else:  # one host, one CLOCK_MONOTONIC: the estimate is off by at most half the round trip
            assert x["rtt_us"] > 0 and abs(x["offset_us"]) <= x["rtt_us"] / 2 + 1e-3, c
    assert cs[0]["start"]["rank0_clock_s"] <= c["end"]["rank0_clock_s"], c
print("    " + ", ".join(f"rank {c['rank']}: {c['start']['offset_us']:+.2f} us (rtt {c['start']['rtt_us']:.1f})"
                          for c in cs[1:]))
PY

check "the checkpoint: its stall on the main track, rank 0's background copy and write on the writer's" $PY - $run <<'PY'
import json, sys
j = json.load(open(f"{sys.argv[1]}/trace.json"))
ev = [e for e in j["traceEvents"] if e["ph"] == "X" and e["cat"] == "ckpt"]
stall = {(e["pid"], e["args"]["step"]) for e in ev if e["name"] == "checkpoint stall" and e["tid"] == 0}
assert {(r, s) for r in range(4) for s in (2, 4)} <= stall, stall
bg = [e for e in ev if e["name"] in ("checkpoint copy", "checkpoint write")]
assert bg and all(e["pid"] == 0 and e["tid"] == 1 for e in bg), bg
assert {"checkpoint copy", "checkpoint write"} == {e["name"] for e in bg}, bg
writer = [e for e in j["traceEvents"] if e["name"] == "thread_name" and e["pid"] == 0 and e["tid"] == 1]
assert writer and writer[0]["args"]["name"] == "checkpoint writer", writer
PY

run=$tmp/ring
expect "--trace with the ring at 2 ranks, trace.steps = 2-3" 0 "trace: $run/trace.json:" -- \
    $MPIRUN -np 2 $TRAIN "${common[@]}" --set comm.algo=ring --run-dir $run --trace --set trace.steps=2-3
check "ring: valid, each bucket of steps 2 and 3 has one flat phase" bash -c "$PY $CHECK $run/trace.json >/dev/null && $PY - $run" <<'PY'
import json, sys
j = json.load(open(f"{sys.argv[1]}/trace.json"))
o, ev = j["otherData"], [e for e in j["traceEvents"] if e["ph"] == "X" and e["cat"] == "comm"]
assert o["steps"] == [2, 3], o["steps"]
for r in range(2):
    for s in (2, 3):
        for b in range(o["buckets"]):
            ph = sorted(e["args"]["phase"] for e in ev if e["pid"] == r and e["args"].get("step") == s
                        and e["args"].get("bucket") == b)
            assert ph == ["allreduce", "flat"], (r, s, b, ph)
PY

run=$tmp/small
expect "--trace with trace.max_events = 64: the oldest are dropped, with a warning" 0 "events were dropped" -- \
    $MPIRUN -np 2 $TRAIN "${common[@]}" --run-dir $run --trace --set trace.max_events=64
check "a full ring: the file valid, 64 events a rank, the drops counted in otherData" bash -c "$PY $CHECK $run/trace.json >/dev/null && $PY -c \"
import json; o = json.load(open('$run/trace.json'))['otherData']
assert o['events'] == [64, 64] and min(o['dropped']) > 0, (o['events'], o['dropped'])\""

expect "a bad trace.steps exits 2 naming the key" 2 "trace.steps = '3-1'" -- \
    $TRAIN --model gpt2-tiny --micro-batch 2 --steps 1 --run-dir $tmp/bad --trace --set trace.steps=3-1
expect "a trace.max_events below the minimum exits 2" 2 "trace.max_events" -- \
    $TRAIN --model gpt2-tiny --micro-batch 2 --steps 1 --run-dir $tmp/bad --trace --set trace.max_events=10
finish
