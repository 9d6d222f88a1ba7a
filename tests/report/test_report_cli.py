"""``python -m pipeline.report``: clear failures, and a run's report that can never fail the run."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.report import main, report_after_run


def test_a_directory_without_results_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read {tmp_path}/results.json") and "Traceback" not in err
    assert "completed run (results.json)" in err


def test_results_without_rows_still_give_a_page(tmp_path: Path, capsys) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"status": "completed", "counts": {"rows": 0}}))
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "report.html")
    assert "<h2>Rows</h2>" in (tmp_path / "report.html").read_text()


def test_a_report_that_cannot_be_written_only_warns(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "gone"
    assert report_after_run(str(missing), {"status": "completed"}) is None
    err = capsys.readouterr().err
    assert err.startswith("warning: the run completed but report.html could not be written")
    assert f"python -m pipeline.report {missing}" in err
