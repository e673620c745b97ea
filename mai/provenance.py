"""What a run records about where and with what it ran, at run time, so that a report never has to guess it later:
each model's weights fingerprint, family and architecture (from the checkpoint's own config.json, read where the
run resolved it: a local directory, or the Hugging Face cache for a hub id), the machine (host, hardware) and its
load average at the start and the end of the run, and the command line that started it.

Why at run time: a report built later, on another machine or from another directory, cannot read a checkpoint
the run named by a relative path, and a hub id names no family at all. The families are the transformers
backend's own (`mai.backends.transformers_loading.family_of`, matched on the config's `model_type`), so the
report's "InternVL tables" and the engine that ran the model agree by construction."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from mai.backends.architectures import PREFIX as RANDOM
from mai.host import host_name
from mai.manifest import MachineRecord, ModelProvenance
from mai.types import ModelSpec

# what a model whose config.json cannot be read here is called (a hub id not in the local cache)
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Architecture:
    """What a checkpoint's config.json says it is."""

    model_type: str | None
    architectures: tuple[str, ...]


def checkpoint_config(model: ModelSpec) -> Path | None:
    """The checkpoint's config.json: in the directory of a local model, in the local Hugging Face cache for a hub
    id (never fetched: the run already checked the model when it was configured). None where the cache has none."""
    if model.local:
        return Path(model.name_or_path) / "config.json"
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model.name_or_path, "config.json", revision=model.revision)
    return Path(found) if isinstance(found, str) else None


def checkpoint_architecture(config_path: Path | None) -> Architecture | None:
    """What the checkpoint's config.json says it is; None where none can be read."""
    try:
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    return Architecture(str(config.get("model_type") or "") or None,
                        tuple(str(a) for a in config.get("architectures") or []))


def weights_fingerprint(model: ModelSpec, config_path: Path | None) -> str | None:
    """What names the exact weights: a local checkpoint's content fingerprint ('sha256:...', its revision), or
    for a hub id the commit its revision resolved to in the Hugging Face cache ('commit:<sha>': the cache keeps a
    commit's files in `snapshots/<commit>/`, and a branch name like 'main' moves). None where neither is known."""
    if model.local or model.name_or_path.startswith(RANDOM):  # a random model: its seeded init, its revision
        return model.revision
    snapshot = config_path.parent if config_path is not None else None
    return f"commit:{snapshot.name}" if snapshot is not None and snapshot.parent.name == "snapshots" else None


def family_of(architecture: Architecture | None) -> str:
    """The transformers backend's family for this config ('qwen-vl', 'internvl', 'untested'), or 'unknown'."""
    if architecture is None:
        return UNKNOWN
    from mai.backends.transformers_loading import family_of as backend_family  # no torch: it reads the config

    return backend_family(SimpleNamespace(model_type=architecture.model_type or "")).name


def model_provenance(model: ModelSpec) -> ModelProvenance:
    config_path = checkpoint_config(model)
    architecture = checkpoint_architecture(config_path)
    return {"name": model.identity_name, "name_or_path": model.name_or_path, "revision": model.revision,
            "weights": weights_fingerprint(model, config_path), "dtype": model.dtype, "family": family_of(architecture),
            "model_type": architecture.model_type if architecture else None,
            "architecture": architecture.architectures[0] if architecture and architecture.architectures else None}


def _cpu_name() -> str:
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _accelerators() -> list[str]:
    """The GPUs this process sees, named only where torch is already loaded (a cached run loads no model library:
    importing torch here would cost it seconds). A torch that another thread is still importing counts as not
    loaded: its half-built module has no `cuda` yet (the two MV1 steps of a worker's first shard start together)."""
    torch = sys.modules.get("torch")
    if torch is None or _still_importing(torch) or not torch.cuda.is_available():
        return []
    return [str(torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]


def _still_importing(module: object) -> bool:
    """Whether `module` is in sys.modules only because some thread is running its import: CPython marks the
    module's spec `_initializing` until the import ends (it is how `import` itself names a "partially initialized
    module")."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def hardware() -> str:
    """The machine in words: 'Intel Xeon ... x2 cores, 7.7 GiB; NVIDIA H100 80GB HBM3'."""
    memory = ""
    with suppress(ValueError, OSError, AttributeError):
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB"
    gpus = _accelerators()
    return f"{_cpu_name()} x{os.cpu_count()} cores{memory}" + (f"; {', '.join(gpus)}" if gpus else "")


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (empty where the OS has none)."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return []


def machine(load_at_start: list[float]) -> MachineRecord:
    """The machine a run was timed on, with its load when the run started (given) and now (its end)."""
    return {"host": host_name(), "hardware": hardware(), "cpu_count": os.cpu_count() or 0,
            "load_at_start": load_at_start, "load_at_end": load_average()}


def command_line() -> str:
    """How this process was started: the `mai` command, a worker's, a test runner's."""
    return shlex.join([Path(sys.argv[0]).name if sys.argv else "python", *sys.argv[1:]])
