"""Latency profile and estimate names become file names in the store: a name that could leave its folder
(`../../x`, `a/b`, `.hidden`) is a ConfigError and nothing is written anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from mai.cli import main
from mai.errors import ConfigError
from mai.latency_estimate import StageEstimate
from mai.storage.latency import check_name, read_profile, write_estimate, write_profile
from mai.storage.paths import Home

BAD = ["../../x", "../x", "a/b", "a\\b", "/tmp/x", ".hidden", "..", ".", "", " ", "a b", "x\n", "é", "a:b", "a*b",
       "~x", "x\x00"]
GOOD = ["tiny-large-cpu", "a.b_c+d", "h100+a100", "r1", "_x", "-x", "a..b"]
ROW = {"model": "m", "backend": "published", "dtype": "", "hardware": "cpu", "source": "imported",
       "image_resolution": None, "image_tokens": None, "query_tokens": None, "input_tokens": 100,
       "output_tokens": None, "repeats": None, "ttft_ms": 10.0, "decode_ms": None, "tokens_per_s": 50.0}
STAGES = [StageEstimate(stage="s", profile="p", calls=1, prompt_tokens=10, output_tokens=2, ttft_s=0.1, decode_s=0.2)]


def files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", BAD)
def test_a_name_that_could_leave_its_folder_is_refused(tmp_path: Path, name: str) -> None:
    root = tmp_path / "deep" / "er" / "home"
    home = Home.at(root)
    with pytest.raises(ConfigError, match="not usable"):
        write_profile(home, name, [ROW])
    with pytest.raises(ConfigError, match="not usable"):
        write_estimate(home, "20260101-000000-abcdef", name, STAGES)
    with pytest.raises(ConfigError, match="not usable"):
        read_profile(home, name)
    assert files(tmp_path) == set()


@pytest.mark.parametrize("name", GOOD)
def test_ordinary_names_are_kept(tmp_path: Path, name: str) -> None:
    home = Home.at(tmp_path)
    assert check_name(name, "estimate") == name
    assert write_profile(home, name, [ROW]).parent == home.table_dir("latency_profiles")
    assert read_profile(home, name).name == name
    written = write_estimate(home, "20260101-000000-abcdef", name, STAGES)
    assert written == home.table_dir("estimates") / "20260101-000000-abcdef" / f"{name}.parquet"


def test_a_run_id_that_could_leave_the_estimates_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run name"):
        write_estimate(Home.at(tmp_path / "home"), "../../elsewhere", "fine", STAGES)
    assert files(tmp_path) == set()


def test_the_cli_refuses_a_bad_profile_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "published.csv"
    csv.write_text("model,input_tokens,ttft_ms,tokens_per_s\nm,100,10,50\n")
    home = tmp_path / "deep" / "home"
    assert main(["--home", str(home), "import-profile", str(csv), "--name", "../../x"]) == 2
    assert "not usable" in capsys.readouterr().err
    assert files(tmp_path) == {csv}
    assert main(["--home", str(home), "import-profile", str(csv), "--name", "published-m"]) == 0
    assert (Home.at(home).table_dir("latency_profiles") / "published-m.parquet").is_file()
