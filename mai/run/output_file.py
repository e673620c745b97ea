"""Where a command may write a file the user names (`mai report --out`): a regular file outside the store's own
files, written whole or not at all."""

from __future__ import annotations

import stat
from pathlib import Path

from mai.errors import ConfigError
from mai.storage.paths import Home

# the store root's own folders: nothing a user names is ever written into them
_MANAGED = ("store", "models", "datasets", "images", "locks", "prefect-results")


def checked_output(home: Home, out: Path, suffix: str) -> Path:
    """`out` (absolute) when writing it can harm nothing: a new path, or an existing regular file (a symbolic link,
    /dev/stdout included, a directory, a device such as /dev/full or /dev/null, a FIFO or a socket is refused); inside the
    store root only a `suffix` file outside the store's own folders (a previous report, say), never the catalog
    or anything the pipeline reads. A ConfigError says what to change."""
    target = Path(out).expanduser().absolute()
    if target.is_symlink():  # the report is renamed into place: that replaces the link itself, wherever it points
        raise ConfigError(f"--out {out} is a symbolic link: name the file it points to, or write to stdout with "
                          f"--out -")
    if target.exists():
        try:
            mode = target.stat().st_mode
        except OSError as error:
            raise ConfigError(f"--out {out}: cannot be checked ({error.strerror or error})") from error
        if not stat.S_ISREG(mode):
            raise ConfigError(f"--out {out} is {_kind(mode)}, not a regular file: name a file (such as report{suffix})")
    resolved = target.resolve()
    root = home.root.expanduser().absolute().resolve()
    if resolved == root or root in resolved.parents:
        inside = resolved.relative_to(root).parts
        if not inside or inside[0] in _MANAGED or resolved.suffix != suffix or resolved.name.startswith("."):
            raise ConfigError(f"--out {out} is one of the store's own files (under {root}): write the report "
                              f"elsewhere, or as a {suffix} file beside the store's folders")
    if target.parent.exists() and not target.parent.is_dir():
        raise ConfigError(f"--out {out}: {target.parent} is not a directory")
    return target


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")
