#!/usr/bin/python3
"""fed_rdp_ref — Nebula's RDP accountant (libcore/fed/rdp.h) against Opacus 1.5.2's.

Usage: fed_rdp_ref.py PROGRAM

PROGRAM is build/test/unit/test_fed_rdp, whose answering mode reads one question per
line on stdin (--rdp: "q sigma alpha"; --eps: "q sigma steps [q sigma steps ...] delta";
--sigma-for: "q steps delta eps"; --steps-for: "q sigma delta eps") and prints one line
of numbers per question. Opacus answers the same questions:
  - one round's RDP at each of the 151 default orders over a grid of q and sigma
    (analysis.rdp._compute_rdp): |ours - Opacus| <= 1e-13 + 1e-9 |Opacus|;
  - epsilon and its order after a history of rounds (RDPAccountant, history set as
    opacus.accountants.utils does, get_privacy_spent): q 0.001..1, sigma 0.5..10, steps
    1..10000, delta 1e-5 and 1e-6, some composed, the best order fractional in most,
    integer (3, 12..63) in others: epsilon within 1e-9 relative (the brief allows 1%;
    rounding gives ~1e-12) and the same order wherever Opacus's best order beats the
    runner-up by more than that;
  - the noise for a budget: Opacus's epsilon at our sigma meets the budget and at
    sigma (1 - 1e-6) does not; ours is at most opacus.accountants.utils.
    get_noise_multiplier's (which stops within 0.01 of the budget, above the minimum);
  - the rounds a budget allows: Opacus's epsilon after n rounds meets it, after n + 1
    does not.
Prints one "ok - ..." or "FAIL - ..." line per check; exits 1 on any failure, and when
Opacus cannot be imported (the test must then fail, never skip).

Opacus is build/venv's, installed with --no-deps beside Debian's torch (tools/deps.sh),
whose torch 1.13 lacks torch.func: importing the whole package then fails. The
accountant needs none of it, so this loads opacus.accountants under an empty `opacus`
package and a placeholder opacus.optimizers (used there only in type hints).
"""
import math
import subprocess
import sys
import types
import warnings


def load_opacus():
    """RDPAccountant, the analysis module and get_noise_multiplier, from Opacus itself."""
    try:
        from opacus.accountants import RDPAccountant
    except ImportError:
        import importlib.util
        spec = importlib.util.find_spec("opacus")
        if spec is None:
            raise
        for name in [m for m in sys.modules if m == "opacus" or m.startswith("opacus.")]:
            del sys.modules[name]
        pkg = types.ModuleType("opacus")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["opacus"] = pkg
        opt = types.ModuleType("opacus.optimizers")
        opt.DPOptimizer = object
        sys.modules["opacus.optimizers"] = opt
        from opacus.accountants import RDPAccountant
    from importlib.metadata import version
    from opacus.accountants.analysis import rdp as analysis
    from opacus.accountants.utils import get_noise_multiplier
    return version("opacus"), RDPAccountant, analysis, get_noise_multiplier


fails = 0


def check(ok, what):
    global fails
    print(f"{'ok' if ok else 'FAIL'} - {what}", flush=True)
    fails += 0 if ok else 1
    return ok


def ask(program, mode, lines):
    """Our answers: one list of floats per question (None for "error")."""
    text = "".join(" ".join(repr(v) for v in line) + "\n" for line in lines)
    out = subprocess.run([program, mode], input=text, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{program} {mode} exited {out.returncode}: {out.stdout[-300:]} {out.stderr[-300:]}")
    rows = [None if r.strip() == "error" else [float(x) for x in r.split()] for r in out.stdout.splitlines()]
    if len(rows) != len(lines):
        raise RuntimeError(f"{program} {mode}: {len(rows)} answers to {len(lines)} questions")
    return rows


# (history [(q, sigma, steps), ...], delta): Opacus's history entries are (sigma, q, steps)
EPS_GRID = [
    ([(0.001, 0.5, 1)], 1e-5),
    ([(0.001, 1.0, 10000)], 1e-5),
    ([(0.004, 1.1, 2500)], 1e-6),
    ([(0.01, 0.5, 100)], 1e-5),
    ([(0.01, 1.1, 1000)], 1e-5),
    ([(0.01, 2.0, 10000)], 1e-6),
    ([(0.02, 0.8, 3000)], 1e-5),
    ([(0.05, 1.5, 500)], 1e-6),
    ([(0.1, 0.7, 10)], 1e-5),
    ([(0.1, 4.0, 10000)], 1e-6),
    ([(0.25, 10.0, 1)], 1e-5),
    ([(0.3, 3.0, 200)], 1e-5),
    ([(0.5, 5.0, 50)], 1e-6),
    ([(0.9, 2.0, 5)], 1e-5),
    ([(1.0, 0.5, 1)], 1e-5),
    ([(1.0, 8.0, 100)], 1e-6),
    ([(0.001, 10.0, 1)], 1e-5),
    ([(0.002, 6.0, 10)], 1e-6),
    ([(0.02, 1.0, 500), (0.05, 2.0, 300)], 1e-5),
    ([(0.01, 0.9, 1000), (0.001, 3.0, 10000), (1.0, 5.0, 2)], 1e-6),
]
RDP_QS = [0.001, 0.01, 0.07, 0.3, 0.6, 0.95]
RDP_SIGMAS = [0.5, 0.9, 1.7, 4.0, 10.0]
BUDGETS = [(0.01, 1000, 1e-5, 1.0), (0.001, 10000, 1e-6, 0.5), (0.1, 100, 1e-5, 8.0),
           (0.05, 1, 1e-5, 0.2), (0.004, 5000, 1e-5, 2.0), (0.3, 50, 1e-6, 3.0)]


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: fed_rdp_ref.py PROGRAM\n")
        return 2
    program = sys.argv[1]
    try:
        opacus_version, RDPAccountant, analysis, get_noise_multiplier = load_opacus()
    except Exception as e:  # noqa: BLE001 - any failure to load it fails the test
        check(False, f"import Opacus's RDP accountant ({type(e).__name__}: {e}): run make deps-test")
        return 1
    warnings.simplefilter("ignore")  # "optimal order is the largest alpha": expected for some settings
    check(opacus_version == "1.5.2", f"Opacus {opacus_version} (the accountant is pinned to 1.5.2's numbers)")
    alphas = RDPAccountant.DEFAULT_ALPHAS

    def opacus_eps(history, delta):
        acc = RDPAccountant()
        acc.history = [(s, q, n) for q, s, n in history]
        return acc.get_privacy_spent(delta=delta)

    # one round's RDP at every order
    questions = [(q, s, a) for q in RDP_QS for s in RDP_SIGMAS for a in alphas]
    ours = ask(program, "--rdp", questions)
    worst, where = 0.0, None
    for (q, s, a), (got,) in zip(questions, ours):
        want = analysis._compute_rdp(q, s, a)
        r = 0.0 if got == want else abs(got - want) / (1e-13 + 1e-9 * abs(want))
        if r > worst:
            worst, where = r, (q, s, a, got, want)
    check(worst <= 1, f"one round's RDP at the {len(alphas)} orders, q {RDP_QS[0]}..{RDP_QS[-1]}, sigma "
          f"{RDP_SIGMAS[0]}..{RDP_SIGMAS[-1]} ({len(questions)} values): worst |d| / (1e-13 + 1e-9 |Opacus|) "
          f"{worst:.2g}" + (f" at q {where[0]}, sigma {where[1]}, alpha {where[2]}: {where[3]!r} vs {where[4]!r}"
                            if where else ""))

    # epsilon after a history
    ours = ask(program, "--eps", [[v for h in hist for v in h] + [delta] for hist, delta in EPS_GRID])
    fractional = integer = 0
    for (hist, delta), (eps, order) in zip(EPS_GRID, ours):
        want, want_order = opacus_eps(hist, delta)
        acc_rdp = sum(analysis.compute_rdp(q=q, noise_multiplier=s, steps=n, orders=alphas) for q, s, n in hist)
        conv = sorted(r - (math.log(delta) + math.log(a)) / (a - 1) + math.log((a - 1) / a)
                      for r, a in zip(acc_rdp, alphas))
        clear = conv[1] - conv[0] > 1e-9 * abs(conv[0])
        rel = abs(eps - want) / abs(want)
        fractional += not float(want_order).is_integer()
        integer += float(want_order).is_integer()
        check(rel <= 1e-9 and (order == want_order or not clear),
              f"epsilon after {' + '.join(f'(q {q}, sigma {s}, {n} rounds)' for q, s, n in hist)} at delta {delta}: "
              f"{eps:.12g} at order {order:g}, Opacus {want:.12g} at {want_order:g} (relative {rel:.1e})")
    check(fractional >= 6 and integer >= 3, f"the grid's best orders: {fractional} fractional, {integer} integer")

    # the noise for a budget
    ours = ask(program, "--sigma-for", BUDGETS)
    for (q, steps, delta, target), row in zip(BUDGETS, ours):
        if row is None:
            check(False, f"sigma_for(q {q}, {steps} rounds, delta {delta}, eps {target}) refused the budget")
            continue
        sigma = row[0]
        at, _ = opacus_eps([(q, sigma, steps)], delta)
        below, _ = opacus_eps([(q, sigma * (1 - 1e-6), steps)], delta)
        theirs = get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=q, steps=steps,
                                      accountant="rdp")
        check(at <= target * (1 + 1e-9) and below > target and sigma <= theirs,
              f"sigma_for(q {q}, {steps} rounds, delta {delta}, eps {target}) = {sigma:.9g}: Opacus's epsilon "
              f"{at:.12g} there, {below:.12g} at sigma (1 - 1e-6); Opacus's get_noise_multiplier {theirs:.9g}")

    # the rounds a budget allows, at the sigma Opacus's planner chose
    questions = [(q, get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=q, steps=steps,
                                          accountant="rdp"), delta, target) for q, steps, delta, target in BUDGETS]
    ours = ask(program, "--steps-for", questions)
    for (q, sigma, delta, target), row in zip(questions, ours):
        n = int(row[0]) if row else -1
        at = opacus_eps([(q, sigma, n)], delta)[0] if n > 0 else 0
        after = opacus_eps([(q, sigma, n + 1)], delta)[0]
        check(n >= 0 and at <= target * (1 + 1e-9) and after > target,
              f"steps_for(q {q}, sigma {sigma:.9g}, delta {delta}, eps {target}) = {n}: Opacus's epsilon {at:.12g} "
              f"there, {after:.12g} one round later")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
