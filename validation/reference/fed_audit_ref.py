#!/usr/bin/env python3
"""fed_audit_ref — the privacy-audit figures of libcore/fed/audit.h against the libraries the
literature computes them with, for validation/cli/test_fed_audit.sh.

    fed_audit_ref.py BIN     BIN: build/test/unit/test_fed_audit (its --eval mode)

Writes every case to BIN --eval on stdin (scores as repr(), which round-trips), reads the
figures it prints (%.17g) and compares:
  - fed_audit_auc against sklearn.metrics.roc_auc_score, within 1e-12;
  - fed_audit_tpr_at_fpr against sklearn.metrics.roc_curve(drop_intermediate=False), read at
    its last point with fpr <= target, within 1e-12, at 50%, 10%, 1%, 0.1% and 0 FPR (1% and
    0.1% are the rates of Carlini et al., S&P 2022); the default roc_curve
    (drop_intermediate=True) is read too and a difference reported, not failed: it drops
    collinear points, so inside a run of tie groups it can read a lower TPR (fed/audit.h);
  - fed_audit_ssim against a numpy transcription of scikit-image's structural_similarity
    with its defaults (7x7 uniform windows, sample covariance, the border cropped), within
    1e-10, and against scikit-image itself where it is installed (a "skip -" line where not).
Score sets: continuous, ties on a coarse grid, integer scores (heavy ties), one member
against one non-member, all scores equal, a diagonal run of tied groups, 2000 vs 2000 at 0.1%.

One "ok - ..." or "FAIL - ..." line per check; exit 1 on a failure, 77 (after one "SKIP:" line)
without numpy or scikit-learn (Debian: python3-sklearn).
"""
import subprocess
import sys

try:
    import numpy as np
    from sklearn.metrics import roc_auc_score, roc_curve
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (Debian: python3-sklearn)")
    sys.exit(77)

TOL_ROC = 1e-12   # both sides divide exact counts; the trapezoid of roc_auc_score rounds a little
TOL_SSIM = 1e-10  # the transcription's E[x^2] - E[x]^2 cancels ~1e-16 per window of values ~1
FPRS = (0.5, 0.1, 0.01, 0.001, 0.0)
FAILS = []


def ok(cond, what):
    print(("ok - " if cond else "FAIL - ") + what)
    if not cond:
        FAILS.append(what)


def nums(xs):
    return " ".join(repr(float(x)) for x in xs)


def score_sets(rng):
    """(name, members, non-members) with the ties that matter."""
    sets = []
    p, n = rng.normal(0.8, 1, 500), rng.normal(0, 1, 700)
    sets.append(("continuous 500 vs 700", p, n))
    p, n = rng.normal(0.5, 1, 300), rng.normal(0, 1, 400)
    sets.append(("a 0.25 grid (ties) 300 vs 400", np.round(p * 4) / 4, np.round(n * 4) / 4))
    sets.append(("integers 0..9 (heavy ties) 250 vs 350",
                 rng.integers(2, 10, 250).astype(float), rng.integers(0, 8, 350).astype(float)))
    sets.append(("one member vs one non-member", np.array([0.3]), np.array([0.7])))
    sets.append(("all scores equal 40 vs 60", np.full(40, 1.5), np.full(60, 1.5)))
    d = np.repeat(np.arange(5.0), 2)
    sets.append(("a diagonal run of tied groups 10 vs 10", d, d.copy()))
    p, n = rng.normal(1.0, 1, 2000), rng.normal(0, 1, 2000)
    n[:7] = np.sort(p)[-7:]  # non-members tied with the top members: the 0.1% region
    sets.append(("2000 vs 2000, ties in the top 0.1%", np.round(p, 2), np.round(n, 2)))
    return sets


def ref_tpr(fpr, tpr, target):
    return float(tpr[np.where(fpr <= target)[0][-1]]) if target >= 0 else 0.0


def ssim_numpy(a, b, rng_l):
    """skimage.metrics.structural_similarity(a, b, data_range=rng_l) with its defaults,
    transcribed: uniform 7x7 means, cov_norm = 49/48, crop 3 at each border, mean."""
    from numpy.lib.stride_tricks import sliding_window_view as win
    a, b = a.astype(np.float64), b.astype(np.float64)
    m = lambda x: win(x, (7, 7)).mean(axis=(-2, -1))
    ux, uy, uxx, uyy, uxy = m(a), m(b), m(a * a), m(b * b), m(a * b)
    cn = 49 / 48
    vx, vy, vxy = cn * (uxx - ux * ux), cn * (uyy - uy * uy), cn * (uxy - ux * uy)
    c1, c2 = (0.01 * rng_l) ** 2, (0.03 * rng_l) ** 2
    s = (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux ** 2 + uy ** 2 + c1) * (vx + vy + c2))
    return float(s.mean())


def image_pairs(rng):
    """(name, a, b, data range): float32 images as the C side takes them."""
    y, x = np.mgrid[0:32, 0:40]
    a = (0.5 + 0.25 * np.sin(0.4 * x) * np.cos(0.3 * y)).astype(np.float32)
    u = rng.integers(0, 256, (24, 24)).astype(np.float32)
    f32 = lambda v: np.asarray(v, dtype=np.float32)
    return [("smooth 32x40 vs noised, range 1", a, f32(a + rng.normal(0, 0.1, a.shape)), 1.0),
            ("smooth 32x40 vs shifted a pixel, range 1", a, np.roll(a, 1, axis=1), 1.0),
            ("8-bit 24x24 random vs blurred, range 255", u, f32((u + np.roll(u, 1, axis=0)) / 2), 255.0),
            ("7x7 (one window) vs 1 - itself, range 1", a[:7, :7].copy(), f32(1 - a[:7, :7]), 1.0)]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rng = np.random.default_rng(20260321)
    sets, pairs = score_sets(rng), image_pairs(rng)
    lines = []
    for _, p, n in sets:
        lines.append(f"roc {len(p)} {len(n)} {len(FPRS)}\n{nums(FPRS)}\n{nums(p)}\n{nums(n)}")
    for _, a, b, r in pairs:
        lines.append(f"ssim {a.shape[0]} {a.shape[1]} {r!r}\n{nums(a.ravel())}\n{nums(b.ravel())}")
    run = subprocess.run([sys.argv[1], "--eval"], input="\n".join(lines) + "\n", capture_output=True, text=True)
    ok(run.returncode == 0, f"{sys.argv[1]} --eval read every case (exit {run.returncode} {run.stderr.strip()})")
    if run.returncode != 0:
        return 1
    out = iter(run.stdout.split("\n"))

    for name, p, n in sets:
        y, s = np.r_[np.ones(len(p)), np.zeros(len(n))], np.r_[p, n]
        auc = float(next(out).split()[1])
        want = roc_auc_score(y, s)
        ok(abs(auc - want) <= TOL_ROC, f"AUC, {name}: {auc:.15f} vs roc_auc_score {want:.15f}")
        fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
        fpr_d, tpr_d, _ = roc_curve(y, s)
        for target in FPRS:
            got = float(next(out).split()[2])
            want, dflt = ref_tpr(fpr, tpr, target), ref_tpr(fpr_d, tpr_d, target)
            note = "" if dflt == want else f" (roc_curve's default drop_intermediate reads {dflt:.6f})"
            ok(abs(got - want) <= TOL_ROC, f"TPR at {target:g} FPR, {name}: {got:.6f} vs roc_curve {want:.6f}{note}")

    try:
        from skimage.metrics import structural_similarity
    except ImportError:
        structural_similarity = None
    for name, a, b, r in pairs:
        got = float(next(out).split()[1])
        want = ssim_numpy(a, b, r)
        ok(abs(got - want) <= TOL_SSIM, f"SSIM, {name}: {got:.12f} vs the transcription {want:.12f}")
        if structural_similarity is not None:
            sk = structural_similarity(a.astype(np.float64), b.astype(np.float64), data_range=r)
            ok(abs(got - sk) <= TOL_SSIM, f"SSIM, {name}: {got:.12f} vs scikit-image {sk:.12f}")
    if structural_similarity is None:
        print("skip - SSIM against scikit-image itself: scikit-image is not installed (the transcription stands in)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
