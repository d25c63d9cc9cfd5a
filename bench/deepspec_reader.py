"""DeepSpec's target-cache reader, reimplemented from its public code for the comparisons in
bench/ and tests/ (deepseek-ai/DeepSpec deepspec/data/target_cache_dataset.py, CacheDataset, cache
version 2, with the fp8 hidden_dtype of its FP8 change): samples.idx and the shards are mmapped,
an LRU of open shards (max_open_shards, default 4), and each tensor read as
np.frombuffer(mmap, dtype, count, offset).copy() then viewed as torch; fp8 hidden states are cast
to bf16 on read. Our code, written from reading theirs; none of it is copied.

DeepSpecCacheDataset(dir)[i] -> {"input_ids" int32 [L], "loss_mask" uint8 [L],
"target_hidden_states" bf16 [L, K*H], "target_last_hidden_states" bf16 [L, H]}: the four
fields its reader serves (it stores attention_mask too, and does not read it).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections import OrderedDict

import numpy as np
import torch

RECORD = struct.Struct("<QIIQQQQQ")
_FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


class DeepSpecCacheDataset(torch.utils.data.Dataset):
    def __init__(self, cache_dir: str, max_open_shards: int = 4):
        self.cache_dir = os.path.abspath(cache_dir)
        with open(os.path.join(self.cache_dir, "manifest.json"), encoding="utf-8") as f:
            self.manifest = json.load(f)
        m = self.manifest
        assert int(m["version"]) == 2 and int(m["index_record_size"]) == RECORD.size
        self.num_samples = int(m["num_samples"])
        self.hidden_size = int(m["hidden_size"])
        self.num_layers = len(m["target_layer_ids"])
        self.hidden_dtype = m.get("hidden_dtype", "bfloat16")
        self.shard_paths = {int(s["shard_id"]): os.path.join(self.cache_dir, s["file_name"])
                            for s in m["shards"]}
        self.max_open_shards = max_open_shards
        self._index = None
        self._index_file = None
        self._shards: "OrderedDict[int, tuple]" = OrderedDict()

    def __len__(self):
        return self.num_samples

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_index"] = None
        state["_index_file"] = None
        state["_shards"] = OrderedDict()
        return state

    def _shard(self, shard_id: int):
        if shard_id in self._shards:
            self._shards.move_to_end(shard_id)
            return self._shards[shard_id][1]
        f = open(self.shard_paths[shard_id], "rb")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._shards[shard_id] = (f, mm)
        while len(self._shards) > self.max_open_shards:
            _, (old_f, old_mm) = self._shards.popitem(last=False)
            old_mm.close()
            old_f.close()
        return mm

    @staticmethod
    def _read(mm, offset, count, np_dtype):
        assert offset + count * np.dtype(np_dtype).itemsize <= mm.size()
        return torch.from_numpy(np.frombuffer(mm, dtype=np_dtype, count=count, offset=offset).copy())

    def __getitem__(self, index: int):
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        if self._index is None:
            self._index_file = open(os.path.join(self.cache_dir, "samples.idx"), "rb")
            self._index = mmap.mmap(self._index_file.fileno(), 0, access=mmap.ACCESS_READ)
        sid, shard, L, o_ids, _o_attn, o_loss, o_ths, o_tlhs = RECORD.unpack_from(
            self._index, index * RECORD.size)
        assert sid == index and L > 0
        mm = self._shard(shard)
        K, H = self.num_layers, self.hidden_size
        out = {"input_ids": self._read(mm, o_ids, L, np.int32),
               "loss_mask": self._read(mm, o_loss, L, np.uint8)}
        if self.hidden_dtype == "bfloat16":
            ths = self._read(mm, o_ths, L * K * H, np.uint16).view(torch.bfloat16)
            tlhs = self._read(mm, o_tlhs, L * H, np.uint16).view(torch.bfloat16)
        else:
            dt = _FP8[self.hidden_dtype]
            ths = self._read(mm, o_ths, L * K * H, np.uint8).view(dt).to(torch.bfloat16)
            tlhs = self._read(mm, o_tlhs, L * H, np.uint8).view(dt).to(torch.bfloat16)
        out["target_hidden_states"] = ths.view(L, K * H)
        out["target_last_hidden_states"] = tlhs.view(L, H)
        return out
