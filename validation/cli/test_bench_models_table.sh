#!/usr/bin/env bash
# nebula-bench table models at the smallest scale: gpt2-tiny B=2 T=16, one run of one
# step per cell, Nebula beside Debian's PyTorch 1.13. The header names the ISA level, the
# fp32 GEMM path, the measured peak and the GEMM rate on the model's path (with the bf16 GEMM
# rate where the CPU has bf16 kernels); each row names its ISA, BLAS core and GEMM path; there is one
# row per precision whose throughputs are positive numbers and whose ratio is Nebula's
# over the better PyTorch setting; the bf16 row exists exactly when Nebula accepts bf16
# here; the first line is the table's provenance (docs/benchmarks.md#provenance); bad
# arguments exit 2 naming the argument.
. "$(dirname "$0")/lib.sh"
expect "table models: a bad model spec is named" 2 "bad model 'gpt2:4'" -- $BENCH table models --models gpt2:4
expect "table models: an unknown model is named" 2 "unknown model 'gpt3'" -- $BENCH table models --models gpt3:1:8
expect "table models: an unknown precision is named" 2 "unknown precision 'fp8'" -- $BENCH table models --precisions fp8
expect "table models: reps must be positive" 2 "--reps must be a positive integer" -- $BENCH table models --reps 0
expect "table models: an unknown path is named" 2 "unknown path 'sse9'" -- $BENCH table models --paths auto,sse9
$BENCH table models --models gpt2-tiny:2:16 --reps 1 --steps 1 >"$tmp/models.md" 2>"$tmp/models.err"
out=$(cat "$tmp/models.md" "$tmp/models.err")
$PY validation/cli/provenance_check.py --ranks 1 "$tmp/models.md" || fails=$((fails + 1))
bf16=0
$BENCH model --model gpt2-tiny --batch 1 --seq 8 --steps 1 --precision bf16 >/dev/null 2>&1 && bf16=1
if /usr/bin/python3 - "$out" "$bf16" <<'PYEOF'
import re, sys
out, bf16 = sys.argv[1], sys.argv[2] == "1"
lines = out.splitlines()
ok = any(l.startswith("# cpu: ISA level ") for l in lines)
gemm = [l for l in lines if l.startswith("# GEMM 2048^3 on the model's path in this process: fp32 ")]
ok &= len(gemm) == 1 and ("; bf16 (oneDNN" in gemm[0]) == bf16
ok &= sum(l.startswith("# fp32 GEMMs: ") for l in lines) == 1 and sum(l.startswith("# peak ") for l in lines) == 1
rows = {}
for l in lines:
    m = re.match(r"\| gpt2-tiny B=2 T=16, \d+ threads \| (\w+)(?:, (?:core|arch) [^,]+)?, (?:BLAS|oneDNN matmul), (fp32|bf16) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+)x \|", l)
    if m:
        neb, p0, p1, ratio = (float(m.group(i)) for i in range(3, 7))
        ok &= neb > 0 and p0 > 0 and p1 > 0 and abs(ratio - neb / max(p0, p1)) <= 0.01 * ratio + 0.006
        rows[m.group(2)] = l
ok &= set(rows) == ({"fp32", "bf16"} if bf16 else {"fp32"})
ok &= bf16 or "bf16 rows left out" in out
sys.exit(0 if ok else 1)
PYEOF
then echo "ok - table models: gpt2-tiny rows for $([ $bf16 = 1 ] && echo fp32 and bf16 || echo fp32, bf16 left out) with the ISA, BLAS core and GEMM path, and the peak and GEMM header"
else echo "FAIL - table models output:"; echo "$out" | tail -12; fails=$((fails + 1)); fi
finish
