"""Chi-square helpers shared by the statistical buffer tests."""

from __future__ import annotations

import math

import numpy as np


def chi2_bound(dof: int, z: float = 5.0) -> float:
    """Upper chi-square quantile for ``dof`` at normal score ``z`` (Wilson-Hilferty).

    ``z = 5`` is a one-sided tail of about 3e-7; the approximation overestimates the exact
    quantile in the upper tail for small ``dof``, which only makes the check more lenient.
    """
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * math.sqrt(h)) ** 3


def chi2_statistic(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())
