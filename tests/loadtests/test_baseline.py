"""The baseline command's verdicts: a figure regresses only beyond the noise both runs show."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from loadtests.baseline import FIGURES, compare, figures_of, report, threshold


def trials(**scale: float) -> list[dict[str, float]]:
    """Three trials of every figure around 100, each key scaled by ``scale`` (default 1)."""
    return [{f.key: 100 * scale.get(f.key, 1.0) * jitter for f in FIGURES}
            for jitter in (0.99, 1.0, 1.01)]


def verdicts(rows: list[dict]) -> dict[str, str]:
    return {r["key"]: "regressed" if r["regressed"] else "improved" if r["improved"] else "same"
            for r in rows}


def test_same_figures_are_the_same() -> None:
    base = figures_of(trials())
    assert set(verdicts(compare(base, figures_of(trials()))).values()) == {"same"}


def test_lower_throughput_and_higher_latency_regress_beyond_the_noise() -> None:
    base = figures_of(trials())
    band = math.exp(threshold(base["docs_per_s"], base["docs_per_s"])) - 1
    worse = 1 + band * 1.5
    rows = compare(base, figures_of(trials(docs_per_s=1 / worse, redelivery_s=worse)))
    got = verdicts(rows)
    assert got["docs_per_s"] == "regressed"
    assert got["redelivery_s"] == "regressed"
    assert {k for k, v in got.items() if v != "same"} == {"docs_per_s", "redelivery_s"}
    docs = next(r for r in rows if r["key"] == "docs_per_s")
    assert math.isclose(docs["ratio"], 1 / worse, rel_tol=1e-9)


def test_the_same_move_inside_a_noisy_figure_is_not_flagged() -> None:
    noisy = [{**t, "handover_s": v} for t, v in zip(trials(), (60.0, 100.0, 160.0),
                                                    strict=True)]
    rows = compare(figures_of(noisy), figures_of(trials(handover_s=1.3)))
    assert verdicts(rows)["handover_s"] == "same"


def test_more_trials_narrow_the_band() -> None:
    few = figures_of([{f.key: v for f in FIGURES} for v in (90.0, 100.0, 110.0)])
    many = figures_of([{f.key: v for f in FIGURES} for v in (90.0, 100.0, 110.0) * 4])
    assert threshold(many["docs_per_s"], many["docs_per_s"]) < threshold(
        few["docs_per_s"], few["docs_per_s"])


def test_a_better_figure_is_never_a_regression() -> None:
    rows = compare(figures_of(trials()), figures_of(trials(docs_per_s=2.0, fanout_p99_ms=0.5)))
    got = verdicts(rows)
    assert got["docs_per_s"] == "improved" and got["fanout_p99_ms"] == "improved"


def test_report_exit_status_says_whether_full_regressed_against_single(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("loadtests.common.RESULTS", tmp_path)  # its plot, not the repository's
    single = {"figures": figures_of(trials())}
    assert report({"configs": {"single": single,
                               "full": {"figures": figures_of(trials())}}}) == 0
    assert report({"configs": {"single": single,
                               "full": {"figures": figures_of(trials(latency_p99_ms=3))}}}) == 1
    assert report({"configs": {"single": single}}) == 2


def test_a_figure_the_baseline_lacks_is_left_out_not_an_error() -> None:
    base = figures_of(trials())
    del base["idle_cpu_pct"]
    assert "idle_cpu_pct" not in verdicts(compare(base, figures_of(trials())))
