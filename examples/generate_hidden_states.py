#!/usr/bin/env python3
"""Offline EAGLE-3 data generation written straight into a libshard dataset (no per-sample files).

A small transformer runs on real text; forward hooks capture the hidden states the way EAGLE-3
trainers do (three auxiliary decoder layers, concatenated, and the last layer's normed output),
and ``libshard.Writer`` writes them, one part per rank, joined by key when the last rank closes:

    python -m torch.distributed.run --nproc-per-node 2 examples/generate_hidden_states.py --out DATA
    python examples/train_eagle3.py --data DATA --steps 50 --vocab 259
    # the same generation writing torch.save files the way SpecForge does, for comparison:
    python examples/generate_hidden_states.py --out SRC --baseline

THE MODEL IS RANDOMLY INITIALISED. No package on PyPI ships the weights of a small causal LM that
this project may use, and hub downloads are not allowed here, so the target is
``transformers.LlamaForCausalLM`` (a real architecture) built from a small config with
``torch.manual_seed(0)``: the hidden states have the real shapes, dtypes and data flow, not a
trained model's values. The dataset's attributes say so (``target_model``). Point ``--model``
at a local checkpoint directory to use real weights (``from_pretrained``, local files only).

The text is real: the docstrings of Python's standard library, tokenised as UTF-8 bytes (id =
byte + 3; 0 pad, 1 bos, 2 eos), so no tokenizer download is needed either.
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


def build_model(args):
    import transformers
    if args.model:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True)
        label = args.model
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

    def __init__(self, model, aux_layers: List[int]):
        self.outputs = {}
        self.handles = []
        layers = model.model.layers
        for i in aux_layers:
            self.handles.append(layers[i].register_forward_hook(self._hook(i)))
        # The last layer's output after the final norm: what produces the next token.
        self.handles.append(model.model.norm.register_forward_hook(self._hook("final")))

    def _hook(self, key):
        def hook(module, inputs, output):
            self.outputs[key] = output[0] if isinstance(output, tuple) else output
        return hook


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--model", help="local checkpoint directory (default: random init, see above)")
    p.add_argument("--baseline", action="store_true",
                   help="write torch.save files rows_{g}-{g+2000}/data_{i}.ckpt as SpecForge does")
    p.add_argument("--compress", default=None)
    args = p.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // int(os.environ.get("WORLD_SIZE", "1"))))
    model, label = build_model(args)
    n_layers = model.config.num_hidden_layers
    # EAGLE-3's choice (SpecForge, speculators): low, middle and high layers.
    aux_layers = [1, n_layers // 2 - 1, n_layers - 4] if n_layers >= 8 else [0, n_layers // 2, n_layers - 2]
    capture = Capture(model, aux_layers)
    texts = real_texts(args.samples)
    attrs = {"target_model": label, "aux_hidden_state_layer_ids": ",".join(map(str, aux_layers)),
             "hidden_state_layer_ids": f"{n_layers - 1}+norm",
             "hidden_size": model.config.hidden_size, "tokenizer": "utf-8 bytes + 3"}

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
            ids = tokenize(texts[i], args.max_len)
            model(input_ids=ids[None])
            aux = torch.cat([capture.outputs[j] for j in aux_layers], dim=-1)  # [1, L, 3H]
            sample = {"input_ids": ids, "loss_mask": torch.ones_like(ids),
                      "aux_hidden_state": aux, "hidden_state": capture.outputs["final"]}
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
