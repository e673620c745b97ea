"""The fingerprints of local datasets, kept between runs so that unchanged data is not hashed again.

A local dataset's fingerprint (mai.evals.loading.resolve_source) is the SHA-256 of every file's name and content: for
the shapes split, 1308 files, 0.3-0.6 s of every run on the 2-core machine, even a run answered wholly from the store.
The cache keeps, per dataset location, each file's (relative name, size, mtime_ns, ctime_ns) and the fingerprint they
gave; the same listing again means the same files, so the fingerprint is reused. Any change of a file's size or
times (a rewrite of the same size included: it sets both times), an added or a removed file, gives another listing,
and the data is hashed again. The cache changes nothing but the time: what it returns is always what hashing gave.

One JSON file (the shell names it: the store's layout is not the core's business), rewritten whole through a temp
file and `os.replace`, so a reader sees the old or the new file, never half of one. A missing, unreadable or
malformed file is an empty cache (the data is hashed); a store that cannot be written is hashed every run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mai.files import write_atomically

# A file written within this many seconds of the hash may be written again within the same tick of the file
# system's clock (1-2 s on some file systems, ~4 ms on ext4), leaving its size and times unchanged: such a listing is
# not cached, so the next run hashes again (git's "racily clean" entries, the same rule).
RACY_WINDOW_NS = 2_000_000_000
# locations remembered at most (the oldest entry goes first): the file stays small however many datasets a store saw
MAX_ENTRIES = 64

# one file's (name relative to the dataset, size, mtime_ns, ctime_ns)
FileStat = tuple[str, int, int, int]


@dataclass(frozen=True)
class CachedFingerprint:
    listing: tuple[FileStat, ...]
    fingerprint: str


def file_stats(named: list[tuple[str, Path]]) -> tuple[FileStat, ...]:
    """The listing of (name, file) pairs, in their order."""
    stats = []
    for name, file in named:
        stat = file.stat()
        stats.append((name, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns))
    return tuple(stats)


@dataclass(frozen=True)
class FingerprintCache:
    """The fingerprints of local datasets by location, in the JSON file `path`."""

    path: Path
    racy_window_ns: int = RACY_WINDOW_NS

    def lookup(self, location: str, listing: tuple[FileStat, ...]) -> str | None:
        """The fingerprint stored for `location` if its files still have exactly this listing, else None."""
        entry = self._entries().get(location)
        return entry.fingerprint if entry is not None and entry.listing == listing else None

    def store(self, location: str, listing: tuple[FileStat, ...], fingerprint: str, listed_at_ns: int) -> bool:
        """Remember `fingerprint` for `location` (hashed from files with `listing`, listed at
        `listed_at_ns`); False when it is not kept: a file changed too recently to trust its times, or the store's
        folder cannot be written (the next run hashes again; the fingerprint itself is right either way)."""
        newest = max((max(mtime, ctime) for _, _, mtime, ctime in listing), default=0)
        if newest >= listed_at_ns - self.racy_window_ns:
            return False
        entries = self._entries()
        entries.pop(location, None)  # re-inserted last: the most recently used location is the last one dropped
        entries[location] = CachedFingerprint(listing, fingerprint)
        while len(entries) > MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        try:
            self._write(entries)
        except OSError:
            return False
        return True

    def _entries(self) -> dict[str, CachedFingerprint]:
        try:
            raw = json.loads(self.path.read_text())
            return {location: CachedFingerprint(_listing(entry["listing"]), str(entry["fingerprint"]))
                    for location, entry in raw["datasets"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}  # no cache yet, or one this version cannot read: hashing decides

    def _write(self, entries: dict[str, CachedFingerprint]) -> None:
        document = {"datasets": {location: {"fingerprint": entry.fingerprint, "listing": entry.listing}
                                 for location, entry in entries.items()}}
        write_atomically(self.path, json.dumps(document, separators=(",", ":")))


def _listing(raw: list[list[object]]) -> tuple[FileStat, ...]:
    return tuple((str(name), int(str(size)), int(str(mtime)), int(str(ctime))) for name, size, mtime, ctime in raw)
