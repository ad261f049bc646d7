#!/usr/bin/env bash
# The fp32 GEMM path (kernels/cpu/gemm.h) as a user sees it. With OPENBLAS_CORETYPE=Prescott
# (the BLAS on SSE3 kernels, as Debian's OpenBLAS runs on CPUs newer than it) the GEMMs
# leave the BLAS for oneDNN on any CPU with AVX2 or wider, and the header says so and why;
# the --json median names the BLAS core and the path. NEBULA_GEMM forces each path: the
# same model's losses agree within fp32 rounding. --save-tune writes a table of the
# model's shapes that device.gemm_tune reads (the start-up line says so; two runs with it
# give the same losses bit for bit); tables from elsewhere, damaged ones, devices and
# the command's own input as --save-tune are refused with exit 2. The peak line carries
# positive figures with a power-of-two FLOP per cycle. No timing is asserted.
. "$(dirname "$0")/lib.sh"
TRAIN=build/bin/nebula-train
small=(--model gpt2-tiny --batch 2 --seq 16 --steps 2 --threads 2)
isa=$($BENCH model "${small[@]}" --steps 1 2>&1 | sed -n 's/^# cpu: ISA level \([a-z0-9_]*\).*/\1/p')

# the fallback: taken and said
out=$(OPENBLAS_CORETYPE=Prescott $BENCH model "${small[@]}" --json 2>&1)
if [ "$isa" = base ]; then
    want='"gemm_path": "blas"' said='core Prescott = base kernels, this CPU'"'"'s base'
else
    want='"gemm_path": "onednn"' said="oneDNN matmul (the BLAS runs core Prescott = base kernels, below this CPU's"
fi
check "OpenBLAS on Prescott kernels at isa level $isa: the header says the path and why" grep -qF "$said" <<<"$out"
check "the --json median names the core and the path" \
    $PY -c 'import json,sys; m=[json.loads(l) for l in sys.stdin if l.startswith("{") and "\"median\"" in l][0]
sys.exit(0 if m["blas_core"]=="Prescott" and m["gemm_path"]==sys.argv[1] and m["pct_peak"]>0 else 1)' \
    "$(sed 's/.*: "\(.*\)"/\1/' <<<"$want")" <<<"$out"
out=$($BENCH model "${small[@]}" 2>&1)
check "the peak line: threads x measured clock x a power-of-two FLOP per cycle" \
    $PY -c 'import re,sys
m=re.search(r"^# peak \(measured: (\d+) threads x ([0-9.]+) GHz x FLOP/cycle\): fp32 (\d+)/cycle = ([0-9.]+) GFLOP/s", sys.stdin.read(), re.M)
n,g,f,p=int(m[1]),float(m[2]),int(m[3]),float(m[4])
sys.exit(0 if n>0 and g>0 and f>=1 and f&(f-1)==0 and abs(p-n*g*f)<=0.01*p+0.1 else 1)' <<<"$out"

# both paths compute the same model
losses() { sed -n 's/^ *[0-9]\+ .* \([0-9.]\+\)$/\1/p'; }
a=$(NEBULA_GEMM=blas $BENCH model "${small[@]}" --steps 3 2>&1 | losses | tr '\n' ' ')
b=$(NEBULA_GEMM=onednn $BENCH model "${small[@]}" --steps 3 2>&1 | losses | tr '\n' ' ')
check "NEBULA_GEMM=blas and onednn: 3 losses each, within 1e-4 relative ($a/ $b)" \
    $PY -c 'import sys; a,b=([float(x) for x in s.split()] for s in sys.argv[1:3])
sys.exit(0 if len(a)==3==len(b) and all(abs(x-y)<=1e-4*abs(x) for x,y in zip(a,b)) else 1)' "$a" "$b"
expect "a misspelt NEBULA_GEMM is refused" 2 "NEBULA_GEMM=fast is not a GEMM path; use auto, blas or onednn" -- \
    env NEBULA_GEMM=fast $BENCH model "${small[@]}"

# the table
out=$($BENCH model "${small[@]}" --save-tune "$tmp/gemm.json" 2>&1)
check "--save-tune: a table of the model's shapes, each with its path" \
    $PY -c 'import json,sys; t=json.load(open(sys.argv[1]))
e=t["entries"]
sys.exit(0 if t["format"]=="nebula-gemm-tune" and len(e)>=6 and all(x["path"] in ("blas","onednn") and x["M"]>0 for x in e)
         and not any(x["M"]==x["N"]==x["K"]==2048 for x in e) and "provenance" in t else 1)' "$tmp/gemm.json"
expect "device.gemm_tune: the start-up line says the table is in use" 0 "shape(s) from a tuning table" -- \
    $BENCH model "${small[@]}" --set device.gemm_tune="$tmp/gemm.json"
trainer() {
    $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/$1" --steps 3 --set data.train=synthetic \
        --set data.val= --set optim.warmup_steps=0 --set train.log_interval=1 --set train.eval_interval=0 --set device.gemm_tune="$tmp/gemm.json" \
        >"$tmp/$1.log" 2>&1
}
trainer t1 && trainer t2
check "nebula-train with the table: its device line says so, two runs give the same losses bit for bit" \
    bash -c 'grep -q "shape(s) from a tuning table" "$1" && [ -n "$(grep "loss" "$1")" ] &&
             diff <(grep -o "loss=[^ ]*" "$1") <(grep -o "loss=[^ ]*" "$2")' _ "$tmp/t1.log" "$tmp/t2.log"
$PY -c 'import json,sys; t=json.load(open(sys.argv[1])); t["isa"]="base" if t["isa"]!="base" else "avx2"
json.dump(t,open(sys.argv[2],"w"))' "$tmp/gemm.json" "$tmp/other.json"
expect "a table made at another ISA level is refused, naming both" 2 "was made with isa" -- \
    $BENCH model "${small[@]}" --set device.gemm_tune="$tmp/other.json"
$PY -c 'import json,sys; t=json.load(open(sys.argv[1])); t["entries"][0]["path"]="gpu"
json.dump(t,open(sys.argv[2],"w"))' "$tmp/gemm.json" "$tmp/bad.json"
expect "an entry with an unknown path is refused, naming the entry" 2 "entry 0: expected" -- \
    $BENCH model "${small[@]}" --set device.gemm_tune="$tmp/bad.json"
expect "nebula-train refuses it too" 2 "entry 0: expected" -- \
    $TRAIN --model gpt2-tiny --steps 1 --set data.train=synthetic --run-dir "$tmp/t3" --set device.gemm_tune="$tmp/bad.json"
expect "a device as the table is refused, not read" 2 "is a character device, not a regular file" -- \
    $BENCH model "${small[@]}" --set device.gemm_tune=/dev/zero
expect "--save-tune onto a device is refused" 2 "--save-tune /dev/null: it is a character device" -- \
    $BENCH model "${small[@]}" --save-tune /dev/null
expect "--save-tune onto the table it reads is refused" 2 "it is the input" -- \
    $BENCH model "${small[@]}" --set device.gemm_tune="$tmp/gemm.json" --save-tune "$tmp/gemm.json"
expect "--save-tune with --dry-run is refused, not ignored" 2 "not with --dry-run" -- \
    $BENCH model "${small[@]}" --dry-run --save-tune "$tmp/dry.json"
finish
