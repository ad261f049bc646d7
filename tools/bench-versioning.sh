#!/usr/bin/env bash
# bench-versioning.sh — what nebula-model's store keeps, and how long it takes, beside the
# raw checkpoints, whole-file storage as DVC and git-lfs keep it, and cp (`nebula-bench
# table versioning` runs this). Three histories of one GPT-2 (the licence texts, AdamW):
#   1. --checkpoints N checkpoints of one run, committed in order;
#   2. a fine-tune with a frozen backbone: the last checkpoint trained on with every tensor
#      but the last block and the final layer norm frozen (optim.freeze), committed on a
#      branch — stored against the bytes of the datasets that changed;
#   3. copies of the last checkpoint rewritten for other grids (nebula-ckpt reshard: 2
#      ranks; 2 x 2 tensor parallel) — stored against the checkpoint's size.
# Whole-file storage (computed): DVC's cache and git-lfs keep each distinct file once,
# whole and uncompressed, so their bytes are the sum of the distinct files' sizes; the
# same checkpoints are committed again into a second repository with --delta; the
# "whole files, zstd -3" column is what a store compressing whole files would keep. Times:
# the median over the commits (and --reps checkouts) beside cp -r of the same checkpoint
# directory, and cp -r followed by sync of the copy (nebula-model fsyncs every object).
# The first line is the table's provenance.
#
# Usage: tools/bench-versioning.sh [--checkpoints N] [--width C] [--layers L] [--reps R] [--csv]
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "nebula-bench table versioning: $*" >&2; exit 2; }
cmdline=$(printf '%q ' "$0" "$@")
nck=10 width=256 layers=4 reps=5 csv=0
while [ $# -gt 0 ]; do
    case $1 in
    --checkpoints) [ $# -ge 2 ] || die "--checkpoints needs a value"; nck=$2; shift 2 ;;
    --width) [ $# -ge 2 ] || die "--width needs a value"; width=$2; shift 2 ;;
    --layers) [ $# -ge 2 ] || die "--layers needs a value"; layers=$2; shift 2 ;;
    --reps) [ $# -ge 2 ] || die "--reps needs a value"; reps=$2; shift 2 ;;
    --csv) csv=1; shift ;;
    -h | --help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; expected --checkpoints, --width, --layers, --reps or --csv" ;;
    esac
done
for v in nck width layers reps; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--$v must be a positive count, not '${!v}'"; done
[ "$nck" -ge 2 ] || die "--checkpoints must be 2 or more"
[ $((width % 4)) -eq 0 ] || die "--width must be a multiple of 4 (4 heads)"
M=build/bin/nebula-model TRAIN=build/bin/nebula-train CK=build/bin/nebula-ckpt PY=/usr/bin/python3
for b in $M $TRAIN $CK; do [ -x $b ] || die "$b is missing (make)"; done
command -v xxh128sum >/dev/null && command -v zstd >/dev/null || die "xxh128sum and zstd are needed (make deps-test)"
export OMP_NUM_THREADS=2 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
$TRAIN prepare "$tmp/data" /usr/share/common-licenses/* >/dev/null
every=20
train() {  # train RUN_DIR STEPS [--set ...]
    local dir=$1 steps=$2
    shift 2
    $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" --set data.train="$tmp/data/train.bin" \
        --set data.val= --set model.n_layer="$layers" --set model.n_embd="$width" --set model.n_head=4 \
        --set train.global_batch=8 --set train.log_interval=1000 --set optim.schedule=constant \
        --set optim.warmup_steps=0 --steps "$steps" --ckpt-every $every --set ckpt.keep_last=$((nck + 2)) "$@" \
        >"$dir.log" 2>&1 </dev/null || { echo "nebula-bench table versioning: nebula-train failed:" >&2; tail -5 "$dir.log" >&2; exit 1; }
}
fmt=markdown; [ $csv = 1 ] && fmt=csv
build/bin/nebula-bench provenance --format $fmt --command "${cmdline% }" --param checkpoints="$nck" \
    --param width="$width" --param layers="$layers" --param reps="$reps" </dev/null 2>"$tmp/provenance.log" |
    grep -E '^(# |<!-- )provenance: ' ||
    { echo "nebula-bench table versioning: nebula-bench provenance failed:" >&2; tail -5 "$tmp/provenance.log" >&2; exit 1; }

now() { date +%s.%N; }
store_bytes() { find "$1/.nebula-model/objects" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
R=$tmp/repo RD=$tmp/repo-delta
$M init $R >/dev/null
$M init $RD >/dev/null
train $tmp/run $((nck * every))
ck=$(ls -d $tmp/run/ckpt/step_* | sort)
: >"$tmp/times"
for d in $ck; do
    t0=$(now); $M --repo $R commit -m "$(basename $d)" $d >/dev/null; t1=$(now)
    rm -rf $tmp/cp; cp -r $d $tmp/cp; t2=$(now); sync $tmp/cp/state.h5; t3=$(now)
    echo "commit $t0 $t1 $t2 $t3" >>"$tmp/times"
    t0=$(now); $M --repo $RD commit -m "$(basename $d)" --delta $d >/dev/null; t1=$(now)
    echo "commit_delta $t0 $t1 $t1 $t1" >>"$tmp/times"
done
t0=$(now); $M --repo $R commit -m again "$(echo "$ck" | tail -1)" >/dev/null; t1=$(now)  # nothing new: deduplicated
echo "recommit $t0 $t1 $t1 $t1" >>"$tmp/times"
raw=$(for d in $ck; do stat -c %s $d/state.h5; done | awk '{s += $1} END {print s}')
whole=$(for d in $ck; do echo "$(xxh128sum <$d/state.h5 | cut -c1-32) $(stat -c %s $d/state.h5)"; done | sort -u |
        awk '{s += $2} END {print s}')
zwhole=$(for d in $ck; do zstd -3 -q -c $d/state.h5 | wc -c; done | awk '{s += $1} END {print s}')
run_store=$(store_bytes $R)
delta_store=$(store_bytes $RD)
last=$(echo "$ck" | tail -1)
size_last=$(stat -c %s $last/state.h5)
for i in $(seq 1 "$reps"); do
    t0=$(now); $M --repo $R checkout "main~$((i % nck))" --force >/dev/null; t1=$(now)
    rm -rf $tmp/cp; cp -r $last $tmp/cp; t2=$(now); sync $tmp/cp/state.h5; t3=$(now)
    echo "checkout $t0 $t1 $t2 $t3" >>"$tmp/times"
done
$M --repo $R checkout main --force >/dev/null

# the fine-tune: everything frozen but the last block and ln_f
steps=$((nck * every))
frozen="wte.weight,wpe.weight"
for ((l = 0; l < layers - 1; l++)); do frozen="$frozen,h.$l.*"; done
mkdir -p $tmp/ft/ckpt && cp -r $last $tmp/ft/ckpt/
train $tmp/ft $((steps + every)) --set optim.freeze="$frozen"
ft=$(ls -d $tmp/ft/ckpt/step_* | sort | tail -1)
changed=$($PY - $last/state.h5 $ft/state.h5 <<'PY'
import h5py, numpy as np, sys
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
print(sum(b[n].nbytes for n in names if n in b and (a[n].shape != b[n].shape or not np.array_equal(a[n][()], b[n][()]))))
PY
)
$M --repo $R branch finetune >/dev/null
before=$(store_bytes $R)
$M --repo $R commit -m finetune --branch finetune $ft >/dev/null
ft_store=$(( $(store_bytes $R) - before ))

# other grids
grid_rows=""
for g in "2 1" "2 2"; do
    set -- $g
    out=$tmp/grid-$1-$2
    if ! $CK reshard $last --dp "$1" --tp "$2" --out $out >$out.log 2>&1; then
        echo "nebula-bench table versioning: nebula-ckpt reshard --dp $1 --tp $2 failed:" >&2; tail -3 $out.log >&2; exit 1
    fi
    before=$(store_bytes $R)
    $M --repo $R commit -m "grid dp$1 tp$2" --branch "grid-$1-$2" $out/step_* >/dev/null 2>&1 ||
        { $M --repo $R branch "grid-$1-$2" >/dev/null; $M --repo $R commit -m "grid" --branch "grid-$1-$2" $out/step_* >/dev/null; }
    grid_rows="$grid_rows $1 $2 $(( $(store_bytes $R) - before )) $(stat -c %s $out/step_*/state.h5)"
done

$PY - "$csv" "$tmp/times" "$nck" "$raw" "$whole" "$zwhole" "$run_store" "$size_last" "$changed" "$ft_store" \
    "$layers" "$width" "$delta_store" $grid_rows <<'PY'
import statistics, sys
csv = sys.argv[1] == "1"
times = [l.split() for l in open(sys.argv[2])]
nck, raw, whole, zwhole, store, size_last, changed, ft_store, layers, width, dstore = (int(x) for x in sys.argv[3:14])
grid = [int(x) for x in sys.argv[14:]]
mb = lambda b: f"{b / 1e6:.2f}"
def row(cells):
    print(",".join(str(c).replace(",", ";") for c in cells) if csv else "| " + " | ".join(str(c) for c in cells) + " |")
if not csv:
    print(f"| history (GPT-2, {layers} layers, width {width}, AdamW) | raw checkpoints MB | whole-file store (DVC, git-lfs) MB "
          "| whole files, zstd -3 MB | nebula-model store MB | nebula-model / whole-file |")
    print("|---|---:|---:|---:|---:|---:|")
else:
    print("history,raw_mb,whole_file_mb,whole_zstd_mb,nebula_mb,ratio")
row([f"{nck} checkpoints of one run, every 20 steps", mb(raw), mb(whole), mb(zwhole), mb(store), f"{store / whole:.3f}"])
row([f"the same, commit --delta", mb(raw), mb(whole), mb(zwhole), mb(dstore), f"{dstore / whole:.3f}"])
row([f"fine-tune, backbone frozen: changed datasets {mb(changed)} MB", mb(size_last), mb(size_last),
     "-", mb(ft_store), f"{ft_store / changed:.3f} of the changed bytes"])
for i in range(0, len(grid), 4):
    dp, tp, added, size = grid[i:i + 4]
    row([f"the last checkpoint rewritten for dp {dp} x tp {tp}", mb(size), mb(size), "-", mb(added),
         f"{100 * added / size:.2f}% of a checkpoint"])
print()
if not csv:
    print("| operation (median) | nebula-model s | cp -r s | cp -r + sync s | nebula-model / cp -r + sync |")
    print("|---|---:|---:|---:|---:|")
else:
    print("operation,nebula_s,cp_s,cp_sync_s,ratio")
names = {"commit": "commit", "commit_delta": "commit --delta", "checkout": "checkout",
         "recommit": "commit of a checkpoint already stored"}
cp = {}
for op in ("commit", "commit_delta", "checkout", "recommit"):
    t = [[float(x) for x in r[1:]] for r in times if r[0] == op]
    n = statistics.median(r[1] - r[0] for r in t)
    if op in ("commit", "checkout"):  # cp -r (and sync) of the same directory, timed right after
        cp[op] = (statistics.median(r[2] - r[1] for r in t), statistics.median(r[3] - r[1] for r in t))
    c, cs = cp.get(op, cp["commit"])
    row([f"{names[op]} ({mb(size_last)} MB; {len(t)} run{'s' if len(t) > 1 else ''})", f"{n:.3f}", f"{c:.3f}",
         f"{cs:.3f}", f"{n / cs:.2f}x"])
PY
