"""Table rendering and value formatting."""

from __future__ import annotations

import pytest

from dauntless.cli._render import (
    EXPERIMENT_COLUMNS,
    checkpoint_row,
    experiment_row,
    format_log_line,
    latest_validation,
    metric_columns,
    trial_row,
)
from dauntless.cli._util import (
    fmt_bytes,
    fmt_duration,
    fmt_hparams,
    fmt_number,
    fmt_percent,
    fmt_time,
    make_table,
    print_fields,
    print_table,
)


def test_table_text_is_literal_and_trimmed(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(
        ["ID", "H-Params"], [[1, "layers=[1,2] [bold]x[/bold]"], [22, None]], title="Trials"
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines.pop(0) == ""  # a titled table starts a new section
    assert lines[0] == "Trials"
    assert lines[1].split() == ["ID", "H-Params"]
    assert set(lines[2]) == {"─"}
    assert lines[3].split() == ["1", "layers=[1,2]", "[bold]x[/bold]"]  # no markup applied
    assert lines[4] == "22"  # an empty cell leaves no trailing spaces
    assert all(line == line.rstrip() for line in lines)
    assert len(lines) == 5


def test_table_columns_align_and_rows_checked(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(["A", "Long header"], [["wide value", "x"], ["y", "z"]])
    lines = capsys.readouterr().out.splitlines()
    col = lines[0].index("Long header")
    assert lines[2][col] == "x" and lines[3][col] == "z"
    with pytest.raises(ValueError, match="2 cells, expected 3"):
        make_table(["a", "b", "c"], [[1, 2]])


def test_print_fields_aligns(capsys: pytest.CaptureFixture[str]) -> None:
    print_fields([("ID", 1), ("Long label", None), ("X", "v")])
    assert capsys.readouterr().out == "ID:         1\nLong label:\nX:          v\n"


def test_formatters() -> None:
    assert fmt_duration(100.0, 3825.0) == "1:02:05"
    assert fmt_duration(100.0, None, now=161.0) == "0:01:01"
    assert fmt_duration(None, 5.0) == ""
    assert fmt_bytes(512) == "512 B" and fmt_bytes(2048) == "2.0 KiB"
    assert fmt_bytes(3 * 1024**2) == "3.0 MiB" and fmt_bytes(5 * 1024**4) == "5120.0 GiB"
    assert fmt_number(0.123456789) == "0.123457" and fmt_number(3) == "3" and fmt_number(None) == ""
    assert fmt_number(True) == "True"
    assert fmt_percent(0.25) == "25.0%" and fmt_percent(None) == ""
    assert fmt_hparams({"lr": 0.001, "arch": {"d": 2}, "n": 3}) == 'arch={"d":2}, lr=0.001, n=3'
    assert fmt_hparams({}) == ""
    assert fmt_time(None) == "" and len(fmt_time(0.0)) == len("1970-01-01 00:00:00")


def test_rows() -> None:
    exp = {
        "id": 3, "name": None, "state": "ACTIVE", "progress": 0.5, "num_trials": 4,
        "best_searcher_metric": 0.25, "searcher_metric": "loss", "start_time": 0.0,
        "end_time": 60.0,
    }  # fmt: skip
    row = experiment_row(exp)  # type: ignore[arg-type]
    assert len(row) == len(EXPERIMENT_COLUMNS)
    assert row[:6] == ["3", "", "ACTIVE", "50.0%", "4", "loss=0.25"]
    assert row[7] == "0:01:00"
    trial = {"id": 9, "state": "ERROR", "hparams": {"lr": 1}, "total_batches": 10,
             "best_validation": None, "restarts": 2, "latest_checkpoint": None}  # fmt: skip
    assert trial_row(trial) == ["9", "ERROR", "lr=1", "10", "", "2", ""]  # type: ignore[arg-type]
    ck = {"uuid": "u", "trial_id": 9, "total_batches": 10, "state": "COMPLETED",
          "resources": {"a": 1024, "b": 1024}, "report_time": None}  # fmt: skip
    assert checkpoint_row(ck) == ["u", "9", "10", "COMPLETED", "2.0 KiB", ""]  # type: ignore[arg-type]


def test_latest_validation_shapes() -> None:
    assert latest_validation({"latest_validation": None}) == (None, {})
    flat = {"latest_validation": {"accuracy": 0.9, "batches": 30}}
    assert latest_validation(flat) == (30, {"accuracy": 0.9, "batches": 30})
    core = {"latest_validation": {"accuracy": 0.7}, "latest_validation_batches": 20}
    assert latest_validation(core) == (20, {"accuracy": 0.7})
    both = {"latest_validation": {"accuracy": 0.7, "batches": 30}, "latest_validation_batches": 25}
    assert latest_validation(both) == (25, {"accuracy": 0.7, "batches": 30})
    nested = {"latest_validation": {"total_batches": 40, "values": {"accuracy": 0.8}}}
    assert latest_validation(nested) == (40, {"accuracy": 0.8})
    assert metric_columns([{"b": 1, "batches": 2}, {"a": 1}]) == ["a", "b"]


def test_log_line_format() -> None:
    assert format_log_line({"log": "hi", "rank_id": 1}) == "[rank=1] hi"  # type: ignore[typeddict-item]
    assert format_log_line({"log": "hi", "rank_id": None}) == "hi"  # type: ignore[typeddict-item]
