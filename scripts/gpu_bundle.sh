#!/usr/bin/env bash
# Builds .gpu/ (git-ignored through .git/info/exclude): what a lent GPU machine needs to run mai and
# benchmarks/gpu_checklist.py. That machine has Python 3.12 with CUDA torch, numpy, pyarrow, pillow, tokenizers,
# huggingface-hub and safetensors, and no network, so the rest travels: every runtime dependency of mai that the
# image lacks (Prefect and its server's imports, which include asyncpg, greenlet and graphviz; DuckDB; datasets;
# rapidfuzz), transformers at the version .venv runs, and mai itself as a wheel without the shipped shapes weights.
# Wheels for cp312 are unpacked here and packed as one .tar.xz (about 44 MB; the wheels themselves are 80 MB).
#
# The working tree travels with it and the carry limit is 64 MiB, so the 27 MB of shipped weights must stay behind:
# see docs/development.md ("On a lent GPU") for the run command and how the weights are left out and put back.
#
# Usage: scripts/gpu_bundle.sh   (after `make venv`; minutes: xz -9 over ~270 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
OUT=.gpu
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
mkdir -p "$OUT/wheels"

# on the device image already (its package list), or not needed at run time (tools for development)
PROVIDED="torch triton numpy pyarrow pillow tokenizers huggingface-hub hf-xet safetensors fsspec filelock sympy mpmath
networkx jinja2 markupsafe pandas tqdm requests urllib3 idna certifi charset-normalizer xxhash psutil packaging six
python-dateutil aiohttp aiosignal frozenlist multidict yarl propcache aiohappyeyeballs setuptools pip wheel
mypy mypy-extensions ruff playwright pyee hypothesis sortedcontainers pytest pluggy iniconfig librt ast-serialize
plotly narwhals mai"
"$VENV/bin/pip" freeze --exclude-editable 2>/dev/null | grep '==' | python3 -c '
import sys
provided = {n.lower() for n in sys.argv[1].split()}
for line in sys.stdin:
    name = line.split("==")[0]
    if name.lower().replace("_", "-") not in provided and not name.lower().startswith("nvidia-"):
        print(line.strip())
' "$PROVIDED" > "$OUT/requirements.txt"

PLATFORMS=(--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_31_x86_64
           --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64)
"$VENV/bin/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d "$OUT/wheels" -r "$OUT/requirements.txt"

SITE=$(mktemp -d)/site312
"$VENV/bin/pip" install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" --target "$SITE" "$OUT"/wheels/*.whl
find "$SITE" -name tests -type d -prune -exec rm -rf {} +
tar -cf - -C "$(dirname "$SITE")" site312 | xz -9 -T2 > "$OUT/site312.tar.xz.part"
mv "$OUT/site312.tar.xz.part" "$OUT/site312.tar.xz"
rm -rf "$(dirname "$SITE")" "$OUT/wheels"

# mai itself, without the shipped weights (the checklist uses random-weight architectures)
BUILD=$(mktemp -d)
git archive HEAD | tar -x -C "$BUILD"
rm -rf "$BUILD/mai/assets/models"
"$VENV/bin/pip" wheel -q --no-deps --no-build-isolation -w "$OUT" "$BUILD" 2>/dev/null
rm -rf "$BUILD"
ls -la "$OUT"
