import csv
import json

from rich.console import Console

from drkernel.agent.metrics import summarize
from drkernel.agent.report import render_table, write_reports
from drkernel.agent.trajectories import Trajectory, Turn
from drkernel.types import EvalOutcome, EvalResult


def trajs():
    out = []
    for s, speeds in enumerate([(None, 1.3, 2.1), (0.8, None, 1.25)]):
        turns = []
        for i, sp in enumerate(speeds):
            ok = sp is not None
            outcome = EvalOutcome.OK if ok else EvalOutcome.INCORRECT
            res = EvalResult(outcome=outcome, correct=ok, speedup=sp, compiled=True)
            turns.append(Turn(i, "r", "c", "last_fence", res, 1.0 if ok else 0.0, "f"))
        out.append(Trajectory(problem="p", sample=s, prompt=[], turns=turns))
    return out


def test_reports_are_written(tmp_path):
    summary = summarize(trajs(), max_turns=3)
    paths = write_reports(summary, tmp_path / "out", title="test")
    assert [p.name for p in paths] == ["summary.json", "fast_p.csv", "problems.csv", "fast_p.png"]
    assert json.loads(paths[0].read_text())["per_turn"][2]["fast_p"]["1.2"] == 1.0
    rows = list(csv.DictReader(paths[1].open()))
    assert {"turn": "3", "metric": "fast_p", "p": "2", "value": "0.500000"} in rows
    assert paths[3].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[3].stat().st_size > 5000


def test_per_problem_speed_of_light_beside_the_best_speedup(tmp_path):
    """Each problem's fastest correct kernel, with the share of the device's bandwidth it reached."""
    from drkernel.types import SpeedOfLight

    runs = trajs()
    best = runs[0].turns[2].result  # 2.1x, the fastest correct kernel of problem p
    best.speed_of_light = SpeedOfLight(min_bytes=1 << 30, kernel_bandwidth_fraction=0.82,
                                       reference_bandwidth_fraction=0.39)
    runs[1].turns[2].result.speed_of_light = SpeedOfLight(min_bytes=1 << 30, kernel_bandwidth_fraction=0.5)
    summary = summarize(runs, max_turns=3)
    assert summary["per_problem"] == {"p": {"level": None, "correct_turns": 4, "best_speedup": 2.1,
                                            "kernel_bandwidth_fraction": 0.82,
                                            "reference_bandwidth_fraction": 0.39}}
    paths = write_reports(summary, tmp_path / "out")
    rows = list(csv.DictReader(paths[2].open()))
    assert rows == [{"problem": "p", "level": "", "correct_turns": "4", "best_speedup": "2.100000",
                     "kernel_bandwidth_fraction": "0.820000", "reference_bandwidth_fraction": "0.390000"}]


def test_table_renders():
    console = Console(record=True, width=80)
    console.print(render_table(summarize(trajs(), max_turns=3)))
    text = console.export_text()
    assert "each turn's kernel" in text and "best kernel up to each turn" in text and "p=1.2" in text
    assert "100.0" in text and "50.0" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    # last turn: 2.1x is within 10 % of p=2 and 1.25x of p=1.2
    flat = " ".join(text.split())
    assert "within 10% of p" in flat and "p=1: 0, p=1.2: 1, p=1.5: 0, p=2: 1" in flat


def test_borderline_counts_reach_the_csv(tmp_path):
    paths = write_reports(summarize(trajs(), max_turns=3), tmp_path / "out")
    rows = list(csv.DictReader(paths[1].open()))
    assert {"turn": "3", "metric": "fast_p_borderline", "p": "2", "value": "1"} in rows
    assert {"turn": "2", "metric": "fast_p_borderline", "p": "1.2", "value": "1"} in rows


def test_fast_p_per_level_on_the_console_and_in_the_csv(tmp_path):
    """The paper's Table 1 reports Fast@p per level: the bench's console and fast_p.csv show it too (issue
    35, part B), not only summary.json. Level 1 has both episodes of trajs(), level 2 none of its 2."""
    runs = trajs()
    for t in runs:
        t.level = 1
    summary = summarize(runs, max_turns=3, total=4, level_totals={1: 2, 2: 2})
    console = Console(record=True, width=80)
    console.print(render_table(summary))
    text = console.export_text()
    assert "Fast@p (%) per level, turn 3" in text
    lines = [line.replace("┃", "│") for line in text.splitlines()]
    rows = [line.split("│")[1:-1] for line in lines if line.count("│") > 4]
    cells = [[c.strip() for c in r] for r in rows]
    header = next(r for r in cells if r[:3] == ["level", "kernel", "samples"])
    assert header[3:] == ["p=1", "p=1.2", "p=1.5", "p=2"]
    assert ["1", "last", "2", "100.0", "100.0", "50.0", "50.0"] in cells  # 2.1x and 1.25x
    assert ["", "best", "", "100.0", "100.0", "50.0", "50.0"] in cells
    assert ["2", "last", "2", "0.0", "0.0", "0.0", "0.0"] in cells
    assert max(len(line) for line in text.splitlines()) <= 80
    paths = write_reports(summary, tmp_path / "out")
    csv_rows = list(csv.DictReader(paths[1].open()))
    assert {"turn": "3", "metric": "fast_p_level_1", "p": "2", "value": "0.500000"} in csv_rows
    assert {"turn": "3", "metric": "fast_p_best_level_1", "p": "1.5", "value": "0.500000"} in csv_rows
    assert {"turn": "3", "metric": "fast_p_level_2", "p": "1", "value": "0.000000"} in csv_rows


def test_every_header_and_cell_is_whole_on_an_80_column_console():
    """Issue 35, part B: with every optional column (refused, overlong, held-out) and levels, no header or
    number is cut short ("compi…", "100…") on an 80-column console; before, the first table had 11 columns."""
    runs = trajs()
    for t in runs:
        t.level = 1
    summary = summarize(runs, max_turns=3, total=4, level_totals={1: 2, 2: 2})
    for row in summary["per_turn"]:
        row["refused"] = row["prompt_overlong"] = 0.1
        row["held_out"] = {"checked": 10, "survived": 3}
    summary["interpreter"] = True
    console = Console(record=True, width=80)
    console.print(render_table(summary))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    headers = {c.strip() for line in text.splitlines() if "┃" in line for c in line.split("┃")[1:-1]}
    assert {"turn", "p=1", "p=1.2", "p=1.5", "p=2", "correct", "hacked", "refused", "compiled", "no code",
            "overlong", "held-out", "level", "kernel", "samples"} <= headers
    assert "100.0" in text and "3/10" in text


def test_reports_written_again_are_whole_or_as_they_were(tmp_path):
    """`drkernel report` (and bench) wrote fast_p.csv and problems.csv into the old files row by row: a
    write that failed half-way (here a damaged last row; a Ctrl-C or a full disk alike) left the run's
    reports cut. Each file is now replaced whole, or left as it was, and no temporary file stays."""
    import os

    import pytest

    from drkernel.agent.report import write_csv, write_problems_csv

    summary = summarize(trajs(), max_turns=3)
    out = tmp_path / "out"
    paths = write_reports(summary, out)
    before = {p.name: p.read_bytes() for p in paths}
    damaged = {**summary, "by_level": {"1": {"last_turn_fast_p": {"1": 0.5}, "best_fast_p": {"1": "x"}}},
               "per_problem": {"p": {"best_speedup": 2.0}, "q": None}}
    with pytest.raises(ValueError):
        write_csv(damaged, paths[1])
    with pytest.raises(AttributeError):
        write_problems_csv(damaged, paths[2])
    assert {p.name: p.read_bytes() for p in paths} == before
    assert sorted(os.listdir(out)) == sorted(before)
