#!/usr/bin/env bash
# test_report — nebula-report (docs/pictures.md) on a real run: gpt2-tiny at 2 ranks (2 virtual
# nodes, DGC-Pro on, an alert rule that fires every 10 steps) run to step 30, its newest
# checkpoint removed, and relaunched to step 40 (steps 21..30 are redone); a second run beside
# a nebula-chaos soak's files; bench table outputs in a third directory. Then:
#   - the page of the three parses under html5lib's strict parser; every figure is there with
#     its data elements (curves with enough points, heatmap cells, bars, markers); the
#     hottest row of the step-time heatmap is rank 1 and the coldest row of the gradient
#     heatmap is layer 2 (read from data-value); no scripts, nothing fetched;
#   - the default output is RUN_DIR/report.html, written atomically (no temporary left);
#     --only keeps one figure; 450 samples are binned to at most 200 columns;
#   - headless Chromium renders the page and the PNG is not blank;
#   - make demo's own page (tools/demo.sh into the test's directory): its run's figures have
#     data, Chromium renders it, and TensorBoard's reader finds metrics.jsonl's numbers in
#     its event files;
#   - a missing directory, a malformed line (named FILE:LINE) and an unknown figure exit 2;
#     a torn last line is left out with a warning.
# Every record the figures draw is the trainer's own: the test hooks plant what the checks look
# for (runtime.slowdown = 1:20, rank 1 sleeps 20 ms in its compute; runtime.zero_grad_layer = 2,
# layer 2's averaged gradient is zeroed), grad_hist every 2 steps, attention every 10, and the
# first launch traces steps 2-6 (--trace: DGC-Pro's phases); the soak directory's run is dense and
# traced (the buckets' phases).
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
REPORT=build/bin/nebula-report
CHECK="$PY validation/cli/report_check.py"
[ -x $REPORT ] || { echo "FAIL - $REPORT is missing (make)"; exit 1; }
licenses_data

# train DIR NP [ARG...]: gpt2-tiny on the licence texts, a record every step, an evaluation
# every 5 steps; output appended to DIR.log
train() {
    local dir=$1 np=$2
    shift 2
    $MPIRUN -np "$np" build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val="$data/val.bin" --set train.global_batch=8 \
        --set optim.warmup_steps=5 --set train.log_interval=1 --set train.eval_interval=5 \
        --set train.eval_batches=1 "$@" >>"$dir.log" 2>&1 </dev/null
}

run=$tmp/run soak=$tmp/soak bench=$tmp/bench
opts="--ranks-per-node 1 --set dgc.mode=on --set dgc.min_numel=1024 --set dgc.warmup_steps=4 \
    --set monitor.explosion=0.05 --set ckpt.every_steps=10 --set runtime.slowdown=1:20 \
    --set runtime.zero_grad_layer=2 --set monitor.histogram_interval=2 --set monitor.attention_interval=10"
train $run 2 --steps 30 $opts --trace --set trace.steps=2-6 || { echo "FAIL - the first launch:"; tail -5 $run.log; exit 1; }
rm -rf $run/ckpt/step_00000030
train $run 2 --steps 40 $opts || { echo "FAIL - the relaunch:"; tail -5 $run.log; exit 1; }
mkdir -p $soak $bench
train $soak/run 2 --steps 20 --ranks-per-node 1 --trace || { echo "FAIL - the soak directory's run:"; tail -5 $soak/run.log; exit 1; }
$CHECK soak $soak
$CHECK bench $bench

page=$tmp/report.html
expect "three run directories on one page" 0 "wrote $page" -- \
    $REPORT $run $soak $bench --out $page --title "nebula-report test"
check "the page: strict HTML, every figure with its data, the planted straggler and dead layer found" \
    $CHECK check $page run soak
expect "the default output is RUN_DIR/report.html" 0 "wrote $run/report.html" -- $REPORT $run
check "written by rename: no temporary file is left" test -z "$(find $run -maxdepth 1 -name 'report.html.tmp*')"
expect "--only one figure" 0 "wrote $tmp/only.html" -- $REPORT $run --only fig-gradients --out $tmp/only.html
check "--only: the page holds fig-gradients alone" $CHECK only $tmp/only.html fig-gradients
mkdir -p $tmp/many
$CHECK binning $tmp/many
expect "450 samples of 3 ranks" 0 "wrote" -- $REPORT $tmp/many --out $tmp/many.html
check "more than 200 columns are binned, and the page says so" $CHECK binned $tmp/many.html

# shot HTML PNG: headless Chromium's screenshot (the old headless mode where =new is refused)
shot() {
    local opt
    for opt in --headless=new --headless; do
        rm -f "$2"
        timeout 60 chromium "$opt" --no-sandbox --disable-gpu --user-data-dir="$tmp/chromium" --hide-scrollbars \
            --screenshot="$2" --window-size=1400,6000 "file://$1" >"$tmp/chromium.log" 2>&1
        [ -s "$2" ] && return 0
    done
    tail -3 "$tmp/chromium.log"
    return 1
}
command -v chromium >/dev/null || { echo "FAIL - chromium is missing (tools/deps.sh install)"; exit 1; }
check "headless Chromium renders the page" shot "$page" "$tmp/report.png"
check "the screenshot is not blank" $CHECK png $tmp/report.png

# make demo's page: tools/demo.sh into a directory of the test's (200 steps, then 100 resumed)
demo=$tmp/demo
check "make demo (tools/demo.sh, 200 + 100 steps) ends writing its report.html" bash -c \
    "RUN=$demo STEPS=200 tools/demo.sh >$tmp/demo.log 2>&1 && grep -q 'wrote $demo/report.html' $tmp/demo.log"
check "make demo's page: every figure of its run has data" $CHECK demo $demo/report.html
check "headless Chromium renders make demo's page" shot "$demo/report.html" "$tmp/demo.png"
check "... and its screenshot is not blank" $CHECK png $tmp/demo.png
check "TensorBoard's reader: make demo's two event files hold its metrics.jsonl's numbers" \
    build/venv/bin/python validation/cli/tensorboard_check.py $demo 2

expect "a missing run directory: exit 2 naming it" 2 "$tmp/no-such-run" -- $REPORT $tmp/no-such-run
mkdir -p $tmp/bad $tmp/torn
{ head -2 $run/metrics.jsonl; echo '{"kind": "train", "step": 3, "loss": NaN}'; } >$tmp/bad/metrics.jsonl
expect "a malformed line: exit 2 naming the file and line" 2 "$tmp/bad/metrics.jsonl:3: not JSON" -- $REPORT $tmp/bad
{ cat $run/metrics.jsonl; printf '{"kind":"train","step":41,"lo'; } >$tmp/torn/metrics.jsonl
expect "a torn last line is left out with a warning" 0 "a torn last line" -- $REPORT $tmp/torn
rm -rf $tmp/bad $tmp/torn  # not for finish's check of every metrics.jsonl
expect "an unknown figure: exit 2 naming the choices" 2 "expected one of fig-curves" -- $REPORT $run --only fig-nope
expect "--help" 0 "usage: nebula-report RUN_DIR" -- $REPORT --help
expect "--version" 0 "nebula-report 0.1.0" -- $REPORT --version
expect "no run directory: exit 2" 2 "no RUN_DIR given" -- $REPORT
finish
