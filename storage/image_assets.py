"""Whether the store's image assets are there and whole: the images a run's samples name (`images/<2 hex>/<sha256>`,
written once by content hash: storage/samples.py `store_image`).

An image asset can be damaged outside mai (a disk error, a file deleted or overwritten by hand). A run that read one
would fail at its first model call over it, and with it every sample of the run; so before anything computes, each
image a usable sample names is checked (mai/run/prompt_limits.py), and a sample whose image is missing or damaged
becomes that run's recorded per-sample error, with the reason and what to run. `mai store verify` checks every
asset by hashing it and `--repair` moves a damaged one aside with the shard sets that name it, so the next run
materialises them again (writing the image again) and computes exactly the samples that could not run.

The exact check is the file's SHA-256 against its name. A run does not hash every image every time: a file whose
(size, mtime, ctime, inode) are those it had when it last hashed right is not hashed again (any write to a file
changes its ctime, which no user can set back; a copy or a replacement is another inode). The record of those
stats is one JSON file (`images/.checked.json`, rewritten whole through a temp file); a missing or unreadable
record hashes everything once. What it misses is what no stat shows: bytes that rot on the disk under unchanged
times, which `mai store verify` finds because it hashes every asset.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

from mai.files import write_atomically

CHECKED_FILE = ".checked.json"
# a file changed this recently may change again within the file system's clock tick with unchanged times: such a
# file is hashed again by the next run (git's "racily clean" rule; mai/evals/fingerprint_cache.py has the same)
RACY_WINDOW_NS = 2_000_000_000

# an asset's (size, mtime_ns, ctime_ns, inode) when it last hashed to its name
Stat = tuple[int, int, int, int]


def image_damage(path: Path, digest: str, checked: dict[str, Stat] | None = None) -> str | None:
    """Why the asset at `path` is not the image `digest` names (None: it is). With `checked` (digest -> the stats
    it had when it last hashed right), a file with the same stats is not hashed again, and one that hashes right is
    added to it."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return "missing from the store"
    except OSError as error:
        return f"unreadable ({error.strerror or error})"
    if not stat.S_ISREG(status.st_mode):
        return "not a file"
    now = (status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino)
    if checked is not None and checked.get(digest) == now:
        return None
    try:
        with open(path, "rb") as handle:
            actual = hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as error:
        return f"unreadable ({error.strerror or error})"
    if actual != digest:
        return f"damaged: its {status.st_size} bytes hash to {actual[:12]}..., not to its name"
    if checked is not None and max(status.st_mtime_ns, status.st_ctime_ns) < time.time_ns() - RACY_WINDOW_NS:
        checked[digest] = now
    return None


def damaged_images(images: Path, digests: Iterable[str]) -> dict[str, str]:
    """digest -> why its asset under `images` (the store's images folder) is missing or damaged, for the digests
    whose asset is not whole; each digest checked once, through the record of assets that hashed right before."""
    record = images / CHECKED_FILE
    checked = read_checked(record)
    known = dict(checked)
    damaged = {digest: reason for digest in dict.fromkeys(digests)
               if (reason := image_damage(asset_path(images, digest), digest, checked)) is not None}
    if checked != known:
        with suppress(OSError):  # a store that cannot be written: the next run hashes again, the answer is the same
            write_atomically(record, json.dumps({"images": checked}, separators=(",", ":")))
    return damaged


def asset_path(images: Path, digest: str) -> Path:
    """Where the asset of `digest` lies (storage/samples.py `store_image` writes it there)."""
    return images / digest[:2] / digest


def read_checked(record: Path) -> dict[str, Stat]:
    try:
        raw = json.loads(record.read_text())["images"]
        return {str(digest): (int(s[0]), int(s[1]), int(s[2]), int(s[3])) for digest, s in raw.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return {}  # no record yet, or one this version cannot read: hashing decides


def asset_files(images: Path) -> list[Path]:
    """Every file under the images folder where an asset can be (`<2 hex>/<name>`), dot files left out."""
    if not images.is_dir():
        return []
    return sorted(path for path in images.glob("*/*") if not path.name.startswith(".")
                  and not path.parent.name.startswith("."))
