"""Latency profiles (one file per named profile) and latency estimates of stored runs."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar, cast

from mai.errors import ConfigError
from mai.latency_estimate import Call, LatencyProfile, StageEstimate
from mai.storage.catalog import query
from mai.storage.parquet import read_rows, write_rows
from mai.storage.paths import Home
from mai.storage.rows import EstimateRow, LatencyProfileRow
from mai.types import STAGE_NAMES

_N = TypeVar("_N", int, float)

# a file name of its own: letters, digits, `.`, `_`, `+`, `-`; not starting with a dot (no `..`, no hidden file)
_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")


def check_name(name: str, what: str) -> str:
    """`name` when it can be a file name in the store, else a ConfigError: profile and estimate names become
    paths, so `../../x` would write outside the store."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{what} name {name!r} is not usable: use letters, digits and . _ + - "
                          "(not starting with a dot)")
    return name


def profile_path(home: Home, name: str) -> Path:
    return home.table_dir("latency_profiles") / f"{check_name(name, 'latency profile')}.parquet"


def write_profile(home: Home, name: str, rows: Sequence[LatencyProfileRow], replace: bool = False) -> Path:
    path = profile_path(home, name)
    if path.exists() and not replace:
        raise ConfigError(f"latency profile '{name}' exists: choose another name or pass --replace")
    now = datetime.now(UTC)
    return write_rows(path, [{**row, "profile_name": name, "created_at": now} for row in rows], "latency_profiles")


def read_profile(home: Home, name: str) -> LatencyProfile:
    path = profile_path(home, name)
    if not path.exists():
        raise ConfigError(f"no latency profile '{name}' (see `mai sql \"SELECT DISTINCT profile_name FROM "
                          "latency_profiles\"`)")
    # the columns an estimate reads, with the Parquet reader alone and no timestamp column (pyarrow imports pandas
    # for either: `mai estimate` stays a light command); a damaged file is named, not a traceback
    rows = cast("list[LatencyProfileRow]", read_rows([path], ["model", "input_tokens", "ttft_ms", "tokens_per_s"]))
    speeds = [r["tokens_per_s"] for r in rows if r["tokens_per_s"]]
    if not speeds:
        raise ConfigError(f"latency profile '{name}' has no decoding throughput")
    return LatencyProfile(name=name, model=rows[0]["model"], ttft_points=_ttft_points(rows),
                          tokens_per_s=sum(speeds) / len(speeds))


def _ttft_points(rows: list[LatencyProfileRow]) -> tuple[tuple[int, float], ...]:
    """(input tokens, TTFT in seconds) of the points that report a TTFT; a TTFT needs its input length."""
    return tuple((r["input_tokens"], r["ttft_ms"] / 1000.0) for r in rows
                 if r["ttft_ms"] is not None and r["input_tokens"] is not None)


def rows_from_csv(path: Path, hardware: str) -> list[LatencyProfileRow]:
    """Published numbers: columns model, input_tokens, ttft_ms and tokens_per_s (either may be blank on a
    row), optional image_resolution, image_tokens, query_tokens, output_tokens, decode_ms."""
    if not path.exists():
        raise ConfigError(f"CSV file '{path}' does not exist")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = {"model", "input_tokens", "ttft_ms", "tokens_per_s"} - set(reader.fieldnames or [])
        if missing:
            raise ConfigError(f"{path} lacks column(s) {sorted(missing)}")
        return [_csv_row(row, hardware, number) for number, row in enumerate(reader, start=2)]


def _csv_row(row: dict[str, str], hardware: str, line: int) -> LatencyProfileRow:
    def real(key: str) -> float | None:
        return _number(row, key, line, float)

    def whole(key: str) -> int | None:
        return _number(row, key, line, int)

    return {"model": row["model"], "backend": row.get("backend") or "published", "dtype": row.get("dtype") or "",
            "hardware": row.get("hardware") or hardware, "source": "imported",
            "image_resolution": whole("image_resolution"), "image_tokens": whole("image_tokens"),
            "query_tokens": whole("query_tokens"), "input_tokens": whole("input_tokens"),
            "output_tokens": whole("output_tokens"), "repeats": None, "ttft_ms": real("ttft_ms"),
            "decode_ms": real("decode_ms"), "tokens_per_s": real("tokens_per_s")}


def _number(row: dict[str, str], key: str, line: int, kind: type[_N]) -> _N | None:
    """The CSV cell as a number, None when blank; a ConfigError names the line and column of a bad one."""
    value = (row.get(key) or "").strip()
    try:
        return kind(value) if value else None
    except ValueError as error:
        raise ConfigError(f"line {line}: column '{key}' is not a number: '{value}'") from error


def read_run_calls(home: Home, run_id: str) -> list[Call]:
    """Every generation a run used, by stage, with its stored token counts; then, for sparse RT, each attention-capture
    prefill its selections read (stage `capture`): the large model over the same input as its RT call, no output, so
    equation 27 prices it as one TTFT at the capture's input length (the pass's own time is measured)."""
    check_name(run_id, "run")  # the id goes into the SQL text
    columns = ", ".join(f"gen_{stage}" for stage in STAGE_NAMES)
    sql = (f"SELECT r.stage, g.model, g.prompt_tokens, g.output_tokens FROM "
           f"(UNPIVOT (SELECT run_id, sample_id, {columns} FROM routes WHERE run_id = '{run_id}') "
           f"ON {columns} INTO NAME stage VALUE gen_id) r JOIN generations g USING (gen_id) ORDER BY r.stage, r.sample_id")
    _, rows = query(home, sql)
    _, captures = query(home, CAPTURE_CALLS.format(run_id=run_id))
    return [Call(stage=str(stage).removeprefix("gen_"), model=str(model), prompt_tokens=int(p), output_tokens=int(o))
            for stage, model, p, o in cast("list[tuple[str, str, int, int]]", rows + captures)]  # the SELECTs' types


# per sample that reached sparse RT, the prefill that captured the layer its selection read (speedup.sql counts
# the same passes' measured time), priced with the model of the RT call that read it
CAPTURE_CALLS = """
    SELECT 'capture' AS stage, model, prompt_tokens, 0 AS output_tokens FROM (
        SELECT DISTINCT g.model, a.prompt_tokens, a.capture_id
        FROM routes r
        JOIN generations g ON g.gen_id = r.gen_rt_large
        JOIN selections s ON s.selection_id = g.upstream_gen_id
        JOIN attention a ON a.capture_id = s.capture_id AND a.layer = s.layer
        WHERE r.run_id = '{run_id}')
    ORDER BY capture_id
"""


def write_estimate(home: Home, run_id: str, name: str, stages: list[StageEstimate]) -> Path:
    check_name(name, "estimate")
    rows: list[EstimateRow] = [
        {"run_id": run_id, "estimate_name": name, "stage": s.stage, "profile_name": s.profile, "calls": s.calls,
         "prompt_tokens": s.prompt_tokens, "output_tokens": s.output_tokens, "ttft_s": s.ttft_s,
         "decode_s": s.decode_s, "total_s": s.total_s} for s in stages]
    rows.append({"run_id": run_id, "estimate_name": name, "stage": "total", "profile_name": None,
                 "calls": sum(s.calls for s in stages), "prompt_tokens": sum(s.prompt_tokens for s in stages),
                 "output_tokens": sum(s.output_tokens for s in stages), "ttft_s": sum(s.ttft_s for s in stages),
                 "decode_s": sum(s.decode_s for s in stages), "total_s": sum(s.total_s for s in stages)})
    path = home.table_dir("estimates") / check_name(run_id, "run") / f"{check_name(name, 'estimate')}.parquet"
    return write_rows(path, rows, "estimates")
