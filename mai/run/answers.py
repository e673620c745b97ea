"""Reading earlier stages' stored outputs back as parsed answers (shared by generation and routing)."""

from __future__ import annotations

from collections.abc import Sequence

from mai.evals.base import Benchmark
from mai.storage.generations import GenerationStore
from mai.types import ModelSpec, Role, Sample, StageAnswer, StageName, StageSpec


class StoreMismatch(RuntimeError):
    """An output the run was told exists is not in the store (e.g. the store was deleted but Prefect's
    result cache was not). The flow recomputes the stage when it sees this."""


def load_stage_answers(
    store: GenerationStore,
    benchmark: Benchmark,
    samples: Sequence[Sample],
    stage_maps: dict[StageName, dict[str, str]],
    stages: Sequence[StageSpec],
    models: dict[Role, ModelSpec],
) -> dict[StageName, dict[str, StageAnswer]]:
    by_id = {s.sample_id: s for s in samples}
    answers: dict[StageName, dict[str, StageAnswer]] = {}
    for stage in stages:
        if stage.name not in stage_maps:
            continue
        ids = {sid: gid for sid, gid in stage_maps[stage.name].items() if sid in by_id}
        if not stage.generates:  # a token selection: its text is what RT reads, it has no answer of its own
            answers[stage.name] = _selected_reasoning(store, models[stage.role], ids)
            continue
        rows = store.read(models[stage.role], stage.prompt_kind, ids.values(), ["text"])
        absent = [gid for gid in ids.values() if gid not in rows]
        if absent:
            raise StoreMismatch(f"{len(absent)} {stage.name} outputs are missing from the store")
        answers[stage.name] = {
            sid: StageAnswer(gid, rows[gid]["text"], benchmark.parse_answer(rows[gid]["text"], by_id[sid]))
            for sid, gid in ids.items()
        }
    return answers


def _selected_reasoning(store: GenerationStore, model: ModelSpec, ids: dict[str, str]) -> dict[str, StageAnswer]:
    from mai.storage.attention import read_selections

    rows = read_selections(store.home, model, ids.values())
    absent = [sel for sel in ids.values() if sel not in rows]
    if absent:
        raise StoreMismatch(f"{len(absent)} token selections are missing from the store")
    return {sid: StageAnswer(sel, rows[sel]["transferred_text"], None) for sid, sel in ids.items()}
