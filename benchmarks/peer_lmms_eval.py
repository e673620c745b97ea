"""mai against lmms-eval on lmms-eval's own job (issue 60; results in docs/benchmarks.md, "Against lmms-eval").

The job: the first 128 rows of the `shapes` test split, `mai-shapes-large` (the shipped tiny Qwen3-VL checkpoint),
the S prompt, greedy decoding, one compute thread (OMP_NUM_THREADS=1 / MKL_NUM_THREADS=1 on both sides), batch 1,
8 and 32. For each batch size the script times whole commands, each as a user types it:

  lmms-eval   lmms-eval 0.7.3's `qwen3_vl` model class, with a task YAML (written here into a temporary folder,
              passed with --include_path) reading the same local Parquet file; a fresh datasets cache each time
  mai local   `mai run --local --mode single ...` on a fresh store (the in-process executor, no Prefect)
  mai flow    the same command without --local on a fresh store (the Prefect flow, its temporary server)
  mai re-run  the local command again on the local run's store (every output stored)

and checks that both sides answered identically, row by row: mai's stored S outputs (`generations.text`) against
lmms-eval's logged samples (`--log_samples`), and mai's prompt text against the context lmms-eval logged.
A fresh store gets the shapes splits as hard links to one copy built once (`mai build-shapes`, 3 minutes on a
busy machine, which neither side should pay: lmms-eval reads the same files), so the store is otherwise empty.

lmms-eval lives in a virtual environment of its own, built on first use under --cache (default
~/.cache/mai-peer/lmms-eval-0.7.3) and reused while its stamp matches. Three traps of that install, found when the
comparison was first made by hand: torchvision pulls a CUDA torch unless torch is pinned to the CPU build mai uses
(and PyPI's torchvision, a CUDA build, fails to import beside it: its two unguarded fake-op registrations are
guarded as scripts/vllm_env.sh does); lmms-eval imports `decord` without declaring it; it needs `filelock<4`.
transformers is pinned to mai's version so both sides run the same model code.

Deviations from a stock lmms-eval command, so that both sides compute the same thing: lmms-eval's `qwen3_vl`
always adds a system turn ("You are a helpful assistant."; its `system_prompt` argument changes only the text),
which mai does not send, so the launcher drops system turns before the chat template is applied; it loads the
weights in bfloat16 whatever it is told (no dtype argument), while mai runs float32, its default, so the launcher
loads them in float32 (`--peer-dtype bfloat16` keeps lmms-eval's loading); `device=cpu,device_map=cpu` (its
default is CUDA).

Run: `.venv/bin/python benchmarks/peer_lmms_eval.py [--batches 1 8 32] [--repeats 1] [--json FILE]`. Prints one
line per command and a JSON summary (ratios of each mai command's wall time over lmms-eval's, identical answers,
the machine's load average). Measure on a quiet machine: the figures are wall seconds of a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mai is imported lazily: --help and the venv build need none of it
    from mai.config import RunConfig

REPO = Path(__file__).resolve().parent.parent
LMMS_EVAL_VERSION = "0.7.3"
MODEL = "mai-shapes-large"
LIMIT = 128
TASK = "mai_shapes_s"
GOALS = {"local": 1.0, "flow": 1.2}  # mai's whole command over lmms-eval's, at most (issue 60)
# the CPU torch build that mai's own venv uses is the local wheel `pip install torch==2.13.0` takes; any other
# resolution of lmms-eval's `torch>=2.1` pulls several GB of CUDA packages
TORCH_PIN = "2.13.0"

# `--model qwen3_vl` resolves to lmms-eval's chat class, a subclass of the simple one patched here, so both see
# the patches. The class prepends a fixed system turn; mai sends one user turn (images first, then the text).
# Dropping system turns where the chat template is applied is the smallest change that makes both sides feed the
# model the same tokens. The class also loads bfloat16 weights whatever it is told, while mai runs float32 (its
# default): in bfloat16 one answer of the 128 differs at every batch size (shapes-113, measured 2026-11-29), so
# by default (--peer-dtype float32) the checkpoint is loaded in float32 on both sides; --peer-dtype bfloat16
# keeps lmms-eval's loading. Everything else runs as lmms-eval ships it.
LAUNCHER = """
import sys
import torch
from lmms_eval.models.simple import qwen3_vl
_apply = qwen3_vl.Qwen3_VL._apply_chat_template
def _without_system_turn(self, batched_messages, **kwargs):
    return _apply(self, [[m for m in ms if m["role"] != "system"] for ms in batched_messages], **kwargs)
qwen3_vl.Qwen3_VL._apply_chat_template = _without_system_turn
DTYPE = {dtype!r}
if DTYPE != "bfloat16":  # the class loads bfloat16 whatever it is told; load the checkpoint in DTYPE instead
    _resolve = qwen3_vl._resolve_model_class
    def _resolve_in_dtype(pretrained, is_moe):
        model_cls, dtype_key = _resolve(pretrained, is_moe)
        class InDtype:
            @staticmethod
            def from_pretrained(path, **kwargs):
                return model_cls.from_pretrained(path, **{{**kwargs, dtype_key: getattr(torch, DTYPE)}})
        return InDtype, dtype_key
    qwen3_vl._resolve_model_class = _resolve_in_dtype
from lmms_eval.cli.dispatch import main
sys.argv[0] = "lmms-eval"
main()
"""

# the torchvision fix of scripts/vllm_env.sh: PyPI's torchvision is a CUDA build whose fake-op registrations for
# nms/qnms fail next to the CPU torch; guard them by `_has_ops()` as torchvision guards its other ops
TORCHVISION_FIX = r"""
import importlib.util, pathlib, re
spec = importlib.util.find_spec("torchvision")
path = pathlib.Path(spec.submodule_search_locations[0]) / "_meta_registrations.py"
text = path.read_text()
if "_mai_guard" not in text:
    text, count = re.subn(
        r'^@torch\.library\.register_fake\("torchvision::(nms|qnms)"\)\n',
        r'@(torch.library.register_fake("torchvision::\1") if torchvision.extension._has_ops() else (lambda f: f))'
        r'  # _mai_guard\n', text, flags=re.M)
    assert count == 2, f"torchvision fix: expected 2 registrations in {path}, found {count}"
    path.write_text(text)
"""


@dataclass
class Timed:
    """One whole command: its wall seconds, the 1-minute load average before and after it, and the time the
    command itself reports for generating (lmms-eval's `total_elapsed_time`: its `generate` calls; mai's
    `model generate`: its engine calls, prompt encoding included) and, for mai, the run's own wall time."""

    seconds: float
    load_before: float
    load_after: float
    generate_s: float | None = None
    run_wall_s: float | None = None


# what each command prints about its own time (see Timed)
MAI_TIMES = re.compile(r"wall time: ([\d.]+) s \(model generate ([\d.]+) s")
PEER_GENERATE = re.compile(r"\|total_elapsed_time\|\s*([\d.]+)")


@dataclass
class BatchResult:
    batch: int
    lmms_eval: list[Timed] = field(default_factory=list)
    mai_local: list[Timed] = field(default_factory=list)
    mai_flow: list[Timed] = field(default_factory=list)
    mai_rerun: list[Timed] = field(default_factory=list)
    identical_answers: int = 0
    identical_prompts: int = 0
    rows: int = 0
    differences: list[dict[str, str]] = field(default_factory=list)

    def median(self, name: str) -> float:
        timed: list[Timed] = getattr(self, name)
        return statistics.median(t.seconds for t in timed)

    def median_of(self, name: str, reported: str) -> float | None:
        values = [v for t in getattr(self, name) if (v := getattr(t, reported)) is not None]
        return round(statistics.median(values), 2) if values else None

    def summary(self) -> dict[str, object]:
        peer = self.median("lmms_eval")
        return {
            "batch": self.batch, "lmms_eval_s": round(peer, 2), "mai_local_s": round(self.median("mai_local"), 2),
            "mai_flow_s": round(self.median("mai_flow"), 2), "mai_rerun_s": round(self.median("mai_rerun"), 2),
            "local_over_lmms_eval": round(self.median("mai_local") / peer, 3),
            "flow_over_lmms_eval": round(self.median("mai_flow") / peer, 3),
            "generate_s": {k: self.median_of(k, "generate_s") for k in ("lmms_eval", "mai_local", "mai_flow")},
            "mai_run_wall_s": {k: self.median_of(k, "run_wall_s") for k in ("mai_local", "mai_flow")},
            "identical_answers": f"{self.identical_answers}/{self.rows}",
            "identical_prompts": f"{self.identical_prompts}/{self.rows}",
            "differences": self.differences[:5],
            "runs": {k: [asdict(t) for t in getattr(self, k)] for k in ("lmms_eval", "mai_local", "mai_flow", "mai_rerun")},
        }


# ---------------------------------------------------------------- environments and data


def mai_versions() -> dict[str, str]:
    import torch
    import transformers

    return {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__}


def peer_env(cache: Path) -> Path:
    """lmms-eval's venv, built once: its stamp names everything the build pinned, so a change rebuilds it."""
    versions = mai_versions()
    venv = cache / f"lmms-eval-{LMMS_EVAL_VERSION}"
    stamp = venv / "mai-peer-stamp.json"
    wanted = {"lmms_eval": LMMS_EVAL_VERSION, "torch": TORCH_PIN, "transformers": versions["transformers"]}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    # the interpreter mai's own venv was made from: the local torch wheel is for its Python (3.11)
    subprocess.run([str(Path(sys.base_prefix) / "bin" / "python3"), "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    # torch first, alone: then the constraint below keeps every later resolution on this CPU build
    subprocess.run([*pip, f"torch=={TORCH_PIN}"], check=True)
    constraints = venv / "mai-peer-constraints.txt"
    constraints.write_text(f"torch=={TORCH_PIN}\ntransformers=={versions['transformers']}\n")
    subprocess.run([*pip, "-c", str(constraints), f"lmms-eval=={LMMS_EVAL_VERSION}", "filelock<4", "decord"],
                   check=True)
    subprocess.run([str(venv / "bin" / "python"), "-c", TORCHVISION_FIX], check=True)
    # the smoke test: both qwen3_vl classes import (they import torchvision and decord)
    subprocess.run([str(venv / "bin" / "python"), "-c",
                    "import lmms_eval.models.simple.qwen3_vl, lmms_eval.models.chat.qwen3_vl"], check=True)
    stamp.write_text(json.dumps(wanted))
    return venv


def shapes_data(cache: Path) -> Path:
    """The shapes splits, built once by mai itself (`mai build-shapes`, which rewrites them if the world changed)."""
    home = cache / "shapes-home"
    subprocess.run([str(mai_bin()), "--home", str(home), "build-shapes"], check=True, capture_output=True)
    return home / "datasets" / "shapes"


def fresh_store(parent: Path, name: str, shapes: Path) -> Path:
    """An empty store whose datasets/shapes are hard links to the built splits (no copy, no rebuild)."""
    home = parent / name
    shutil.copytree(shapes, home / "datasets" / "shapes", copy_function=os.link)
    return home


def mai_bin() -> Path:
    return Path(sys.executable).parent / "mai"


# ---------------------------------------------------------------- the lmms-eval task


def write_task(folder: Path, parquet: Path) -> None:
    """A task YAML and its utils.py that lay out the S prompt exactly as mai does: the MMBench layout of
    `mai.evals.demo.DemoBenchmark.format_question` (hint, question, `X. option` lines), a newline, then the
    instruction of `mai.prompts` for the row's answer style (letter with options, phrase without). The check of
    identical prompts below compares the two texts row by row, so a drift shows."""
    from mai.prompts import INSTRUCTIONS

    budget = mai_config(1).max_new_tokens["S"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "utils.py").write_text(f'''
LETTERS = ("A", "B", "C", "D")
PHRASE = {INSTRUCTIONS[("S", "phrase")]!r}
LETTER = {INSTRUCTIONS[("S", "letter")]!r}


def doc_to_visual(doc):
    return [doc["image"].convert("RGB")]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    options = [(k, doc[k]) for k in LETTERS if doc.get(k) not in (None, "")]
    hint = (doc.get("hint") or "").strip()
    lines = [f"{{hint}} {{doc['question']}}" if hint else doc["question"]]
    lines += [f"{{k}}. {{text}}" for k, text in options]
    return "\\n".join(lines) + "\\n" + (LETTER if options else PHRASE)


def process_results(doc, results):
    return {{"exact_answer": float(results[0].strip() == "[[" + doc["answer"] + "]]")}}
''')
    (folder / f"{TASK}.yaml").write_text(f"""task: {TASK}
dataset_path: parquet
dataset_kwargs:
  data_files:
    test: {parquet}
test_split: test
output_type: generate_until
doc_to_visual: !function utils.doc_to_visual
doc_to_text: !function utils.doc_to_text
doc_to_target: answer
generation_kwargs:
  max_new_tokens: {budget}
  temperature: 0
  do_sample: false
  num_beams: 1
process_results: !function utils.process_results
metric_list:
  - metric: exact_answer
    aggregation: mean
    higher_is_better: true
metadata:
  - version: 0.0
""")


def mai_config(batch: int) -> RunConfig:
    """The run the mai commands make, as mai resolves it (its budgets: the shipped pair's S budget)."""
    from mai.config import RunConfig

    return RunConfig.model_validate({"mode": "single", "single_model": "large", "single_prompt": "S",
                                     "benchmark": "shapes", "large_model": MODEL, "limit": LIMIT, "batch_size": batch})


# ---------------------------------------------------------------- commands


def base_env() -> dict[str, str]:
    """One compute thread on both sides, nothing from the hub, and no Prefect API from the caller's shell: a
    computing `mai run` starts its own temporary server, as a user's first command does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MAI_HOME"))}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    return env


def timed(command: Sequence[str], env: dict[str, str], cwd: Path, log: Path) -> Timed:
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(list(command), check=False, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"command failed ({done.returncode}), see {log}: {' '.join(command)}")
    result = Timed(round(seconds, 3), load_before, os.getloadavg()[0])
    printed = log.read_text(errors="replace")
    if mine := MAI_TIMES.search(printed):
        result.run_wall_s, result.generate_s = float(mine.group(1)), float(mine.group(2))
    elif peer := PEER_GENERATE.search(printed):
        result.generate_s = float(peer.group(1))
    return result


def mai_command(home: Path, batch: int, local: bool) -> list[str]:
    # --batch-size S=N names the one stage's batch size outright (a plain --batch-size N does the same here; the
    # shipped pair's per-kind defaults, S 32, apply only when no batch size is given)
    return [str(mai_bin()), "--home", str(home), "run", *(["--local"] if local else []), "--mode", "single",
            "--single-model", "large", "--single-prompt", "S", "--benchmark", "shapes", "--large-model", MODEL,
            "--limit", str(LIMIT), "--batch-size", f"S={batch}"]


def peer_command(venv: Path, task_dir: Path, out: Path, batch: int, dtype: str) -> list[str]:
    model = REPO / "mai" / "assets" / "models" / MODEL
    return [str(venv / "bin" / "python"), "-c", LAUNCHER.format(dtype=dtype), "--model", "qwen3_vl",
            "--model_args", f"pretrained={model},device=cpu,device_map=cpu",
            "--tasks", TASK, "--include_path", str(task_dir), "--batch_size", str(batch), "--limit", str(LIMIT),
            "--log_samples", "--output_path", str(out), "--verbosity", "WARNING"]


# ---------------------------------------------------------------- answers


def mai_outputs(home: Path) -> dict[str, tuple[str, str]]:
    """sample_id -> (output text, prompt text) of the run's S generations, from the catalog."""
    query = "SELECT sample_id, text, prompt_text FROM generations WHERE prompt_kind = 'S'"
    done = subprocess.run([str(mai_bin()), "--home", str(home), "sql", query, "--format", "json"],
                          check=True, capture_output=True, text=True)
    return {row["sample_id"]: (row["text"], row["prompt_text"]) for row in json.loads(done.stdout)}


def peer_outputs(out: Path, parquet: Path) -> dict[str, tuple[str, str]]:
    """sample_id -> (response, context) from lmms-eval's samples file; doc_id is the row's position, mapped to
    mai's id `shapes-<index column>`."""
    import pyarrow.parquet as pq

    index = pq.read_table(parquet, columns=["index"]).column("index").to_pylist()
    (samples,) = out.rglob(f"*_samples_{TASK}.jsonl")
    result = {}
    for line in samples.read_text().splitlines():
        sample = json.loads(line)
        response = sample["filtered_resps"]
        result[f"shapes-{index[sample['doc_id']]}"] = (response if isinstance(response, str) else response[0],
                                                        sample["input"])
    return result


def compare(result: BatchResult, mine: dict[str, tuple[str, str]], peer: dict[str, tuple[str, str]]) -> None:
    result.rows = len(mine)
    if set(mine) != set(peer):
        result.differences.append({"rows": f"mai {len(mine)}, lmms-eval {len(peer)}, shared {len(set(mine) & set(peer))}"})
    for sample_id in sorted(set(mine) & set(peer)):
        (text, prompt), (answer, context) = mine[sample_id], peer[sample_id]
        result.identical_answers += text == answer
        result.identical_prompts += prompt == context
        if text != answer:
            result.differences.append({"sample": sample_id, "mai": text, "lmms_eval": answer})


# ---------------------------------------------------------------- the comparison


def run_batch(batch: int, repeats: int, venv: Path, shapes: Path, work: Path, dtype: str) -> BatchResult:
    env = base_env()
    parquet = shapes / "test-00000-of-00001.parquet"
    task_dir = work / "task"
    if not task_dir.exists():
        write_task(task_dir, parquet)
    result = BatchResult(batch)
    for repeat in range(repeats):
        tag = f"b{batch}-r{repeat}"
        # lmms-eval with a fresh datasets cache: it converts the Parquet rows to Arrow, as on a first run
        peer_out = work / f"lmms-{tag}"
        peer_env_vars = {**env, "HF_HOME": str(work / f"hf-{tag}")}
        result.lmms_eval.append(timed(peer_command(venv, task_dir, peer_out, batch, dtype), peer_env_vars, work,
                                      work / f"lmms-{tag}.log"))
        local_home = fresh_store(work, f"local-{tag}", shapes)
        result.mai_local.append(timed(mai_command(local_home, batch, local=True), env, REPO, work / f"local-{tag}.log"))
        result.mai_rerun.append(timed(mai_command(local_home, batch, local=True), env, REPO, work / f"rerun-{tag}.log"))
        flow_home = fresh_store(work, f"flow-{tag}", shapes)
        result.mai_flow.append(timed(mai_command(flow_home, batch, local=False), env, REPO, work / f"flow-{tag}.log"))
        for name in ("lmms_eval", "mai_local", "mai_rerun", "mai_flow"):
            print(f"batch {batch:>2} repeat {repeat}: {name:<9} {getattr(result, name)[-1].seconds:7.2f} s "
                  f"(load {getattr(result, name)[-1].load_before:.2f})", flush=True)
        if repeat == 0:  # answers are deterministic; the first repeat's are compared
            compare(result, mai_outputs(local_home), peer_outputs(peer_out, parquet))
            flow_answers = mai_outputs(flow_home)
            if flow_answers != mai_outputs(local_home):
                result.differences.append({"executors": "the flow's stored outputs differ from --local's"})
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=1, help="timed repeats of each command (medians reported)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mai-peer",
                        help="where lmms-eval's venv and the built shapes splits are kept between runs")
    parser.add_argument("--work", type=Path, default=None, help="keep stores, logs and samples here (else a temp dir)")
    parser.add_argument("--peer-dtype", choices=["float32", "bfloat16"], default="float32",
                        help="the dtype lmms-eval loads the checkpoint in (bfloat16: its qwen3_vl class as shipped)")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary to this file")
    args = parser.parse_args(argv)

    args.cache.mkdir(parents=True, exist_ok=True)
    venv = peer_env(args.cache)
    shapes = shapes_data(args.cache)
    work = args.work or Path(tempfile.mkdtemp(prefix="mai-peer-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = os.getloadavg()
    results = [run_batch(batch, args.repeats, venv, shapes, work, args.peer_dtype) for batch in args.batches]
    summary = {
        "job": f"{LIMIT} shapes test rows, {MODEL}, S prompt, greedy, 1 thread", "lmms_eval": LMMS_EVAL_VERSION,
        "peer_dtype": args.peer_dtype, "versions": mai_versions(), "started": started, "cpus": os.cpu_count(),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()], "goals": GOALS,
        "batches": [r.summary() for r in results], "work": str(work),
    }
    summary["goals_met"] = {
        "local": all(b["local_over_lmms_eval"] <= GOALS["local"] for b in summary["batches"]),
        "flow": all(b["flow_over_lmms_eval"] <= GOALS["flow"] for b in summary["batches"]),
        "identical": all(r.identical_answers == r.rows == LIMIT for r in results),
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
