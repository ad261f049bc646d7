#!/usr/bin/env bash
# bench-privacy.sh — the privacy audit table (`nebula-bench table privacy` runs this): the
# same federated task trained without protection and with DP-FedAvg at each target epsilon
# (dp.target_epsilon, the noise multiplier derived for the rounds), then the released
# global model attacked by nebula-fed audit: membership inference with the loss as the
# score (ROC AUC, TPR at 1% FPR; Yeom's threshold attack's advantage), members = the
# clients' samples, non-members = the held-out ones; Yeom's attribute inference (member
# less non-member accuracy); model inversion (classes identified, NCC); LiRA with --shadows
# shadow runs (AUC, TPR at 1% FPR; 0 leaves it out). Task: sklearn's digits at
# 8x8 (the first --members training images), --clients non-IID clients (Dirichlet 0.5),
# Poisson sampling at --q, --rounds rounds of 5 local SGD steps, the MLP with
# --hidden units (configs/fed/digits-mlp-dp.ini). Medians over --seeds seeds
# (fed.seed 1..N: partition, sampling, initialisation, noise). One process per run, one
# thread. The first line is the table's provenance.
#
# Usage: tools/bench-privacy.sh [--epsilons inf,8,4,1] [--members N] [--clients K]
#                               [--q Q] [--rounds R] [--hidden H] [--seeds S] [--shadows K] [--csv]
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "nebula-bench table privacy: $*" >&2; exit 2; }
cmdline=$(printf '%q ' "$0" "$@")
epsilons=inf,8,4,1 members=1500 clients=100 q=0.3 rounds=40 hidden=64 seeds=3 shadows=8 csv=0
while [ $# -gt 0 ]; do
    case $1 in
    --epsilons) [ $# -ge 2 ] || die "--epsilons needs a value"; epsilons=$2; shift 2 ;;
    --members) [ $# -ge 2 ] || die "--members needs a value"; members=$2; shift 2 ;;
    --clients) [ $# -ge 2 ] || die "--clients needs a value"; clients=$2; shift 2 ;;
    --q) [ $# -ge 2 ] || die "--q needs a value"; q=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; rounds=$2; shift 2 ;;
    --hidden) [ $# -ge 2 ] || die "--hidden needs a value"; hidden=$2; shift 2 ;;
    --seeds) [ $# -ge 2 ] || die "--seeds needs a value"; seeds=$2; shift 2 ;;
    --shadows) [ $# -ge 2 ] || die "--shadows needs a value"; shadows=$2; shift 2 ;;
    --csv) csv=1; shift ;;
    -h | --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; expected --epsilons, --members, --clients, --q, --rounds, --hidden, --seeds, --shadows or --csv" ;;
    esac
done
[[ $members =~ ^[0-9]+$ && $members -ge 1 && $members -le 1500 ]] || die "--members must be 1..1500, not '$members'"
[[ $seeds =~ ^[1-9][0-9]*$ ]] || die "--seeds must be a positive count, not '$seeds'"
[[ $shadows =~ ^[0-9]+$ && $shadows -ne 1 ]] || die "--shadows must be 0 or at least 2, not '$shadows'"
IFS=, read -r -a eps_list <<<"$epsilons"
for e in "${eps_list[@]}"; do [[ $e == inf || $e =~ ^[0-9]*\.?[0-9]+$ ]] || die "--epsilons: '$e' is neither inf nor a number"; done
FED=build/bin/nebula-fed
[ -x $FED ] || die "$FED is missing (make)"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 validation/reference/train_ref.py digits "$tmp" 8 >/dev/null
/usr/bin/python3 validation/reference/fed_ref.py subset "$tmp/train.h5" "$tmp/members.h5" "$members" >/dev/null
fmt=markdown; [ $csv = 1 ] && fmt=csv
build/bin/nebula-bench provenance --format $fmt --command "${cmdline% }" --param epsilons="$epsilons" \
    --param members="$members" --param clients="$clients" --param q="$q" --param rounds="$rounds" \
    --param hidden="$hidden" --param seeds="$seeds" --param shadows="$shadows" </dev/null 2>"$tmp/provenance.log" |
    grep -E '^(# |<!-- )provenance: ' ||
    { echo "nebula-bench table privacy: nebula-bench provenance failed:" >&2; tail -5 "$tmp/provenance.log" >&2; exit 1; }
common=(--config configs/fed/digits-mlp-dp.ini --set "data.train=$tmp/members.h5" --set "data.val=$tmp/test.h5"
        --clients "$clients" --rounds "$rounds" --set "fed.sample_rate=$q" --set "model.mlp_hidden=$hidden"
        --set fed.eval_every=0)
once() {  # once EPS SEED -> "sigma rounds acc member_loss nonmember_loss auc tpr1 yeom attr_adv inv_id inv_ncc lira_auc lira_tpr1"
    local e=$1 s=$2 dir=$tmp/run-$1-$2 dp out
    if [ "$e" = inf ]; then dp=(--dp off); else dp=(--dp central --epsilon "$e"); fi
    out=$($FED "${common[@]}" "${dp[@]}" --seed "$s" --run-dir "$dir" --ckpt-every "$rounds" </dev/null 2>&1) ||
        { echo "nebula-bench table privacy: the run at epsilon $e, seed $s failed:" >&2; tail -5 <<<"$out" >&2; exit 1; }
    local sigma acc n
    sigma=$(sed -n 's/.*noise multiplier \([0-9.e+-]*\)$/\1/p' <<<"$out" | head -1)
    n=$(sed -n 's/^fed: done after \([0-9]*\) rounds.*/\1/p' <<<"$out")
    acc=$(sed -n "s/^round=$n .* acc=\([0-9.]*\).*/\1/p" <<<"$out")
    local a
    a=$($FED audit "${common[@]}" "${dp[@]}" --seed "$s" --run-dir "$dir" --shadows "$shadows" --json </dev/null \
        2>/dev/null | tail -1)
    /usr/bin/python3 -c 'import json, sys
a = json.loads(sys.argv[1])
print(sys.argv[2] or "-", sys.argv[3], sys.argv[4], a["member_loss"], a["nonmember_loss"], a["auc"], a["tpr_at_1pct_fpr"], a["yeom_advantage"],
      a["attr_advantage"], a["inv_identified"], a["inv_ncc"], a.get("lira_auc", "nan"), a.get("lira_tpr_at_1pct_fpr", "nan"))' \
        "$a" "$sigma" "$n" "$acc"
}
if [ $csv = 1 ]; then
    echo "epsilon,sigma,rounds,accuracy,member_loss,nonmember_loss,auc,tpr_at_1pct_fpr,yeom_advantage,attr_advantage,inv_identified,inv_ncc,lira_auc,lira_tpr_at_1pct_fpr"
else
    echo "| target epsilon (delta 1e-5) | noise multiplier | rounds | held-out accuracy | member / non-member loss | membership AUC | TPR at 1% FPR | Yeom advantage | attribute advantage | inversion: identified | inversion: NCC | LiRA AUC | LiRA TPR at 1% FPR |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
fi
for e in "${eps_list[@]}"; do
    : >"$tmp/rows"
    for s in $(seq 1 "$seeds"); do once "$e" "$s" >>"$tmp/rows"; done
    /usr/bin/python3 - "$e" "$csv" "$tmp/rows" <<'PY'
import statistics, sys
e, csv, rows = sys.argv[1], sys.argv[2] == "1", [l.split() for l in open(sys.argv[3])]
med = lambda k: statistics.median(float(r[k]) for r in rows)
sigma = rows[0][0]
cells = [("none" if e == "inf" else e), sigma, rows[0][1], f"{med(2):.4f}",
         f"{med(3):.3f} / {med(4):.3f}", f"{med(5):.4f}", f"{med(6):.4f}", f"{med(7):.4f}", f"{med(8):.4f}",
         f"{med(9):.2f}", f"{med(10):.4f}", f"{med(11):.4f}", f"{med(12):.4f}"]
print(",".join(cells).replace(" / ", ",") if csv else "| " + " | ".join(cells) + " |")
PY
done
