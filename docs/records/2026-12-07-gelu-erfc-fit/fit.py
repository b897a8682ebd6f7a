"""fit.py: the coefficients of gelu's erfc in kernels/common/act.h.

erfc(a / sqrt2) = e^(-a^2/2) * G(a), G(a) = erfcx(a / sqrt2), is fitted as
G = t Q(t), t = 1 / (1 + q a), Q a polynomial of degree 7, for a in
[0, 13.25] (past 13.2 the kernels return erfc = 0). The fit minimises the
largest relative error: weighted least squares on Chebyshev nodes in t,
the weights reweighted by Lawson's rule (w *= |r|^0.5) towards the
minimax solution. The reference is mpmath at 30 digits. q is a short
binary fraction (exact in float), picked from a scan (0.3046875: 9.1e-8;
0.3125: 2.0e-7; 0.30078125: 1.1e-7).

Usage: /usr/bin/python3 fit.py [q] [degree]   (needs numpy and mpmath)
Prints the fit's largest relative error on 1000 points and the
coefficients c0..c7 (Q(t) = c0 + c1 t + ... + c7 t^7) as float literals.
"""
import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 30
AMAX = 13.25


def erfcx_scaled(a):
    """erfc(a/sqrt2) e^(a^2/2), in double from 30 digits."""
    z = mp.mpf(a) / mp.sqrt(2)
    return float(mp.erfc(z) * mp.exp(z * z))


def fit(q, degree, n=800, iters=60):
    tmin = 1 / (1 + q * AMAX)
    k = np.arange(n)
    t = (tmin + 1) / 2 + (1 - tmin) / 2 * np.cos(np.pi * (k + 0.5) / n)
    g = np.array([erfcx_scaled(x) for x in (1 / t - 1) / q])
    basis = np.stack([t ** (j + 1) for j in range(degree + 1)], 1)
    w = np.ones(n)
    for _ in range(iters):
        c, *_ = np.linalg.lstsq(basis * (w / g)[:, None], g * (w / g), rcond=None)
        r = (basis @ c - g) / g
        w = np.maximum(w * np.abs(r) ** 0.5, 1e-12)
        w /= w.max()
    a = np.linspace(0, AMAX, 1000)
    tt = 1 / (1 + q * a)
    gg = np.array([erfcx_scaled(x) for x in a])
    err = np.abs((np.stack([tt ** (j + 1) for j in range(degree + 1)], 1) @ c - gg) / gg)
    return c, float(err.max())


def main():
    q = float(sys.argv[1]) if len(sys.argv) > 1 else 0.3046875
    degree = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    c, err = fit(q, degree)
    print("q=%g degree=%d max_rel_err=%.2e" % (q, degree, err))
    print(", ".join("%.9ef" % x for x in c))


if __name__ == "__main__":
    main()
