"""From (stage, samples) to identified generation requests. Pure: prompts and keys only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mai.evals.base import Benchmark
from mai.identity import generation_id
from mai.prompts import build_prompt, template_id
from mai.types import Decoding, GenRequest, ModelSpec, Sample, StageAnswer, StageSpec


def build_request(
    stage: StageSpec,
    sample: Sample,
    benchmark: Benchmark,
    model: ModelSpec,
    decoding: Decoding,
    upstream: StageAnswer | None,
    backend: str | None,
) -> GenRequest:
    """The identity covers the template, the question formatting, the model, the decoding, the sample,
    the upstream generation (whose own identity determines its text) and the backend that computes it
    (`backend`: engine, versions and image processor; required, mai.identity)."""
    if stage.upstream is not None and upstream is None:
        raise ValueError(f"stage {stage.name} of {sample.sample_id} needs its upstream {stage.upstream} output")
    style = benchmark.answer_style(sample)
    rt_template = benchmark.rt_template(sample)
    prompt = build_prompt(
        benchmark.format_question(sample), sample.image_paths, stage.prompt_kind, style, rt_template,
        upstream.text if upstream else None,
    )
    template = template_id(stage.prompt_kind, style, rt_template)
    gen_id = generation_id(
        model=model,
        template=template,
        benchmark=benchmark.name,
        benchmark_version=benchmark.version,
        decoding=decoding,
        sample_hash=sample.content_hash,
        upstream=(upstream.gen_id,) if upstream else (),
        backend=backend,
    )
    return GenRequest(
        gen_id=gen_id, sample_id=sample.sample_id, prompt=prompt, decoding=decoding, template=template,
        upstream_gen_id=upstream.gen_id if upstream else None,
    )


def build_requests(
    stage: StageSpec,
    samples: Sequence[Sample],
    benchmark: Benchmark,
    model: ModelSpec,
    decoding: Decoding,
    upstream: Mapping[str, StageAnswer],
    backend: str | None,
) -> list[GenRequest]:
    return [build_request(stage, s, benchmark, model, decoding, upstream.get(s.sample_id), backend) for s in samples]
