"""What a run records about each model (mai.provenance) and how the report and `mai compare` show it: the weights
fingerprint is a local checkpoint's content fingerprint, and for a hub id the snapshot commit its revision resolved
to in the Hugging Face cache. The cache here is a real directory in huggingface_hub's own layout
(models--owner--name/refs/main, snapshots/<commit>/config.json), read by huggingface_hub itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from mai.config import resolve_model
from mai.dashboards.provenance import Provenance
from mai.provenance import model_provenance
from mai.storage.rows import RunRow
from mai.types import ModelSpec

HUB_ID = "OpenGVLab/InternVL3_5-8B-HF"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
INTERNVL_CONFIG = {"model_type": "internvl", "architectures": ["InternVLForConditionalGeneration"]}


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An HF cache holding one snapshot of HUB_ID (its config.json only), with 'main' pointing at it."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "config.json").write_text(json.dumps(INTERNVL_CONFIG))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # huggingface_hub read the variable at import
    return cache


def test_a_hub_id_records_the_snapshot_commit_its_revision_resolved_to(hub_cache: Path) -> None:
    recorded = model_provenance(ModelSpec(HUB_ID))  # at the branch 'main', as runs stored before named it
    assert (recorded["revision"], recorded["weights"]) == ("main", f"commit:{COMMIT}")
    assert (recorded["family"], recorded["architecture"]) == ("internvl", "InternVLForConditionalGeneration")
    assert model_provenance(ModelSpec(HUB_ID, revision=COMMIT))["weights"] == f"commit:{COMMIT}"  # pinned
    missing = model_provenance(ModelSpec("OpenGVLab/not-cached"))
    assert (missing["weights"], missing["family"]) == (None, "unknown")

    run = cast(RunRow, {"run_id": "r", "config_json": "{}", "versions_json": "{}", "backend": "transformers",
                        "benchmark": "demo", "small_model": None, "large_model": HUB_ID, "git_commit": None,
                        "dataset_fingerprint": "sha256:data", "n_samples": 4,
                        "provenance_json": json.dumps({"models": {"large": recorded,
                                                                  "small": missing}})})
    shown = Provenance.of(run).revisions
    assert f"{HUB_ID}@main (weights commit:{COMMIT}; internvl, InternVLForConditionalGeneration)" in shown
    assert "OpenGVLab/not-cached@main (weights not recorded; unknown)" in shown


def test_a_local_checkpoint_records_its_content_fingerprint(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(INTERNVL_CONFIG))
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    model = resolve_model(str(checkpoint), "main", "float32", tmp_path / "models")
    recorded = model_provenance(model)
    assert recorded["revision"].startswith("sha256:") and recorded["weights"] == recorded["revision"]
    assert recorded["name"] == "ckpt" and recorded["family"] == "internvl"


def test_the_machine_is_named_while_another_thread_still_imports_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's first shard starts its two MV1 steps together: one names the machine while the other is still
    importing torch, whose half-built module (as CPython keeps it in sys.modules during the import) has no `cuda`.
    The machine is then named without GPUs rather than failing the step."""
    import importlib.util
    import sys

    from mai.provenance import hardware

    spec = importlib.util.spec_from_loader("torch", loader=None)
    assert spec is not None
    half_built = importlib.util.module_from_spec(spec)
    spec._initializing = True  # type: ignore[attr-defined]  # what importlib sets until the module's code has run
    monkeypatch.setitem(sys.modules, "torch", half_built)
    assert " cores" in hardware() and ";" not in hardware()
