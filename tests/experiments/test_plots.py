"""An experiment's plots: what each line is drawn from."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")


def _cell(rate: float, seed: int, adaptive: dict) -> dict:
    workload = {"order": "grouped", "arrival": "poisson", "rate": rate, "seed": seed}
    native = {"variant": "native", "mean_latency_s": 1.0, "p99_latency_s": 2.0, "goodput_rps": 5.0}
    return {"model": "m", "cell": {"runner": "sim", "workload": workload}, "results": [native, adaptive]}


def test_the_load_plot_leaves_a_missing_latency_out_not_drawn_as_zero(tmp_path: Path, monkeypatch):
    # a variant that completed nothing has no latency (None): it was drawn as 0 s, an instant
    # answer, and pulled the median over seeds down to half the one seed that had a figure
    from matplotlib.axes import Axes

    from radixflow.experiments.plots import latency_vs_load

    drawn: dict[tuple[str, int], list[float]] = {}
    plot = Axes.plot

    def recording(self, xs, ys, *args, **kwargs):
        column = self.figure.axes.index(self)
        drawn[(kwargs["label"], column)] = list(ys)
        return plot(self, xs, ys, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", recording)
    none = {"variant": "adaptive", "mean_latency_s": None, "p99_latency_s": None, "goodput_rps": 0.0}
    some = {"variant": "adaptive", "mean_latency_s": 0.5, "p99_latency_s": 0.8, "goodput_rps": 4.0}
    results = [_cell(10.0, 0, some), _cell(10.0, 1, none), _cell(100.0, 0, none)]
    assert latency_vs_load(results, tmp_path / "load.png")
    mean, p99, goodput = (drawn[("m grouped adaptive", column)] for column in range(3))
    assert mean[0] == 0.5 and p99[0] == 0.8  # the seed with a figure, not (0.5 + 0) / 2
    assert math.isnan(mean[1]) and math.isnan(p99[1])  # nothing to draw: a gap in the line
    assert goodput == [2.0, 0.0]  # a goodput of 0 is a figure: nothing completed in time


def test_the_load_plot_draws_a_line_per_setting_not_a_median_over_them(tmp_path: Path, monkeypatch):
    # a sweep over fixed costs (load_sweep.toml: 1, 3 and 10 ms) drew one line per model and order,
    # the median over every fixed cost, labelled as if over seeds alone
    from matplotlib.axes import Axes

    from radixflow.experiments.plots import latency_vs_load

    drawn: dict[str, list[float]] = {}
    plot = Axes.plot

    def recording(self, xs, ys, *args, **kwargs):
        if self.figure.axes.index(self) == 0:
            drawn[kwargs["label"]] = list(ys)
        return plot(self, xs, ys, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", recording)
    results = []
    for fixed, latency in ((1, 0.5), (10, 2.0)):
        for rate in (10.0, 100.0):
            cell = _cell(rate, 0, {"variant": "adaptive", "mean_latency_s": latency, "p99_latency_s": 1.0})
            cell["cell"]["fixed_cost_ms"] = fixed
            results.append(cell)
    assert latency_vs_load(results, tmp_path / "load.png")
    mine = {label: ys for label, ys in drawn.items() if label.endswith("adaptive")}
    assert sorted(mine.values()) == [[0.5, 0.5], [2.0, 2.0]], mine
    assert {label.split("fixed_cost_ms=")[1].split()[0] for label in mine} == {"1", "10"}, mine


def test_the_load_plot_of_cells_that_completed_nothing_is_drawn_not_a_crash(tmp_path: Path):
    # every Poisson cell without a latency (their requests all failed): the log-scaled latency axes
    # had no positive value, and matplotlib's ValueError ended the run before results.json was written
    from radixflow.experiments.plots import latency_vs_load

    none = {"variant": "adaptive", "mean_latency_s": None, "p99_latency_s": None, "goodput_rps": 0.0}
    results = [_cell(rate, 0, none) for rate in (10.0, 100.0)]
    for r in results:
        r["results"][0] = {**none, "variant": "native"}
    assert latency_vs_load(results, tmp_path / "load.png")
    assert (tmp_path / "load.png").stat().st_size > 0


def test_the_load_plots_legend_of_many_settings_sits_beside_the_axes_whole(tmp_path: Path, monkeypatch):
    # policies_cpu.toml's 36 settings x 3 variants: the legend, drawn inside the goodput panel, hid
    # it, ran off the image (most entries lost) and tight_layout warned that it could not fit
    import warnings

    from matplotlib.figure import Figure

    from radixflow.experiments.plots import latency_vs_load

    saved: list[Figure] = []
    savefig = Figure.savefig

    def keeping(self, *args, **kwargs):
        saved.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keeping)
    results = []
    for order in range(36):
        for rate in (10.0, 100.0):
            cell = _cell(rate, 0, {"variant": "adaptive", "mean_latency_s": 0.5, "p99_latency_s": 1.0})
            cell["cell"]["workload"]["order"] = f"order{order}"
            results.append(cell)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert latency_vs_load(results, tmp_path / "load.png")
    (figure,) = saved
    goodput = figure.axes[2]
    legends = [legend for ax in figure.axes for legend in [ax.get_legend()] if legend is not None]
    assert legends and len(legends[0].get_texts()) == 72
    box, panel = legends[0].get_window_extent(), goodput.get_window_extent()
    assert box.x0 >= panel.x1  # beside the panel, not over it


@pytest.mark.parametrize(
    ("settings", "runs"), [({}, 1), ({"repetitions": 3}, 3), ({"repetitions": 3, "replicas": 2}, 1)]
)
def test_a_latency_cdf_is_of_every_request_run_not_of_those_that_completed(
    tmp_path: Path, monkeypatch, settings: dict, runs: int
):
    # a variant that failed half its requests drew a CDF reaching 1 as a whole run's does: the
    # fraction was of the completed requests, so the failed ones vanished from the plot
    from matplotlib.axes import Axes

    from radixflow.experiments.plots import latency_cdf

    drawn: dict[str, list[float]] = {}
    step = Axes.step

    def recording(self, xs, ys, *args, **kwargs):
        drawn[kwargs["label"]] = list(ys)
        return step(self, xs, ys, *args, **kwargs)

    monkeypatch.setattr(Axes, "step", recording)
    every = {"variant": "native", "latencies_s": [0.1, 0.2, 0.3, 0.4] * runs}
    half = {"variant": "radixflow", "latencies_s": [0.1, 0.2] * runs}  # two of four failed in each run
    workload = {"order": "grouped", "arrival": "batch"}
    cell = {"runner": "torch", "workload": workload, **settings}
    result = {"model": "m", "requests": 4, "cell": cell, "results": [every, half]}
    assert latency_cdf([result], tmp_path / "cdf.png")
    assert drawn["native"][-1] == 1.0 and drawn["radixflow"][-1] == 0.5


def test_the_rounds_bars_are_labelled_by_every_setting_their_cells_differ_in(tmp_path: Path, monkeypatch):
    # two cells apart only in their load and seed were two bars labelled "m grouped" alike: which
    # bar was which load could not be told; and a grid larger than the plot was cut without a word
    from matplotlib.axes import Axes

    from radixflow.experiments.plots import MAX_PANELS, rounds_bars

    labels: list[str] = []
    titles: list[str] = []
    ticks, title = Axes.set_xticklabels, Axes.set_title
    monkeypatch.setattr(
        Axes, "set_xticklabels", lambda self, xs, **kw: labels.extend(xs) or ticks(self, xs, **kw)
    )
    monkeypatch.setattr(
        Axes, "set_title", lambda self, text, **kw: titles.append(text) or title(self, text, **kw)
    )

    def cell(rate: float, seed: int) -> dict:
        workload = {"order": "grouped", "arrival": "poisson", "rate": rate, "seed": seed}
        runs = [{"variant": "native", "rounds": 5}, {"variant": "radixflow", "rounds": 4}]
        return {"model": "m", "cell": {"group": "g", "runner": "sim", "workload": workload}, "results": runs}

    cells = [cell(rate, seed) for rate in (10.0, 20.0) for seed in range(2 * MAX_PANELS)]
    assert rounds_bars(cells, tmp_path / "rounds.png")
    assert labels[0] == "m\ngrouped\nrate=10.0 seed=0" and labels[-1].endswith("rate=20.0 seed=11"), labels
    assert titles == [f"the first {3 * MAX_PANELS} of {len(cells)} cells"], titles


def test_a_latency_cdf_panel_names_the_load_its_requests_arrived_at(tmp_path: Path, monkeypatch):
    # a Poisson cell's panel said "poisson" alone: at which offered load its latencies were
    # measured (what they depend on most) was not on the plot
    from matplotlib.axes import Axes

    from radixflow.experiments.plots import latency_cdf

    titles: list[str] = []
    title = Axes.set_title
    monkeypatch.setattr(
        Axes, "set_title", lambda self, text, **kw: titles.append(text) or title(self, text, **kw)
    )
    runs = [{"variant": "native", "latencies_s": [0.1]}, {"variant": "radixflow", "latencies_s": [0.1]}]

    def cell(model: str, arrival: str) -> dict:
        workload = {"order": "grouped", "arrival": arrival, "rate": 50.0, "seed": 0}
        return {
            "model": model,
            "requests": 1,
            "cell": {"runner": "sim", "workload": workload},
            "results": runs,
        }

    assert latency_cdf([cell("m", "poisson"), cell("n", "batch")], tmp_path / "cdf.png")
    assert titles == ["m (sim) grouped/poisson 50 req/s", "n (sim) grouped/batch"], titles
