"""Each paper benchmark's fixture shard (hub schema) loads through the production loader and runs
through the cascade with the tiny models; bad rows are recorded; missing columns fail before loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from mai.errors import ConfigError
from mai.evals.registry import get_benchmark
from mai.storage.paths import Home
from mai.storage.runs import read_routes
from tests.helpers import run
from tests.hub_fixtures import FIXTURES, fixture_dataset, write_fixture

EXPECTED_METRIC = {"pope": "f1", "chartqa": "relaxed_accuracy", "infovqa": "anls", "mmbench": "circular_accuracy",
                   "mmmu": "accuracy", "realworldqa": "exact_match"}


@pytest.mark.parametrize("benchmark", sorted(FIXTURES))
def test_fixture_shard_runs_through_the_cascade(home: Path, tmp_path: Path, benchmark: str) -> None:
    data = write_fixture(benchmark, tmp_path / benchmark)
    manifest = run(home, benchmark=benchmark, data=str(data), limit=None)
    valid = manifest["counts"]["valid"]
    assert valid >= 6 and manifest["counts"]["errors"] == 0
    assert manifest["routes"]["MV1"] + manifest["routes"]["MV2"] + manifest["routes"]["RT"] == valid
    assert any(m["metric"] == EXPECTED_METRIC[benchmark] for m in manifest["metrics"])
    assert manifest["scorer_profile"] == "lmms-eval"


def test_save_to_disk_copy_and_bad_rows(home: Path, tmp_path: Path) -> None:
    dataset = fixture_dataset("pope")
    rows = dataset.to_list()
    rows[2]["answer"] = "maybe"
    rows[4]["image"] = {"bytes": b"not an image", "path": None}
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows, features=dataset.features)}).save_to_disk(
        str(tmp_path / "pope-disk"))
    manifest = run(home, benchmark="pope", data=str(tmp_path / "pope-disk"), limit=None)
    routes = {r["sample_id"]: r for r in read_routes(Home.at(home), manifest["run_id"])}
    assert routes["pope-102"]["route"] == "ERROR" and "yes or no" in routes["pope-102"]["error"]
    assert routes["pope-104"]["route"] == "ERROR" and "cannot be decoded" in routes["pope-104"]["error"]
    assert manifest["counts"]["valid"] == 4


def test_a_missing_column_is_named_before_any_model_loads(home: Path, tmp_path: Path) -> None:
    from mai.backends.registry import loaded_engines

    data = tmp_path / "renamed"
    data.mkdir()
    fixture_dataset("chartqa").rename_column("question", "query").to_parquet(str(data / "test-00000-of-00001.parquet"))
    with pytest.raises(ConfigError, match=r"lacks column\(s\) \['question'\]"):
        run(home, benchmark="chartqa", data=str(data), limit=None)
    assert loaded_engines() == []


def test_every_paper_benchmark_has_both_profiles() -> None:
    for name in EXPECTED_METRIC:
        assert get_benchmark(name).profiles[:2] == ("lmms-eval", "official")
