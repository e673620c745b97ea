"""Every file a benchmark's rows make the loader read beyond its data files (an image named by path), recorded while
it reads, so that a materialised sample set is identified by everything it read (mai/evals/loading.py `DataSource`).

A data file's content is hashed before anything is read (`resolve_source`); the files the rows name are known only
once the rows are read. So the loader reads them through `read_input_file`, the one way a loader opens a file by
path, which records each file's name (relative to the data's folder, so a moved folder keeps its identity), the
SHA-256 of what it read (None: it could not be read, which is a sample's recorded error and changes once the file
appears) and the first row that read it (a smaller slice of the same data read only the files of its rows). The
store keeps the record with the sample set; a later run reuses the set only while each recorded file still hashes
the same (`digest_now`: by its size and times where they are unchanged, as the data files' fingerprints are).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from mai.evals.fingerprint_cache import FileStat, FingerprintCache


@dataclass(frozen=True)
class FileRead:
    """One file a slice of rows read: its name relative to the data's folder, the SHA-256 of its bytes (None: it
    could not be read) and the first row (0-based, in data order) that read it."""

    name: str
    sha256: str | None
    row: int


@dataclass
class ReadRecorder:
    """The files read while the rows of one data source become samples (`recording_reads`)."""

    folder: Path
    row: int = 0  # the row being converted (`rows_to_samples` moves it on)
    reads: dict[str, FileRead] = field(default_factory=dict)

    def record(self, path: Path, sha256: str | None) -> None:
        name = os.path.relpath(path, self.folder)
        if name not in self.reads:
            self.reads[name] = FileRead(name, sha256, self.row)

    def files(self) -> tuple[FileRead, ...]:
        return tuple(sorted(self.reads.values(), key=lambda read: read.name))


_RECORDER: ContextVar[ReadRecorder | None] = ContextVar("mai_read_recorder", default=None)


@contextmanager
def recording_reads(folder: Path) -> Iterator[ReadRecorder]:
    """Records every `read_input_file` of this context, named relative to `folder` (the data's folder)."""
    recorder = ReadRecorder(folder)
    token = _RECORDER.set(recorder)
    try:
        yield recorder
    finally:
        _RECORDER.reset(token)


def at_row(index: int) -> None:
    """The loader is converting row `index` now (what the next reads are recorded against)."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.row = index


def read_input_file(path: Path) -> bytes:
    """The bytes of a file a row names, recorded (an OSError is recorded as an unreadable file, then raised)."""
    recorder = _RECORDER.get()
    try:
        content = path.read_bytes()
    except OSError:
        if recorder is not None:
            recorder.record(path, None)
        raise
    if recorder is not None:
        recorder.record(path, hashlib.sha256(content).hexdigest())
    return content


def files_digest(files: Sequence[FileRead]) -> str:
    """The identity of what the files held: SHA-256 over each name and content hash, in name order; "" for no
    file (a set that read nothing beyond its data keeps the data's fingerprint)."""
    if not files:
        return ""
    digest = hashlib.sha256()
    for read in sorted(files, key=lambda r: r.name):
        digest.update(read.name.encode() + b"\0" + (read.sha256 or "unreadable").encode() + b"\n")
    return digest.hexdigest()


def up_to(files: Sequence[FileRead], limit: int | None) -> tuple[FileRead, ...]:
    """The files the first `limit` rows read (None: every row)."""
    return tuple(read for read in files if limit is None or read.row < limit)


def digest_now(folder: Path, files: Sequence[FileRead], cache: FingerprintCache | None = None) -> str:
    """`files_digest` of the named files as they are now: a file that changed, appeared or went gives another
    digest. From `cache` while every file has the size and times it had when it was last hashed."""
    if not files:
        return ""
    listed_at = time.time_ns()
    listing = tuple(_stat(folder, read.name) for read in files)
    key = f"files-read:{folder.resolve()}:{hashlib.sha256(' '.join(r.name for r in files).encode()).hexdigest()}"
    if cache is not None and (known := cache.lookup(key, listing)) is not None:
        return known
    digest = files_digest([FileRead(read.name, _sha256(folder / read.name), read.row) for read in files])
    if cache is not None and all(size >= 0 for _, size, _, _ in listing):
        cache.store(key, listing, digest, listed_at)
    return digest


def _stat(folder: Path, name: str) -> FileStat:
    try:
        stat = (folder / name).stat()
    except OSError:
        return (name, -1, 0, 0)  # missing or unreadable: never taken from the cache
    return (name, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
