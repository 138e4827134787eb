"""Non-negative least squares (Lawson–Hanson active set), pure Python for a handful of columns."""

from __future__ import annotations

import math

Matrix = list[list[float]]

_RIDGE = 1e-9  # relative to unit-norm columns: keeps collinear columns (e.g. two constants) solvable


def _solve(a: Matrix, b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting on a small square system."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if m[col][col] == 0:
            continue
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for k in range(col, n + 1):
                m[r][k] -= f * m[col][k]
    x = [0.0] * n
    for r in reversed(range(n)):
        s = m[r][n] - sum(m[r][k] * x[k] for k in range(r + 1, n))
        x[r] = s / m[r][r] if m[r][r] else 0.0
    return x


def _least_squares(cols: list[list[float]], y: list[float], active: list[int]) -> list[float]:
    """Unconstrained least squares on the ``active`` columns (normal equations + tiny ridge)."""
    ata = [[sum(p * q for p, q in zip(cols[i], cols[j], strict=True)) for j in active] for i in active]
    for k in range(len(active)):
        ata[k][k] += _RIDGE
    aty = [sum(p * q for p, q in zip(cols[i], y, strict=True)) for i in active]
    return _solve(ata, aty)


def nnls(rows: Matrix, y: list[float], max_iter: int = 200) -> list[float]:
    """argmin ||A x - y||² subject to x >= 0, for A given as ``rows``."""
    n = len(rows[0])
    raw = [[row[j] for row in rows] for j in range(n)]
    norms = [math.sqrt(sum(v * v for v in c)) or 1.0 for c in raw]
    cols = [[v / norms[j] for v in c] for j, c in enumerate(raw)]
    x = [0.0] * n
    passive: list[int] = []
    for _ in range(max_iter):
        resid = [yi - sum(cols[j][i] * x[j] for j in range(n)) for i, yi in enumerate(y)]
        grad = [sum(c * r for c, r in zip(cols[j], resid, strict=True)) for j in range(n)]
        candidates = [j for j in range(n) if j not in passive and grad[j] > 1e-12]
        if not candidates:
            break
        passive.append(max(candidates, key=lambda j: grad[j]))
        for _ in range(n + 1):
            z = dict(zip(passive, _least_squares(cols, y, passive), strict=True))
            if all(v > 0 for v in z.values()):
                x = [z.get(j, 0.0) for j in range(n)]
                break
            # step back towards x until the first passive coefficient reaches zero; drop it
            alpha = min((x[j] / (x[j] - z[j]) for j in passive if z[j] <= 0 and x[j] > z[j]), default=0.0)
            x = [x[j] + alpha * (z.get(j, 0.0) - x[j]) for j in range(n)]
            passive = [j for j in passive if x[j] > 1e-15]
            if not passive:
                break
    return [x[j] / norms[j] for j in range(n)]


def nnls_gram(
    gram: Matrix, rhs: list[float], max_iter: int = 100, start: list[float] | None = None
) -> list[float]:
    """argmin ½xᵀGx − bᵀx subject to x >= 0, from the normal equations alone (G = AᵀA, b = Aᵀy).

    The same active-set method as `nnls`, but each step costs O(n³) in the n columns, whatever
    the number of rows behind G: an online fit keeps G and b up to date row by row and solves
    here. G must be positive definite on the columns that enter (a ridge makes it so), so the
    answer is unique. ``start``: a previous answer, whose positive coefficients are tried as the
    active set first; an online fit's set rarely changes from one round to the next, and then one
    solve finds the answer (the loop below only confirms it).
    """
    n = len(rhs)
    x = [0.0] * n
    tol = 1e-12 * max((abs(gram[i][i]) for i in range(n)), default=1.0)
    passive: list[int] = []
    if start is not None:
        x, passive = _warm(gram, rhs, start)
    for _ in range(max_iter):
        grad = [rhs[j] - sum(gram[j][k] * x[k] for k in range(n)) for j in range(n)]
        candidates = [j for j in range(n) if j not in passive and grad[j] > tol]
        if not candidates:
            break
        passive.append(max(candidates, key=lambda j: grad[j]))
        for _ in range(n + 1):
            sub = _solve([[gram[i][j] for j in passive] for i in passive], [rhs[i] for i in passive])
            z = dict(zip(passive, sub, strict=True))
            if all(v > 0 for v in z.values()):
                x = [z.get(j, 0.0) for j in range(n)]
                break
            alpha = min((x[j] / (x[j] - z[j]) for j in passive if z[j] <= 0 and x[j] > z[j]), default=0.0)
            x = [x[j] + alpha * (z.get(j, 0.0) - x[j]) for j in range(n)]
            passive = [j for j in passive if x[j] > 1e-15]
            if not passive:
                break
    return x


def _warm(gram: Matrix, rhs: list[float], start: list[float]) -> tuple[list[float], list[int]]:
    """The unconstrained optimum on ``start``'s positive coefficients, with that set, when every
    coefficient of it comes out positive (a feasible point for the active-set loop); otherwise the
    cold start (zero, no set)."""
    n = len(rhs)
    passive = [j for j in range(n) if start[j] > 0]
    if passive:
        sub = _solve([[gram[i][j] for j in passive] for i in passive], [rhs[i] for i in passive])
        if all(v > 0 for v in sub):
            z = dict(zip(passive, sub, strict=True))
            return [z.get(j, 0.0) for j in range(n)], passive
    return [0.0] * n, []
