"""Configuration errors fail fast: exit status 2, one line that says what to fix, no traceback, no model loaded,
nothing run (`mai run` through the real command line over the built-in assets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mai.backends.registry import loaded_engines
from mai.cli import main


def mai(home: Path, *args: str) -> int:
    return main(["--home", str(home), *args])


def test_an_unknown_split_of_a_local_copy_is_refused(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mai(home, "run", "--split", "nosuch", "--limit", "2") == 2
    err = capsys.readouterr().err
    assert "has no split 'nosuch': it has ['test']" in err and "Traceback" not in err
    assert not (home / "runs").exists() and loaded_engines() == []


def test_an_unknown_split_of_a_save_to_disk_copy_is_refused(home: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import datasets

    from tests.hub_fixtures import fixture_dataset

    datasets.DatasetDict({"test": fixture_dataset("pope")}).save_to_disk(str(tmp_path / "pope"))
    assert mai(home, "run", "--benchmark", "pope", "--data", str(tmp_path / "pope"), "--split", "val") == 2
    assert "has no split 'val': it has ['test']" in capsys.readouterr().err


def test_a_parquet_directory_without_split_names_is_one_split(tmp_path: Path) -> None:
    from mai.evals.loading import local_splits

    (tmp_path / "rows.parquet").write_bytes(b"")
    assert local_splits(tmp_path) is None  # nothing names a split: every file is the split asked for
    (tmp_path / "dev-00000-of-00002.parquet").write_bytes(b"")
    (tmp_path / "dev-00001-of-00002.parquet").write_bytes(b"")
    assert local_splits(tmp_path) == ["dev"]
    (tmp_path / "test-00000-of-00001-9f2ab1c3.parquet").write_bytes(b"")  # exports that add a hash
    assert local_splits(tmp_path) == ["dev", "test"]


@pytest.mark.parametrize("budget", ["S=100000000", "R=32769"])
def test_an_output_budget_over_the_limit_is_refused(home: Path, budget: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert mai(home, "run", "--max-new-tokens", budget) == 2
    err = capsys.readouterr().err
    assert "over the limit of 32768 tokens" in err and "Traceback" not in err
    assert loaded_engines() == []


def test_the_largest_budget_is_accepted() -> None:
    from mai.config import RunConfig

    assert RunConfig(max_new_tokens={"R": 32768}).max_new_tokens["R"] == 32768


@pytest.mark.parametrize(("content", "message"), [
    ('{"benchmark": "demo",', "not valid JSON at line 1"),
    ('["demo"]', "must hold a JSON object"),
    ('{"no_such_field": 1}', "no_such_field"),
    ('{"max_new_tokens": {"S": "many"}}', "max_new_tokens"),
    (b"\xff\xfe{}", "cannot be read"),
])
def test_a_malformed_config_file_is_one_line(home: Path, tmp_path: Path, content: str | bytes, message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert mai(home, "run", "--config", str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_a_missing_config_file_is_named(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mai(home, "run", "--config", str(tmp_path / "nope.json")) == 2
    assert "nope.json: cannot be read" in capsys.readouterr().err


def test_an_output_floor_above_its_budget_is_refused(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mai(home, "run", "--max-new-tokens", "R=16", "--min-new-tokens", "R=17") == 2
    err = capsys.readouterr().err
    assert "min_new_tokens {'R': 17} above max_new_tokens" in err and "Traceback" not in err
    assert loaded_engines() == []


def test_an_output_floor_reaches_the_decoding_and_only_then_the_run_key() -> None:
    from mai.config import RunConfig

    fixed = RunConfig(max_new_tokens={"R": 256}, min_new_tokens={"R": 256})
    assert (fixed.decoding("R").min_new_tokens, fixed.decoding("R").max_new_tokens) == (256, 256)
    assert fixed.decoding("S").min_new_tokens == 0
    assert RunConfig(min_new_tokens={}).key() == RunConfig().key() != fixed.key()
