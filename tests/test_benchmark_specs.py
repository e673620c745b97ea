"""A researcher's own benchmark as a spec file: VLMEvalKit's TSV (generated here: base64 PNGs, options A-D, hints,
categories) through the cascade with the tiny pair, from another working directory; a re-run and a moved spec compute
nothing; one changed answer changes only scores; yes/no (JSONL) and number (Parquet) specs run; a spec error and a
bad row each say what is wrong."""

from __future__ import annotations

import base64
import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from mai import api
from mai.backends.registry import loaded_engines
from mai.cli import main
from mai.config import RunConfig, config_from_mapping
from mai.errors import ConfigError
from mai.evals import registry
from mai.evals.loading import data_fingerprint
from mai.evals.spec import SpecBenchmark, load_spec
from mai.evals.spec_check import check_spec
from mai.prompts import INSTRUCTIONS
from mai.storage.paths import Home
from mai.storage.runs import read_routes
from tests.helpers import BUDGET

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 70, 220), "yellow": (240, 220, 40)}
NAMES = list(COLOURS)


def png(rgb: tuple[int, int, int], size: int = 32) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), rgb).save(buffer, format="PNG")
    return buffer.getvalue()


def write_tsv(path: Path, answers: dict[int, str] | None = None, extra: list[list[str]] | None = None) -> Path:
    """VLMEvalKit's custom-dataset TSV: index, base64 image, question, hint, A-D, answer, category. Row 5 repeats
    row 1's image by index, as VLMEvalKit writes a repeated image."""
    header = ["index", "image", "question", "hint", "A", "B", "C", "D", "answer", "category"]
    lines = []
    for i in range(6):
        name = NAMES[i % 4]
        image = "1" if i == 5 else base64.b64encode(png(COLOURS[name])).decode()
        answer = (answers or {}).get(i, "ABCD"[NAMES.index(NAMES[1] if i == 5 else name)])
        lines.append([str(i), image, "What colour is the square?", "Look closely." if i % 2 else "", *NAMES, answer,
                      "warm" if name in ("red", "yellow") else "cool"])
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.writer(out, delimiter="\t")
        writer.writerows([header, *lines, *(extra or [])])
    return path


def write_spec(folder: Path, **fields: Any) -> Path:
    import yaml

    spec = folder / "bench.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    spec.write_text(yaml.safe_dump(fields))
    return spec


def run_spec(home: Path, spec: str, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"home": str(home), "benchmark": spec, "shards": 1, "batch_size": 8,
                              "max_new_tokens": BUDGET, **overrides}
    return api.run(config_from_mapping(values), progress=False, local=True)


# --- without a model ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "message"), [
    ({"answer_kind": "yes_no", "metric": "anls"},
     "metric 'anls' does not fit answer_kind 'yes_no': use accuracy"),
    ({"answer_kind": "number", "columns": {"options": ["A", "B"]}},
     "columns.options apply only to answer_kind choice"),
    ({"answer_kind": "choice", "format": "csv"}, "format must be 'vlmevalkit-tsv', 'parquet', 'jsonl' or 'hub'"),
    ({"answer_kind": "choice", "colums": {}}, "colums is not a spec field"),
    ({"answer_kind": "choice", "name": "mmbench"}, "'mmbench' is a built-in benchmark's name"),
    ({"answer_kind": "choice", "data": "missing.tsv"}, "data 'missing.tsv' does not exist"),
    ({"answer_kind": "choice", "format": "hub", "data": "org/name"}, "format hub needs revision"),
    ({"format": "parquet"}, "answer_kind is required"),
])
def test_a_spec_error_says_what_to_change(tmp_path: Path, fields: dict[str, Any], message: str) -> None:
    write_tsv(tmp_path / "colours.tsv")
    spec = write_spec(tmp_path, **{"name": "colours", "data": "colours.tsv", "format": "vlmevalkit-tsv", **fields})
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        config_from_mapping({"benchmark": str(spec)})
    assert str(raised.value).startswith(f"benchmark spec {spec}: ")


def test_not_yaml_and_a_missing_column_fail_before_any_model_loads(home: Path, tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("name: x\n  data: [\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d+ column \d+"):
        load_spec(tmp_path / "broken.yaml")
    write_tsv(tmp_path / "colours.tsv")
    spec = write_spec(tmp_path, name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice",
                      columns={"question": "prompt", "category": "topic"})
    with pytest.raises(ConfigError, match=r"columns.question names 'prompt', columns.category names 'topic', which "
                                          r"the data lacks; it has \['index', 'image'"):
        api.plan_run(config_from_mapping({"benchmark": str(spec), "home": str(home)}))
    assert loaded_engines() == []


def test_a_hub_spec_plans_its_pinned_revision(home: Path, tmp_path: Path) -> None:
    """The hub format reads through the built-in benchmarks' code (no hub here: the plan is checked, not the rows)."""
    spec = write_spec(tmp_path, name="hub-colours", data="org/colours", format="hub", revision="0123abcd",
                      subset="en", split="validation", answer_kind="text", metric="exact_match")
    plan = api.plan_run(config_from_mapping({"benchmark": str(spec), "home": str(home)}))
    assert (plan.benchmark, plan.source.location, plan.source.revision, plan.source.config, plan.source.split) == \
        ("hub-colours", "org/colours", "0123abcd", "en", "validation")
    assert plan.source.fingerprint == data_fingerprint("org/colours@0123abcd", "validation", "en")


def test_bad_rows_become_per_sample_errors_with_their_reasons(tmp_path: Path) -> None:
    bad = [["6", base64.b64encode(b"not an image " * 8).decode(), "q", "", *NAMES, "A", "warm"],
           ["7", "%%%not base64%%%" * 8, "q", "", *NAMES, "A", "warm"],
           ["8", base64.b64encode(png((0, 0, 0))).decode(), "q", "", *NAMES, "E", "warm"],
           ["9", "42", "q", "", *NAMES, "A", "warm"],                         # an index no row has
           ["10", "short"]]
    write_tsv(tmp_path / "colours.tsv", extra=bad)
    found = check_spec(load_spec(write_spec(tmp_path, name="colours", data="colours.tsv", format="vlmevalkit-tsv",
                                            answer_kind="choice")))
    errors = dict(found.errors)
    assert (found.rows, found.usable, found.images) == (11, 6, 6)
    assert "image cannot be decoded" in errors["colours-6"] and " at 0x" not in errors["colours-6"]
    assert "column 'image' is not a base64 image" in errors["colours-7"]
    assert errors["colours-8"] == "answer 'E' is not one of the present options ['A', 'B', 'C', 'D']"
    assert errors["colours-9"] == "column 'image' holds '42', which is no image and no row's index"
    assert errors["colours-10"] == "line 12 has 2 cells for 10 columns (a tab or quote out of place?)"
    assert found.answers == {"A": 2, "B": 2, "C": 1, "D": 1} and found.categories == {"warm": 3, "cool": 3}


def test_the_kinds_reuse_the_built_in_rules(tmp_path: Path) -> None:
    """Choice parses as MMBench (letters up to H too), number as ChartQA, text as InfoVQA's ANLS."""
    write_tsv(tmp_path / "colours.tsv")
    choice = SpecBenchmark(load_spec(write_spec(tmp_path, name="c", data="colours.tsv", format="vlmevalkit-tsv",
                                                answer_kind="choice")))
    from dataclasses import replace

    from mai.types import Sample

    sample = Sample(sample_id="c-0", benchmark="c", question="q", options=tuple("abcdefgh"), answer="G",
                    image_paths=(), image_sha256=(), category="x", content_hash="", answer_style="letter",
                    meta=(("letters", "ABCDEFGH"),))
    assert choice.parse_answer("The answer is (G)", sample) == "G" and choice.parse_answer("B", sample) == "B"
    assert choice.score("G", sample) == 1.0 and choice.agree("G", "G", sample) and not choice.agree(None, None, sample)
    number = SpecBenchmark(choice.spec.model_copy(update={"answer_kind": "number"}))
    assert number.score("10.4", replace(sample, answer="10")) == 1.0 and number.agree("100", "97", sample)
    text = SpecBenchmark(choice.spec.model_copy(update={"answer_kind": "text"}))
    assert text.score("New York", replace(sample, references=("new york city", "New York"))) == 1.0
    assert text.profiles == ("lmms-eval", "official", "anls-paper")


def test_cli_lists_benchmarks_and_checks_a_spec(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    write_tsv(tmp_path / "data" / "colours.tsv")
    write_spec(tmp_path / "data", name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice")
    monkeypatch.chdir(tmp_path)
    assert main(["benchmarks"]) == 0
    listing = capsys.readouterr().out
    assert "mmbench" in listing and "answer_kind: choice" in listing and "format: vlmevalkit-tsv" in listing
    assert main(["--home", str(home), "benchmark", "check", "data/bench.yaml"]) == 0
    report = capsys.readouterr().out
    assert "rows 6, usable 6, errors 0, images decoded 6" in report and "answers: A 2, B 2, C 1, D 1" in report
    assert main(["benchmark", "check", "data/none.yaml"]) == 2
    assert "no such file" in capsys.readouterr().err
    # `mai score` takes a spec too: rows in the spec's columns plus `prediction`, no images needed
    lines = [json.dumps({"index": i, "question": "What colour?", **dict(zip("ABCD", NAMES)), "answer": "ABCD"[i],
                         "category": "c", "prediction": prediction})
             for i, prediction in enumerate(["A", "The answer is (C)", "green", "D."])]
    scored = api.score("data/bench.yaml", lines).summary
    assert scored["benchmark"] == "colours" and scored["scored"] == 4
    assert [m["value"] for m in scored["metrics"] if (m["name"], m["subset"]) == ("accuracy", "overall")] == [0.5]


def test_the_shipped_example_reads_clean() -> None:
    found = check_spec(load_spec(Path(__file__).resolve().parent.parent / "examples" / "colours" / "bench.yaml"))
    assert (found.rows, found.usable, found.images, found.errors) == (8, 8, 8, [])
    assert found.categories == {"warm": 4, "cool": 4}


# --- through the cascade --------------------------------------------------------------------------------------


def test_a_vlmevalkit_tsv_runs_reruns_moves_and_rescored_answers(home: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "mine"
    write_tsv(data / "colours.tsv")
    write_spec(data, name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a relative spec path and the spec's relative data, from another directory
    first = run_spec(home, "../mine/bench.yaml")
    assert first["counts"]["samples"] == 6 and first["counts"]["errors"] == 0
    assert sum(first["routes"][r] for r in ("MV1", "MV2", "RT")) == 6
    metrics = {(m["metric"], m["subset"]) for m in first["metrics"]}
    assert {("accuracy", "overall"), ("accuracy", "category=warm"), ("accuracy", "category=cool")} <= metrics
    assert first["config"]["benchmark"] == "colours" and first["config"]["benchmark_spec"]["answer_kind"] == "choice"

    moved = tmp_path / "moved"
    shutil.copytree(data, moved)
    again = run_spec(home, str(moved / "bench.yaml"))  # the same spec and data elsewhere: the same benchmark
    assert again["counts"]["generations_computed"] == 0

    write_tsv(moved / "colours.tsv", answers={2: "A"})  # one reference answer changed: only its score can change
    changed = run_spec(home, str(moved / "bench.yaml"))
    assert changed["counts"]["generations_computed"] == 0
    before = {r["sample_id"]: r for r in read_routes(Home.at(home), first["run_id"])}
    after = {r["sample_id"]: r for r in read_routes(Home.at(home), changed["run_id"])}
    assert {s: (r["route"], r["final_gen_id"]) for s, r in before.items()} == \
        {s: (r["route"], r["final_gen_id"]) for s, r in after.items()}
    assert all(before[s]["score"] == after[s]["score"] for s in before if s != "colours-2")
    assert before["colours-2"]["score"] == float(before["colours-2"]["final_answer"] == "C")
    assert after["colours-2"]["score"] == float(after["colours-2"]["final_answer"] == "A")

    # a fresh process knows the benchmark from the store (no spec file): run by its name, rescore
    monkeypatch.setattr(registry, "_SPECS", {})
    by_name = run_spec(home, "colours")
    assert by_name["counts"]["generations_computed"] == 0 and by_name["config"]["benchmark_spec"] is not None
    monkeypatch.setattr(registry, "_SPECS", {})
    api.rescore(first["run_id"], "official", home=str(home))
    assert "colours" in registry._SPECS
    monkeypatch.setattr(registry, "_SPECS", {})
    labs = api.policies(benchmark="colours", home=str(home))  # the policy lab re-parses and scores by the spec
    assert len(labs) == 2 and all(lab["benchmark"] == "colours" and lab["samples"] == 6 for lab in labs)


def test_yes_no_jsonl_and_number_parquet_specs_run(home: Path, tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    rows = []
    for i, name in enumerate(NAMES):
        (images / f"{name}.png").write_bytes(png(COLOURS[name]))
        rows.append({"id": f"q{i}", "picture": f"images/{name}.png", "question": f"Is the square {NAMES[i ^ 1]}?",
                     "answer": "no" if i % 2 else "No", "category": "colour"})
    rows.append({"id": "q9", "picture": "images/none.png", "question": "Is it red?", "answer": "maybe"})
    rows.append({"id": "q8", "picture": "/etc/hostname", "question": "Is it red?", "answer": "no"})  # refused, unread
    (tmp_path / "yes_no.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    yes_no = run_spec(home, str(write_spec(tmp_path, name="colours-yes-no", data="yes_no.jsonl", format="jsonl",
                                           answer_kind="yes_no", columns={"id": "id", "image": "picture"})))
    routes = {r["sample_id"]: r for r in read_routes(Home.at(home), yes_no["run_id"])}
    assert yes_no["counts"]["valid"] == 4 and yes_no["counts"]["errors"] == 3
    assert routes["colours-yes-no-q9"]["route"] == "ERROR"
    assert "yes or no" in routes["colours-yes-no-q9"]["error"]
    assert "line 7 is not a JSON object" in routes["colours-yes-no-6"]["error"]
    assert "image path '/etc/hostname' is an absolute path outside the benchmark's folder" in \
        routes["colours-yes-no-q8"]["error"]
    assert {m["metric"] for m in yes_no["metrics"]} >= {"accuracy", "f1", "precision", "recall"}

    table = pa.table({"question": [f"How many {n} squares?" for n in NAMES], "answer": ["1", "2", "3.5", "4%"],
                      "image": [{"bytes": png(COLOURS[n]), "path": None} for n in NAMES]})
    pq.write_table(table, tmp_path / "counts.parquet")
    number_spec = tmp_path / "number"
    number_spec.mkdir()
    number = run_spec(home, str(write_spec(number_spec, name="colour-counts", data="../counts.parquet",
                                           data_root="..", format="parquet", answer_kind="number")),
                      data_root=str(tmp_path))  # the user allows the spec's wider folder (a spec cannot by itself)
    assert number["counts"]["valid"] == 4
    assert {(m["metric"], m["subset"]) for m in number["metrics"]} >= {("relaxed_accuracy", "overall")}
    assert RunConfig(**number["config"]).benchmark_spec is not None


# --- issue 52: prompt template, budgets, confined paths, prompt lengths; issue 50: JSONL rows keep their errors ------


TEMPLATE = "Colour quiz. {hint}\nQ: {question}\nChoices:\n{options}\nTopic: {category}"


def generations(home: Path, where: str = "true") -> list[tuple[Any, ...]]:
    from mai.storage.catalog import query

    return query(Home.at(home), "SELECT prompt_kind, prompt_text, max_new_tokens, output_tokens FROM generations "
                                f"WHERE {where}")[1]


def test_a_prompt_template_reaches_every_stage_and_is_part_of_the_version(home: Path, tmp_path: Path) -> None:
    write_tsv(tmp_path / "colours.tsv")
    spec = write_spec(tmp_path, name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice",
                      prompt=TEMPLATE)
    first = run_spec(home, str(spec))
    rows = generations(home)
    assert {kind for kind, *_ in rows} >= {"S", "R", "RT"}
    for kind, text, *_ in rows:  # the template's layout, then the paper's instruction of the stage, unchanged
        assert text.startswith("Colour quiz. ") and "\nQ: What colour is the square?\nChoices:\nA. red\nB. green\n" \
            "C. blue\nD. yellow\nTopic: " in text, (kind, text)
    assert any("Colour quiz. Look closely.\nQ:" in text for _, text, *_ in rows)  # the rows' hints
    for kind, text, *_ in rows:  # the stage's instruction follows the template as the paper writes it
        category, instruction = text.split("\nTopic: ", 1)[1].split("\n", 1)
        assert category in ("warm", "cool")
        assert instruction == INSTRUCTIONS[(kind, "letter")] if kind in ("S", "R") else \
            instruction.startswith("The following is a reference answer from a smaller model")
    assert run_spec(home, str(spec))["counts"]["generations_computed"] == 0  # unchanged: reused
    write_spec(tmp_path, name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice",
               prompt=TEMPLATE.replace("Colour quiz.", "Colour test."))
    changed = run_spec(home, str(spec))
    assert changed["counts"]["generations_reused"] == 0 < changed["counts"]["generations_computed"]
    assert first["counts"]["generations_computed"] > 0
    assert changed["config"]["benchmark_spec"]["prompt"].startswith("Colour test.")


def test_spec_budgets_are_the_runs_unless_the_command_sets_them(home: Path, tmp_path: Path) -> None:
    write_tsv(tmp_path / "colours.tsv")
    budgets = {"S": 3, "R": 6, "S2": 3, "RT": 2}
    spec = write_spec(tmp_path, name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice",
                      max_new_tokens=budgets)
    values = {"home": str(home), "benchmark": str(spec), "shards": 1, "batch_size": 8}
    run = api.run(config_from_mapping(values), progress=False, local=True)
    assert {k: run["config"]["max_new_tokens"][k] for k in budgets} == budgets
    rows = generations(home)
    assert {kind for kind, *_ in rows} >= {"S", "R"}
    assert all(limit == budgets[kind] and produced <= limit for kind, _, limit, produced in rows)
    flagged = api.run(config_from_mapping({**values, "max_new_tokens": {"R": 4}}), progress=False,
                      local=True)
    assert flagged["config"]["max_new_tokens"]["R"] == 4 and flagged["config"]["max_new_tokens"]["S"] == 3
    assert flagged["run_id"] != run["run_id"]
    assert {limit for _, _, limit, _ in generations(home, "prompt_kind = 'R'")} == {4, 6}
    # `mai report A B` on runs of two benchmarks: both reported, no run-vs-run section (it was exit 2)
    demo = api.run(config_from_mapping({"home": str(home), "benchmark": "demo", "limit": 2, "mode": "single",
                                        "single_prompt": "S", "max_new_tokens": {"S": 2}}), progress=False,
                   local=True)
    out = tmp_path / "report.html"
    assert main(["--home", str(home), "report", run["run_id"], demo["run_id"], "--out", str(out)]) == 0
    built = api.report([run["run_id"], demo["run_id"]], out=out, home=home)
    assert built["runs"] == 2 and "compare" not in built["sections"] and "traces" in built["sections"]


def test_mai_regress_on_a_spec_uses_the_specs_budgets_and_the_models_defaults(tmp_path: Path) -> None:
    """`mai regress --benchmark SPEC` starts from the shapes pair's fields, not from its whole configuration: the
    spec's budgets and the given models' defaults apply, as for `mai run` (they were the pair's S 12 / R 160)."""
    from mai.cli import _parser
    from mai.cli.runs import regress_config
    from mai.config import DEFAULT_MAX_NEW_TOKENS, SHAPES_MAX_NEW_TOKENS, default_batch_sizes

    write_tsv(tmp_path / "colours.tsv")
    budgets = {"S": 3, "R": 6}
    spec = write_spec(tmp_path, name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice",
                      max_new_tokens=budgets)
    on_spec = regress_config(_parser().parse_args(["regress", "--benchmark", str(spec)]))
    assert on_spec.max_new_tokens == {**SHAPES_MAX_NEW_TOKENS, **budgets}  # the pair's models, the spec's budgets
    given = regress_config(_parser().parse_args(["regress", "--benchmark", str(spec), "--max-new-tokens", "R=9"]))
    assert given.max_new_tokens["R"] == 9 and given.max_new_tokens["S"] == 3
    tiny = regress_config(_parser().parse_args(["regress", "--small-model", "mai-tiny-small",
                                                "--large-model", "mai-tiny-large"]))
    assert tiny.max_new_tokens == DEFAULT_MAX_NEW_TOKENS  # models that are not the pair: the general defaults
    assert tiny.batch_sizes == default_batch_sizes(tiny.model_dump())
    assert regress_config(_parser().parse_args(["regress"])).run_name == "regression"


def image_rows(folder: Path, outside: Path) -> list[dict[str, Any]]:
    """A yes/no JSONL's rows naming images by path: inside, absolute, `..`, a link out, a URL, a list of two."""
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "red.png").write_bytes(png(COLOURS["red"]))
    (folder / "images" / "blue.png").write_bytes(png(COLOURS["blue"]))
    outside.mkdir()
    (outside / "secret.png").write_bytes(png(COLOURS["green"]))
    (folder / "images" / "link.png").symlink_to(outside / "secret.png")
    paths: list[Any] = ["images/red.png", str(outside / "secret.png"), f"../{outside.name}/secret.png",
                        "images/link.png", "https://example.com/red.png", ["images/red.png", "images/blue.png"]]
    return [{"id": f"q{i}", "image": path, "question": "Is it red?", "answer": "yes"} for i, path in enumerate(paths)]


def test_image_paths_stay_in_the_benchmarks_folder(tmp_path: Path) -> None:
    folder = tmp_path / "bench"
    rows = image_rows(folder, tmp_path / "elsewhere")
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = write_spec(folder, name="paths", data="rows.jsonl", format="jsonl", answer_kind="yes_no",
                      columns={"id": "id"})
    found = check_spec(load_spec(spec))
    errors = dict(found.errors)
    assert found.usable == 2 and found.images == 3  # q0, and q5 with its two images
    for sample_id in ("paths-q1", "paths-q2", "paths-q3"):
        assert "outside the benchmark's folder" in errors[sample_id] and "\n" not in errors[sample_id]
        assert "--data-root DIR on the command line" in errors[sample_id]
    assert "is an absolute path outside" in errors["paths-q1"]
    assert errors["paths-q4"].startswith("column 'image' holds the URL 'https://example.com/red.png': URLs are not "
                                         "read")
    # a data file outside the folder is refused when the spec is read; a wider data_root only with the user's opt-in
    outer = write_spec(folder / "sub", name="paths", data="../rows.jsonl", format="jsonl", answer_kind="yes_no")
    with pytest.raises(ConfigError, match=r"data '../rows.jsonl' is outside the benchmark's folder .*/bench/sub "
                                          r"\(allow a folder that holds the benchmark's files with --data-root DIR"):
        load_spec(outer)
    plain = load_spec(spec).version
    rooted = write_spec(folder, name="paths", data="rows.jsonl", format="jsonl", answer_kind="yes_no",
                        columns={"id": "id"}, data_root="..")  # the same file, rewritten
    with pytest.raises(ConfigError, match="a spec cannot widen where it reads"):
        load_spec(rooted)
    assert check_spec(load_spec(rooted, data_root=tmp_path)).usable == 5  # the user's choice: all but the URL
    assert load_spec(rooted, tmp_path).version == plain  # where the files may lie is no part of it


def test_check_reports_prompt_lengths_and_rows_over_the_context(home: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    long_row = ["6", base64.b64encode(png((0, 0, 0))).decode(), "Which? " * 30_000, "", *NAMES, "A", "warm"]
    write_tsv(tmp_path / "colours.tsv", extra=[long_row])
    spec = write_spec(tmp_path, name="colours", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice",
                      max_new_tokens={"R": 64})
    assert main(["--home", str(home), "benchmark", "check", str(spec)]) == 0
    report = capsys.readouterr().out
    assert "rows 7, usable 7, errors 0" in report
    assert "prompt tokens (S prompt, mai-tiny-small's tokenizer, images included): min " in report
    assert "rows over the context (with the output budgets): 1\n  colours-6: its S prompt for the " \
        in report
    assert main(["--home", str(home), "benchmark", "check", str(spec), "--json"]) == 0
    lengths = json.loads(capsys.readouterr().out)["prompts"]
    assert 20 < lengths["min"] <= lengths["median"] < 200 and lengths["context"] == 8192 < lengths["max"]
    assert [sample_id for sample_id, _ in lengths["over_context"]] == ["colours-6"]


def test_a_malformed_jsonl_line_keeps_its_own_error_and_id(tmp_path: Path) -> None:
    """Issue 50: a bad line's id is its position; a valid row whose explicit id is that number keeps its own."""
    (tmp_path / "red.png").write_bytes(png(COLOURS["red"]))
    good = {"image": "red.png", "question": "Is it red?", "answer": "yes"}
    lines = [json.dumps({**good, "index": 0}), "{broken", json.dumps({**good, "index": 1})]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    found = check_spec(load_spec(write_spec(tmp_path, name="h2", data="rows.jsonl", format="jsonl",
                                            answer_kind="yes_no")))
    assert found.usable == 2
    assert [(i, e.split(" (")[0]) for i, e in found.errors] == [("h2-1#row1", "line 2 is not a JSON object")]


@pytest.mark.parametrize(("fields", "message"), [
    ({"columns": ["question", "answer"]}, "columns must be a mapping (`field: value` lines under it), got list"),
    ({"prompt": "{question} {answer}"}, "prompt placeholder {answer} names the answer or an image column"),
    ({"prompt": "Look: {hint}"}, "prompt must show the row's question: put {question} in it"),
    ({"prompt": "{question} {options!r}"}, "prompt placeholder {options!r} must be a plain name"),
    ({"prompt": "{question", "answer_kind": "choice"}, "prompt: prompt is not a valid template"),
    ({"prompt": "{question}\n{options}", "answer_kind": "yes_no"}, "{options} applies only to answer_kind choice"),
    ({"max_new_tokens": {"Q": 5}}, "max_new_tokens has unknown prompt kinds ['Q']"),
    ({"data": "https://example.com/colours.tsv"}, "is a URL: URLs are not read"),
])
def test_new_spec_fields_say_what_to_change(tmp_path: Path, fields: dict[str, Any], message: str) -> None:
    write_tsv(tmp_path / "colours.tsv")
    spec = write_spec(tmp_path, **{"name": "colours", "data": "colours.tsv", "format": "vlmevalkit-tsv",
                                   "answer_kind": "choice", **fields})
    with pytest.raises(ConfigError) as raised:
        load_spec(spec)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_smaller_gaps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.tsv").write_bytes(b"")
    empty = load_spec(write_spec(tmp_path, name="e", data="empty.tsv", format="vlmevalkit-tsv", answer_kind="choice"))
    with pytest.raises(ConfigError, match=r"empty\.tsv: empty TSV file \(it needs a header line"):
        check_spec(empty)
    write_tsv(tmp_path / "colours.tsv")  # a prompt naming a column the data lacks fails before any row is read
    spec = load_spec(write_spec(tmp_path, name="c", data="colours.tsv", format="vlmevalkit-tsv", answer_kind="choice",
                                prompt="{question} ({source})"))
    with pytest.raises(ConfigError, match=r"prompt names 'source', which the data lacks"):
        check_spec(spec)
    assert main(["benchmarks"]) == 0
    listing = capsys.readouterr().out
    assert all(f"{field}:" in listing for field in ("description", "prompt", "max_new_tokens", "data_root"))


def test_the_demo_benchmark_puts_a_rows_hint_before_its_question() -> None:
    from mai.evals.demo import DemoBenchmark
    from mai.evals.loading import rows_to_samples

    row = {"index": 3, "question": "Which shape?", "hint": "Count the corners.", "A": "circle", "B": "square",
           "answer": "B", "category": "shape", "image": {"bytes": png(COLOURS["red"]), "path": None}}
    demo = DemoBenchmark()
    [sample] = rows_to_samples(demo, [row], lambda encoded: ("", "h"))
    assert demo.format_question(sample) == "Count the corners. Which shape?\nA. circle\nB. square"
