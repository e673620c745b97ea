"""Per-process engine registry: one engine per (model, backend), created lazily under a lock and reused
by every stage and shard of every run in the process. Tasks receive model specs, never engines."""

from __future__ import annotations

import threading

from mai.backends.base import BACKENDS, TRANSFORMERS_ATTENTION, Engine, EngineOptions
from mai.errors import ConfigError
from mai.identity import BackendIdentity
from mai.types import ModelSpec

_ENGINES: dict[tuple[ModelSpec, str, EngineOptions], Engine] = {}
_LOCK = threading.Lock()


def get_engine(model: ModelSpec, backend: str, options: EngineOptions | None = None) -> Engine:
    """`options` matter only to vLLM (which server); transformers has one engine per model whatever they are."""
    options = options if backend == "vllm" and options is not None else EngineOptions()
    with _LOCK:
        key = (model, backend, options)
        if key not in _ENGINES:
            _ENGINES[key] = _create(model, backend, options)
        return _ENGINES[key]


def _create(model: ModelSpec, backend: str, options: EngineOptions) -> Engine:
    if backend == "transformers":
        from mai.backends.transformers_backend import TransformersEngine

        return TransformersEngine(model)
    if backend == "vllm":
        from mai.backends.vllm_backend import VllmEngine

        return VllmEngine(model, options)
    raise ConfigError(f"unknown backend '{backend}': choose one of {BACKENDS}")


def backend_identity(backend: str, model: ModelSpec, options: EngineOptions) -> BackendIdentity:
    """The backend as it enters every generation's identity (mai.identity): the engine and its version, the
    transformers and torch that run it, and which image processor turns images into pixels. transformers picks the
    torchvision one wherever torchvision is installed (vLLM always has it) and the PIL one elsewhere; the two give
    pixels up to 0.017 apart, and a long greedy output can follow them."""
    if backend == "transformers":
        from importlib import metadata

        version = metadata.version("transformers")
        return BackendIdentity(backend="transformers", engine=f"transformers {version}", transformers=version,
                               torch=metadata.version("torch"), image_processor=in_process_image_processing(),
                               attention=TRANSFORMERS_ATTENTION)
    if backend == "vllm":
        from pathlib import Path

        from mai.backends.vllm_backend import backend_identity as vllm_identity

        return vllm_identity(model, options.url, options.env, Path(options.home or "."))
    raise ConfigError(f"unknown backend '{backend}': choose one of {BACKENDS}")


def in_process_image_processing() -> str:
    """'torchvision' or 'pil': the image processors transformers loads in this process (its own rule: torchvision
    whenever it can be imported), found without importing either."""
    from importlib.util import find_spec

    return "torchvision" if find_spec("torchvision") is not None else "pil"


def loaded_engines() -> list[Engine]:
    with _LOCK:
        return list(_ENGINES.values())


def clear_engines() -> None:
    """Drop every engine (tests use this to start from cold counters); vLLM engines stop their servers."""
    with _LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
    for engine in engines:
        close = getattr(engine, "close", None)
        if close is not None:
            close()
