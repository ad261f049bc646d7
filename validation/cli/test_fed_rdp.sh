#!/usr/bin/env bash
# test_fed_rdp — the federated module's privacy accountant (libcore/fed/rdp.h) against
# Opacus 1.5.2's RDP accountant itself (build/venv: `make deps-test` installs it with
# --no-deps beside Debian's torch and scipy). validation/reference/fed_rdp_ref.py puts the
# same questions to both: one round's RDP at all 151 orders over a grid of q and sigma,
# epsilon after 20 histories (q 0.001..1, sigma 0.5..10, 1..10000 rounds, delta 1e-5 and
# 1e-6, composed ones among them, best orders fractional and integer), the noise for six
# budgets and the rounds they allow; build/test/unit/test_fed_rdp answers for Nebula.
# A venv without Opacus fails the test (as the other build/venv tests do): the
# comparison is the accountant's specification, not an optional extra.
set -u
cd "$(dirname "$0")/../.." || exit 1
. validation/cli/lib.sh
VPY=build/venv/bin/python
PROG=build/test/unit/test_fed_rdp
[ -x $PROG ] || { echo "FAIL - $PROG is missing (make build/test/unit/test_fed_rdp)"; exit 1; }
if ! $VPY -c "from importlib.metadata import version; assert version('opacus') == '1.5.2'" >/dev/null 2>&1; then
    echo "FAIL - $VPY with opacus 1.5.2 is missing: run make deps-test (tools/deps.sh installs it into build/venv)"
    exit 1
fi
expect "the answering mode: epsilon of 1000 rounds at q 0.01, sigma 1.1, delta 1e-5 (Opacus: 1.71177009122 at 9.6)" \
    0 "1.71177009122" -- $PROG --eps 0.01 1.1 1000 1e-5
expect "the answering mode refuses a malformed question" 2 "cannot read" -- $PROG --eps 0.01 1.1 1e-5
check "Opacus's answers = Nebula's (validation/reference/fed_rdp_ref.py)" $VPY validation/reference/fed_rdp_ref.py $PROG
finish
