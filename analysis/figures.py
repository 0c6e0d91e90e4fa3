"""The figures one run's statistics produce, as plain data: a summary of its steady steps, the moving-block
bootstrap interval of its median, a ratio with its interval. Apart from analysis/stats.py, which computes them
with numpy, so that a command that only shows stored figures (`show`) does not import numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p10: float
    p90: float
    mean: float
    cv: float  # coefficient of variation (std / mean), a fraction


@dataclass(frozen=True)
class RatioCI:
    """A ratio B/A with its interval (from analysis.verdict.decide: run-to-run noise included)."""
    value: float
    ci_low: float
    ci_high: float
    confidence: float
    method: str


@dataclass(frozen=True)
class RunInterval:
    """One run's steady-state median and its moving-block bootstrap interval (same unit as the input)."""
    n: int                 # steady steps used
    median: float
    ci_low: float
    ci_high: float
    confidence: float
    block_length: int      # steps per resampled block (1: the steps look independent)
    method: str

    @property
    def log_se(self) -> float:
        """Standard error of log(median) implied by the interval (a fraction: 0.003 = 0.3%)."""
        if self.ci_low <= 0 or self.ci_high <= 0:
            return math.inf
        return (math.log(self.ci_high) - math.log(self.ci_low)) / (2.0 * _z(self.confidence))


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2.0)
