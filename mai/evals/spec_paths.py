"""Where a spec benchmark's files may be: inside its folder (mai/evals/spec.py).

The benchmark's folder is the spec file's folder, or a folder inside it that the spec's `data_root:` names, or the
folder the user allows on the command line (`--data-root DIR`, which may hold a spec's wider `data_root:`). The
data file must lie in it, and so must every image a row names by path (an image path is relative to the data file).
A path is taken as the filesystem resolves it: an absolute path, a `..` or a symbolic link that leads out of the
folder is refused, so that someone else's spec run on a worker cannot read the worker's files into the store, the
prompts or the report. URLs are never fetched.
"""

from __future__ import annotations

import re
from pathlib import Path

from mai.evals.base import BadRow

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
OUTSIDE_HINT = "allow a folder that holds the benchmark's files with --data-root DIR on the command line"


def is_url(text: str) -> bool:
    return bool(_URL.match(text.strip()))


def inside(path: Path, root: Path) -> bool:
    """Whether `path`, with every link followed, lies in `root`."""
    return path.resolve().is_relative_to(root.resolve())


def image_file(value: str, base: Path, root: Path, column: str) -> Path:
    """The image file a row's path names (relative to `base`, the data file's folder), refused when it leaves
    `root`; BadRow (a per-sample error) says why in one line."""
    shown = value if len(value) <= 80 else value[:77] + "..."
    if is_url(value):
        raise BadRow(f"column '{column}' holds the URL {shown!r}: URLs are not read; put the image in the data, "
                     "or save it in the benchmark's folder and give its path")
    path = base / value
    if not inside(path, root):
        how = "an absolute path" if Path(value).is_absolute() else "a path"
        raise BadRow(f"column '{column}': image path {shown!r} is {how} outside the benchmark's folder {root}: image "
                     f"paths are relative to the data file and stay in that folder ({OUTSIDE_HINT})")
    return path
