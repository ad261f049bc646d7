#!/usr/bin/env bash
# test_fed_audit — the privacy-audit figures of libcore/fed/audit.h against the reference
# libraries (validation/reference/fed_audit_ref.py): ROC AUC against scikit-learn's
# roc_auc_score and TPR at 50%, 10%, 1%, 0.1% and 0 FPR against its roc_curve on seeded
# score sets with ties, within 1e-12; SSIM against a numpy transcription of scikit-image's
# structural_similarity, and scikit-image itself where installed (never required). The C
# side is build/test/unit/test_fed_audit --eval. Skipped (exit 77) without scikit-learn.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
BIN=build/test/unit/test_fed_audit
[ -x $BIN ] || { echo "FAIL - $BIN is missing (make)"; exit 1; }
$PY validation/reference/fed_audit_ref.py $BIN
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || fails=$((fails + 1))
finish
