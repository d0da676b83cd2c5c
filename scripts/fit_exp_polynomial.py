"""Fits the polynomials of exp_fast (q of degree 3) and exp_precise (degree 4),
op_extension/csrc/kernel/cpu/vec_utils.h.

e^r on |r| <= ln2 / 2 is written 1 + r (1 + r q(r)), so that the two leading
terms are exact; q's coefficients minimise e^r's relative
error: weighted least squares on Chebyshev nodes, the weights raised where the
error is largest until it ripples evenly (a Remez exchange by reweighting).
Prints q's coefficients rounded to float, and the relative error of e^r with
them, evaluated in float64 (the kernel's own rounding comes on top:
tests/test_cpu_numerics.py measures the whole).

    python scripts/fit_exp_polynomial.py
"""

import numpy as np


def fit(degree: int, half_width: float = np.log(2) / 2 * 1.0005, rounds: int = 60):
    # The nodes reach a little past ln2 / 2: n = round(x / ln2) is computed from
    # a rounded product, so r may stray past it by an ulp or so.
    r = np.cos(np.linspace(0, np.pi, 20001)) * half_width
    r = r[np.abs(r) > 1e-6]                  # q's target below is 0 / 0 at r = 0
    target = (np.expm1(r) - r) / r**2        # q(r) such that e^r = 1 + r + r^2 q(r)
    to_relative = r**2 / np.exp(r)           # an error in q, as relative error of e^r
    weight = np.ones_like(r)
    vander = np.vander(r, degree + 1, increasing=True)
    for _ in range(rounds):
        w = to_relative * weight
        coeffs, *_ = np.linalg.lstsq(vander * w[:, None], target * w, rcond=None)
        error = np.abs((vander @ coeffs - target) * to_relative)
        weight = weight * (error / error.max()) ** 0.3 + 1e-12
    as_float = np.float32(coeffs).astype(np.float64)
    dense = np.linspace(-half_width, half_width, 200001)
    approx = 1 + dense * (1 + dense * (np.vander(dense, degree + 1, increasing=True) @ as_float))
    return np.float32(coeffs), float(np.max(np.abs(approx / np.exp(dense) - 1)))


# The kernels' polynomials: q's degree for each.
DEGREES = {"exp_of_reduced (exp_fast)": 3, "exp_of_reduced_precise (exp_precise)": 4}

if __name__ == "__main__":
    for name, degree in DEGREES.items():
        coeffs, error = fit(degree)
        print(f"{name}: q, lowest degree first:", ", ".join(f"{float(c)!r}f" for c in coeffs))
        print(f"  relative error of e^r with them: {error:.3g}")
