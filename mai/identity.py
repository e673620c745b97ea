"""Content keys for stage outputs.

A generation is identified by a sha256 over canonical JSON of everything that can change its text:
stage code version, prompt template id and version, the benchmark's question formatting version,
model + revision + dtype, decoding parameters, the sample's content hash and the identities of the
upstream outputs it consumes. In float32 the backend is *not* part of it: there the backends are required
to produce identical greedy outputs (checked by the backend tests), so either may serve a stored output. In
bfloat16 / float16 they are not (vLLM and transformers differ, and so do versions of one), so there the backend
and its version (`backend`, e.g. "transformers 5.23.0 torch 2.13.0", "vllm 0.33.0") are part of it; float32
identities are exactly what they were.
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
    backend: str | None = None,
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
    if needs_backend(model):
        if not backend:
            raise ValueError(f"a {model.dtype} generation's identity needs its backend and version")
        payload["backend"] = backend
    return canonical_hash(payload)


def needs_backend(model: ModelSpec) -> bool:
    """Whether the backend (and its version) is part of this model's generation identities: outside float32."""
    return model.dtype != "float32"
