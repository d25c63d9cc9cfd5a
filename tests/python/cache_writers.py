"""Writers of the three cache layouts that `libshard pack` reads as sources (docs/guide/
converting.md, "Caches as sources"): DeepSpec's target cache, NeMo AutoModel's offline cache and
TorchSpec's offline folder. Our own code, written from the formats as their public code defines
them (deepseek-ai/DeepSpec deepspec/data/target_cache_dataset.py; nemo_automodel/components/
datasets/llm/offline_cache.py; TorchSpec torchspec/offline/dataset.py); none of theirs is copied.

The DeepSpec and AutoModel writers need only the standard library (the fuzz corpus uses them);
`write_torchspec` needs torch. Tensors are given as raw little-endian bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

DEEPSPEC_RECORD = struct.Struct("<QIIQQQQQ")  # 56 bytes
DEEPSPEC_FIELDS = ("input_ids", "attention_mask", "loss_mask", "target_hidden_states",
                   "target_last_hidden_states")


def deepspec_manifest(num_samples: int, num_shards: int, layer_ids: Sequence[int], hidden_size: int,
                      hidden_dtype: str = "bfloat16", extra: Optional[Mapping] = None) -> dict:
    m = {
        "version": 2,
        "num_samples": num_samples,
        "num_shards": num_shards,
        "target_layer_ids": list(layer_ids),
        "hidden_dtype": hidden_dtype,
        "token_dtype": "int32",
        "mask_dtype": "uint8",
        "index_record_size": DEEPSPEC_RECORD.size,
        "hidden_size": hidden_size,
        "shards": [{"shard_id": k, "file_name": f"shard-{k:05d}.bin"} for k in range(num_shards)],
    }
    m.update(extra or {})
    return m


def deepspec_files(samples: Sequence[Mapping[str, bytes]], *, layer_ids: Sequence[int],
                   hidden_size: int, hidden_dtype: str = "bfloat16",
                   max_shard_bytes: int = 1 << 30, extra: Optional[Mapping] = None
                   ) -> Dict[str, bytes]:
    """The files of a DeepSpec target cache holding `samples` (each: the five fields' bytes, in
    DEEPSPEC_FIELDS order of writing), as DeepSpec's single-rank writer lays them out: a sample's
    fields back to back, a new shard when the next sample would pass max_shard_bytes."""
    shards: List[bytearray] = []
    index = bytearray()
    for i, s in enumerate(samples):
        n = sum(len(s[f]) for f in DEEPSPEC_FIELDS)
        if not shards or (len(shards[-1]) > 0 and len(shards[-1]) + n > max_shard_bytes):
            shards.append(bytearray())
        shard = shards[-1]
        offsets = []
        for f in DEEPSPEC_FIELDS:
            offsets.append(len(shard))
            shard += s[f]
        seq_len = len(s["input_ids"]) // 4
        index += DEEPSPEC_RECORD.pack(i, len(shards) - 1, seq_len, *offsets)
    manifest = deepspec_manifest(len(samples), len(shards), layer_ids, hidden_size, hidden_dtype,
                                 extra)
    files = {"manifest.json": json.dumps(manifest, indent=2, sort_keys=True).encode(),
             "samples.idx": bytes(index)}
    for k, shard in enumerate(shards):
        files[f"shard-{k:05d}.bin"] = bytes(shard)
    return files


SAFETENSORS_DTYPES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "int32": "I32",
                      "int64": "I64", "float16": "F16", "bfloat16": "BF16", "float32": "F32",
                      "float64": "F64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


def safetensors_bytes(tensors: Mapping[str, Tuple[str, Sequence[int], bytes]],
                      metadata: Optional[Mapping[str, str]] = None) -> bytes:
    """A .safetensors file: tensors {name: (dtype name, shape, bytes)} in the given order."""
    header: Dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    data = bytearray()
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(data)


def automodel_files(columns: Mapping[str, Tuple[str, Sequence[int], Sequence[bytes]]], *,
                    shard_size: int, format_version: int = 2,
                    extra: Optional[Mapping] = None) -> Dict[str, bytes]:
    """The files of a NeMo AutoModel offline cache: columns {name: (dtype, row shape, one bytes
    object per sample)}, stacked along dim 0 into shards of `shard_size` samples, and a manifest
    written as the owner's write_manifest does (format_version first merged, sorted keys)."""
    n = len(next(iter(columns.values()))[2]) if columns else 0
    files: Dict[str, bytes] = {}
    for k, first in enumerate(range(0, n, shard_size)):
        rows = min(shard_size, n - first)
        tensors = {name: (dtype, [rows, *shape], b"".join(data[first:first + rows]))
                   for name, (dtype, shape, data) in columns.items()}
        files[f"shard-{k:06d}.safetensors"] = safetensors_bytes(tensors)
    manifest = {"format_version": format_version, "shard_size": shard_size, "num_samples": n}
    manifest.update(extra or {})
    files["manifest.json"] = json.dumps(manifest, indent=2, sort_keys=True).encode()
    return files


def write_files(root: Path, files: Mapping[str, bytes]) -> Path:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def write_torchspec(root: Path, rows: Iterable[Tuple[str, str, Mapping]], *,
                    last_hidden_states_prenorm: Optional[bool] = False) -> Path:
    """A TorchSpec offline folder: rows of (split, data_id, record), each record a dict of tensors
    (input_ids, hidden_states, optionally target and last_hidden_states) plus packed_loss_mask and
    metadata, saved as TorchSpec's OfflineDataset.append does (samples/<sha1(data_id)>.pt, a line
    appended to manifest.jsonl)."""
    import torch

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "dataset.json").write_text(json.dumps(
        {"version": 1, "last_hidden_states_prenorm": last_hidden_states_prenorm}, indent=2) + "\n")
    with open(root / "manifest.jsonl", "a", encoding="utf-8") as manifest:
        for split, data_id, record in rows:
            rel = f"samples/{hashlib.sha1(data_id.encode()).hexdigest()}.pt"
            (root / "samples").mkdir(exist_ok=True)
            tensors = {k: v.contiguous() for k, v in record.items() if isinstance(v, torch.Tensor)}
            saved = {**tensors, "data_id": data_id,
                     "packed_loss_mask": record.get("packed_loss_mask"),
                     "metadata": dict(record.get("metadata", {}))}
            torch.save(saved, root / rel)
            row = {"split": split, "data_id": data_id, "file": rel,
                   "seq_len": int(tensors["input_ids"].numel())}
            manifest.write(json.dumps(row) + "\n")
    return root
