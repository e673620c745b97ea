"""A local dataset's fingerprint read from the store's cache is the one hashing gives, and any change of a file
(content, size, times, an added or removed file) hashes the data again (mai/evals/fingerprint_cache.py)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from mai.evals.fingerprint_cache import FingerprintCache
from mai.evals.loading import data_fingerprint, resolve_source


def make_dataset(root: Path) -> Path:
    data = root / "data"
    (data / "test").mkdir(parents=True)
    (data / "test" / "test-00000-of-00001.parquet").write_bytes(b"rows" * 100)
    (data / "images").mkdir()
    for index in range(5):
        (data / "images" / f"{index}.png").write_bytes(bytes([index]) * 64)
    (data / ".gitattributes").write_text("*.parquet filter=lfs\n")
    return data


def hashed_by_hand(data: Path) -> str:
    """The fingerprint as resolve_source makes it: every file's relative name and content hash (what the cache
    keeps), with the split read (`test`) and no config."""
    digest = hashlib.sha256()
    for file in sorted(p for p in data.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(data)).encode())
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return data_fingerprint(digest.hexdigest(), "test", None)


def fingerprint(data: Path, cache: FingerprintCache | None) -> str:
    return resolve_source(str(data), "test", None, None, cache).fingerprint


def no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Path) -> bytes:
        raise AssertionError(f"{self} was read: the cached fingerprint was not used")

    monkeypatch.setattr(Path, "read_bytes", refuse)


def test_the_cached_fingerprint_is_the_hashed_one_and_no_file_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_dataset(tmp_path)
    cache = FingerprintCache(tmp_path / "store" / ".fingerprints.json", racy_window_ns=0)
    expected = hashed_by_hand(data)
    assert fingerprint(data, None) == expected
    assert fingerprint(data, cache) == expected  # hashed, and kept
    kept = json.loads(cache.path.read_text())["datasets"][str(data.resolve())]["fingerprint"]
    assert data_fingerprint(kept, "test", None) == expected
    with monkeypatch.context() as patched:
        no_reads(patched)
        assert fingerprint(data, cache) == expected


def test_a_single_parquet_file_is_cached_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_dataset(tmp_path) / "test" / "test-00000-of-00001.parquet"
    cache = FingerprintCache(tmp_path / "fingerprints.json", racy_window_ns=0)
    expected = fingerprint(data, None)
    assert fingerprint(data, cache) == expected
    no_reads(monkeypatch)
    assert fingerprint(data, cache) == expected


def rewrite_same_size(file: Path, content: bytes, mtime_ns: int) -> None:
    assert len(content) == file.stat().st_size
    stat = file.stat()
    file.write_bytes(content)
    os.utime(file, ns=(stat.st_atime_ns, mtime_ns))


@pytest.mark.parametrize("change", ["same size, new mtime", "same size, old mtime restored", "grown", "added",
                                    "removed", "renamed"])
def test_any_changed_file_changes_the_fingerprint(tmp_path: Path, change: str) -> None:
    data = make_dataset(tmp_path)
    cache = FingerprintCache(tmp_path / "fingerprints.json", racy_window_ns=0)
    before = fingerprint(data, cache)
    image = data / "images" / "3.png"
    old_mtime = image.stat().st_mtime_ns
    if change == "same size, new mtime":
        rewrite_same_size(image, b"\xff" * 64, old_mtime + 1_000_000_000)
    elif change == "same size, old mtime restored":  # as `cp -p` or an unpacked archive: only the ctime moves
        rewrite_same_size(image, b"\xff" * 64, old_mtime)
    elif change == "grown":
        image.write_bytes(b"\x03" * 65)
    elif change == "added":
        (data / "images" / "5.png").write_bytes(b"\x05" * 64)
    elif change == "removed":
        image.unlink()
    else:
        image.rename(data / "images" / "9.png")
    after = fingerprint(data, cache)
    assert after != before
    assert after == hashed_by_hand(data) == fingerprint(data, None)


def test_files_written_just_now_are_not_trusted_by_their_times(tmp_path: Path) -> None:
    """A file written within the file system clock's tick of the listing could change again unseen: not cached."""
    data = make_dataset(tmp_path)
    cache = FingerprintCache(tmp_path / "fingerprints.json")  # the default window: the files are seconds old
    assert fingerprint(data, cache) == hashed_by_hand(data)
    assert not cache.path.exists()


@pytest.mark.parametrize("content", ["", "not json", '{"datasets": []}', '{"datasets": {"x": {"listing": 3}}}',
                                     '{"other": 1}'])
def test_an_unreadable_cache_means_hashing(tmp_path: Path, content: str) -> None:
    data = make_dataset(tmp_path)
    cache = FingerprintCache(tmp_path / "fingerprints.json", racy_window_ns=0)
    cache.path.write_text(content)
    assert fingerprint(data, cache) == hashed_by_hand(data)
    assert str(data.resolve()) in json.loads(cache.path.read_text())["datasets"]  # rewritten whole


def test_the_cache_file_inside_the_data_is_not_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--data` naming the store's datasets folder: the cache kept there is no file of the dataset."""
    data = make_dataset(tmp_path)
    expected = hashed_by_hand(data)
    cache = FingerprintCache(data / ".fingerprints.json", racy_window_ns=0)
    assert fingerprint(data, cache) == expected
    assert cache.path.exists()
    assert fingerprint(data, cache) == expected
    monkeypatch.chdir(tmp_path)  # the data named by a relative path: the cache is still known as its own file
    assert resolve_source("data", "test", None, None, cache).fingerprint == expected
