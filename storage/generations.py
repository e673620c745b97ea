"""The content-addressed generation store: one immutable Parquet file per generated batch, grouped in
directories per (model, prompt kind). A stage asks which identities are missing and writes only those."""

from __future__ import annotations

import functools
import threading
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

import pyarrow as pa
import pyarrow.compute as pc

from mai.answers import extract_bracketed
from mai.identity import BackendIdentity
from mai.storage.parquet import arrow_array, read_columns
from mai.storage.partitions import Partition, table_files, write_part
from mai.storage.paths import Home
from mai.storage.rows import GenerationRow
from mai.storage.tables import table_named
from mai.types import GenRequest, GenResult, ModelSpec, PromptKind

GENERATIONS_TABLE = table_named("generations")


class GenerationContext(TypedDict):
    """The columns of a batch's rows that come from its run, not from the request or the result."""

    benchmark: str
    backend: BackendIdentity
    run_id: str
    host: str      # the machine that computes the batch (mai.host), and its hardware in words (mai.provenance)
    hardware: str


class GenerationStore:
    """Files never change once written, so the ids known per directory are cached (as one Arrow array: no
    Python object per id) and only files not seen before are read on the next lookup."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._known: dict[Path, tuple[set[Path], pa.Array]] = {}
        self._lock = threading.Lock()

    def directory(self, model: ModelSpec, kind: PromptKind) -> Path:
        return self.home.generations / model.slug / kind

    def _ids(self, model: ModelSpec, kind: PromptKind) -> pa.Array:
        directory = self.directory(model, kind)
        with self._lock:
            current = set(Partition(self.home, directory).files())
            seen_files, ids = self._known.get(directory, (set(), arrow_array([], pa.string())))
            if seen_files - current:  # a compaction replaced files (or they were deleted): read afresh
                seen_files, ids = set(), arrow_array([], pa.string())
            new_files = sorted(current - seen_files)
            if new_files:
                table = read_columns(new_files, ["gen_id"])
                ids = pa.concat_arrays([ids, *table.column("gen_id").cast(pa.string()).chunks])
                seen_files = seen_files | set(new_files)
            self._known[directory] = (seen_files, ids)
            return ids

    def known_among(self, model: ModelSpec, kind: PromptKind, gen_ids: Collection[str]) -> set[str]:
        """The ids of `gen_ids` that the store holds (asked through storage/stored.py `stored_among`). Reads only
        the id column of the partition's files it has not seen, and compares in Arrow."""
        wanted = arrow_array(list(dict.fromkeys(gen_ids)), pa.string())
        if not len(wanted):
            return set()
        found = pc.filter(wanted, pc.is_in(wanted, value_set=self._ids(model, kind)))
        return set(found.to_pylist())

    def write(
        self, model: ModelSpec, kind: PromptKind, requests: dict[str, GenRequest], results: list[GenResult],
        context: GenerationContext,
    ) -> Path:
        now = datetime.now(UTC)
        rows = [_row(model, kind, requests[r.gen_id], r, context, now) for r in results]
        return write_part(self.home, self.directory(model, kind), rows, "generations")

    def read(self, model: ModelSpec, kind: PromptKind, gen_ids: Iterable[str], columns: list[str]
             ) -> dict[str, GenerationRow]:
        """Rows by gen_id, with `gen_id` and `columns` (the first copy if a concurrent run wrote the same
        identity twice)."""
        wanted = list(dict.fromkeys(gen_ids))
        files = Partition(self.home, self.directory(model, kind)).files()
        if not wanted or not files:
            return {}
        table = read_columns(files, ["gen_id", *columns], key="gen_id", wanted=wanted)
        rows: list[GenerationRow] = table.to_pylist()  # pyarrow is untyped: name the type it returns
        found: dict[str, GenerationRow] = {}
        for row in rows:
            found.setdefault(row["gen_id"], row)
        return found


@functools.cache
def shared_store(home: str) -> GenerationStore:
    """One store object per root and process, so that its index of known ids is read once and shared by the
    parent's lookup of stored shards, the steps and the manifest."""
    return GenerationStore(Home.at(home))


def read_texts(home: Home, gen_ids: Iterable[str]) -> dict[str, str]:
    """Output texts by gen_id from anywhere in the store (for re-scoring, where the model is not known)."""
    wanted = list(dict.fromkeys(g for g in gen_ids if g))
    files = table_files(home, GENERATIONS_TABLE)
    if not wanted or not files:
        return {}
    table = read_columns(files, ["gen_id", "text"], key="gen_id", wanted=wanted)
    return {row["gen_id"]: row["text"] for row in table.to_pylist()}


def count_computed_by_run(home: Home, run_id: str, directories: Iterable[Path]) -> int:
    """How many distinct identities this run computed (every other output it used was reused). `directories`:
    the partitions the run used; only their `gen_id` and `run_id` columns are read."""
    files = [f for d in directories for f in Partition(home, d).files()]
    if not files:
        return 0
    table = read_columns(files, ["gen_id", "run_id"], key="run_id", wanted=[run_id])
    return len(set(table.column("gen_id").to_pylist()))


def _row(
    model: ModelSpec, kind: PromptKind, request: GenRequest, result: GenResult, context: GenerationContext,
    now: datetime,
) -> GenerationRow:
    backend = context["backend"]
    return {
        "gen_id": result.gen_id, "sample_id": request.sample_id, "benchmark": context["benchmark"],
        "model": model.identity_name, "model_revision": model.revision, "dtype": model.dtype,
        "prompt_kind": kind, "template": request.template, "upstream_gen_id": request.upstream_gen_id,
        "max_new_tokens": request.decoding.max_new_tokens, "min_new_tokens": request.decoding.min_new_tokens,
        "prompt_text": request.prompt.text, "text": result.text, "output_token_ids": list(result.token_ids),
        "answer_span": extract_bracketed(result.text),
        "prompt_tokens": result.prompt_tokens, "output_tokens": result.output_tokens,
        "finish_reason": result.finish_reason, "ttft_s": result.ttft_s, "decode_s": result.decode_s,
        "wall_s": result.wall_s, "batch_size": result.batch_size, "backend": backend.backend,
        "run_id": context["run_id"], "created_at": now, "cached_prompt_tokens": result.cached_prompt_tokens,
        "engine": backend.engine, "transformers_version": backend.transformers, "torch_version": backend.torch,
        "image_processor": backend.image_processor, "attention_implementation": backend.attention,
        "greedy": request.decoding.greedy, "backend_identity": backend.text,
        "host": context["host"], "hardware": context["hardware"], "device": result.device, "timing_engine": result.engine,
        "load_start": result.load_start, "load_end": result.load_end,
    }
