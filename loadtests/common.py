"""Helpers for the benchmarks: percentiles, progress lines, results as JSON and a PNG plot."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else float("nan"),
        "mean": statistics.fmean(values) if values else float("nan"),
    }


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def save_json(name: str, data: Any) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def new_figure(title: str, *, ncols: int = 1):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(6 * ncols, 4.2))
    fig.suptitle(title)
    return fig, axes


def save_figure(fig, name: str) -> Path:  # type: ignore[no-untyped-def]
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def load_note(load_1m: list[float]) -> str:
    """How busy the machine was, from load averages measured during the run, not assumed."""
    if not load_1m:
        return "load not measured"
    cores = os.cpu_count() or 1
    busy = "loaded" if max(load_1m) > cores else "quiet"
    return (f"{busy}: 1-minute load average {min(load_1m):.1f}-{max(load_1m):.1f} "
            f"during the run, {cores} cores")
