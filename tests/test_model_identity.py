"""What names a model in every identity (mai/config.py `resolve_model`): a local checkpoint by every byte of its
files, a hub model by the commit its revision resolves to in the Hugging Face cache. No model is loaded here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mai import config
from mai.config import fingerprint_directory, resolve_model
from mai.evals.fingerprint_cache import FingerprintCache

REPO = Path(__file__).resolve().parents[1]
SHIPPED_CONFIG = REPO / "mai" / "assets" / "models" / "mai-shapes-small" / "config.json"  # a Qwen3-VL checkpoint's
BIG = 80 * 2**20  # a weight file over the 64 MiB that only its first and last MiB once named


def checkpoint(directory: Path, middle: bytes) -> Path:
    """A checkpoint directory whose one big weight file holds `middle` at its centre, zeros elsewhere."""
    directory.mkdir(parents=True)
    shutil.copyfile(SHIPPED_CONFIG, directory / "config.json")
    with open(directory / "model.safetensors", "wb") as weights:
        weights.truncate(BIG)
        weights.seek(BIG // 2)
        weights.write(middle)
    return directory


def test_checkpoints_that_differ_only_inside_a_big_weight_file_are_two_models(tmp_path: Path) -> None:
    """A fine-tune that kept its embeddings and head (the first and last MiB of its weight file) and the file's size
    is another model: it was named by its size and those two MiB, and its outputs were taken for the other's."""
    base = resolve_model(str(checkpoint(tmp_path / "base", b"base weights")), "main", "float32", tmp_path)
    tuned = resolve_model(str(checkpoint(tmp_path / "tuned", b"tuned weights")), "main", "float32", tmp_path)
    assert base.revision.startswith("sha256:") and tuned.revision.startswith("sha256:")
    assert base.revision != tuned.revision
    # the same bytes elsewhere are the same model
    again = resolve_model(str(checkpoint(tmp_path / "copy", b"base weights")), "main", "float32", tmp_path)
    assert again.revision == base.revision


def test_a_checkpoint_is_hashed_once_per_version_of_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """The store's cache gives a later process the fingerprint without reading the weights again while every file
    keeps its size and times; a rewritten file is hashed again, and gives its own fingerprint."""
    model = checkpoint(tmp_path / "model", b"version 1")
    cache = FingerprintCache(tmp_path / "fingerprints.json", racy_window_ns=0)  # files written just now count
    first = fingerprint_directory(model, cache)
    monkeypatch.setattr(config, "_FINGERPRINTS", {})  # a new process

    def unread(*_: object) -> str:
        raise AssertionError("the weights were read again")

    with monkeypatch.context() as patched:
        patched.setattr(config, "_hash_files", unread)
        assert fingerprint_directory(model, cache) == first
    with open(model / "model.safetensors", "r+b") as weights:  # the same size, another byte in the middle
        weights.seek(BIG // 2)
        weights.write(b"version 2")
    assert fingerprint_directory(model, cache) != first


def hub_cache(root: Path, repo_id: str, commits: list[str]) -> Path:
    """A Hugging Face cache holding `commits` of `repo_id`'s config.json, as the hub client lays it out."""
    folder = root / f"models--{repo_id.replace('/', '--')}"
    for commit in commits:
        (folder / "snapshots" / commit).mkdir(parents=True)
        shutil.copyfile(SHIPPED_CONFIG, folder / "snapshots" / commit / "config.json")
    (folder / "refs").mkdir()
    return folder


def test_a_hub_model_is_named_by_the_commit_its_revision_resolves_to(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`main` moves: a model at `main` was named `main` whichever commit the cache held, so a store reused the
    outputs of the old weights after the cache moved on. It is now named (and loaded) by the commit the cache
    resolves `main` to; a commit given is that commit."""
    from huggingface_hub import constants

    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # tests/conftest.py: the cache alone answers
    old, new = "a" * 40, "b" * 40
    folder = hub_cache(tmp_path / "hub", "someone/vl-model", [old, new])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    (folder / "refs" / "main").write_text(old)
    assert resolve_model("someone/vl-model", "main", "float32", tmp_path).revision == old
    (folder / "refs" / "main").write_text(new)  # the cache updated: `main` is another commit now
    assert resolve_model("someone/vl-model", "main", "float32", tmp_path).revision == new
    assert resolve_model("someone/vl-model", old, "float32", tmp_path).revision == old
