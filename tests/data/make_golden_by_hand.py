#!/usr/bin/env python3
"""Writes tests/data/golden_by_hand/: a complete libshard dataset built from docs/FORMAT.md alone.

Nothing here comes from libshard (no import, no writer, no encoder): every byte is laid out with
struct.pack by reading the spec, and checksums are XXH3-64 from the `xxhash` PyPI package. The
reader must open it and return exactly what expected.json (also written here) says, which shows
reader and spec agree independently of the writer (tests/format_golden_test.cc,
FormatGoldenTest.HandWrittenDatasetReads).

It deliberately uses freedoms the spec grants that the libshard writer does not use: the blob
holds its strings in another order than the writer's, with unreferenced bytes between them (§3.4),
a sample with no metadata and no source path, and one with an empty tensor.

Run from anywhere (needs `pip install xxhash`); the output is deterministic:
    python3 tests/data/make_golden_by_hand.py
"""
import json
import os
import struct

import xxhash

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_by_hand")
ALIGN = 4096  # §4.1 kSampleAlignment
SHARD_UID = 0x0123456789ABCDEF


def xxh3(b):
    return xxhash.xxh3_64_intdigest(bytes(b))  # §1: XXH3-64, seed 0


def align(x, a):
    return (x + a - 1) // a * a


# §3.2: dtype codes and sizes.
DTYPES = {"int64": (6, 8), "bfloat16": (11, 2)}
FIELDS = [  # name, dtype, rank, seq_dim
    ("tokens", "int64", 1, 0),
    ("hidden", "bfloat16", 2, 0),
]
LENGTH_FIELD = 0
HIDDEN = 4  # hidden is [L, 4]


# Samples: token length L, the tensors' values, metadata entries (key, type, value), provenance.
def tokens(i, n):
    return [1000 * (i + 1) + 7 * t - 3 for t in range(n)]


def hidden_bits(i, n):
    # bf16 bit patterns of small positive and negative numbers (any 16-bit value is valid bytes).
    return [(0x3F80 + 0x11 * i + k) ^ (0x8000 if k % 3 == 0 else 0) for k in range(n * HIDDEN)]


SAMPLES = [
    {"len": 3,
     "meta": [("split", 4, "train"), ("weight", 3, 0.5), ("epoch", 2, -3), ("keep", 1, True)],
     "source": ("part_a/sample_0.pt", 123456, 1700000000123456789, 0x1122334455667788)},
    {"len": 5, "meta": [], "source": ("", 0, 0, 0)},
    {"len": 0, "meta": [("id", 2, 42)],
     "source": ("part_b/sample_10.pt", 77, -5, 0)},
]


def encode_meta(entries):
    """§3.4 metadata encoding; empty string for no metadata (meta_size 0)."""
    if not entries:
        return b""
    out = struct.pack("<I", len(entries))
    for key, typ, val in entries:
        k = key.encode()
        out += struct.pack("<H", len(k)) + k + struct.pack("<B", typ)
        if typ == 1:
            out += struct.pack("<B", 1 if val else 0)
        elif typ == 2:
            out += struct.pack("<q", val)
        elif typ == 3:
            out += struct.pack("<Q", struct.unpack("<Q", struct.pack("<d", val))[0])
        elif typ == 4:
            v = val.encode()
            out += struct.pack("<I", len(v)) + v
    return out


def payload(i, s):
    """§4.1 canonical raw payload: fields in order, each at align(off, 64)."""
    n = s["len"]
    parts = [struct.pack("<%dq" % n, *tokens(i, n)),
             struct.pack("<%dH" % (n * HIDDEN), *hidden_bits(i, n))]
    shapes = [[n], [n, HIDDEN]]
    raw = b""
    entries = []
    for p in parts:
        off = align(len(raw), 64)
        raw += b"\0" * (off - len(raw))
        entries.append((off, len(p)))
        raw += p
    return raw, entries, shapes


def main():
    os.makedirs(OUT, exist_ok=True)
    n, f_count, s_count = len(SAMPLES), len(FIELDS), 1
    d = sum(r for _, _, r, _ in FIELDS)

    # Shard: §4.1 header, then each sample at a multiple of 4096, zero padded to 4096.
    hdr = bytearray(4096)
    hdr[0:8] = b"LSHDSHD\0"
    struct.pack_into("<IIQ", hdr, 8, 1, 0, SHARD_UID)
    struct.pack_into("<Q", hdr, 4088, xxh3(hdr))  # checksum bytes were zero while hashing
    shard = bytearray(hdr)
    built = []
    for i, s in enumerate(SAMPLES):
        raw, entries, shapes = payload(i, s)
        offset = len(shard)
        shard += raw + b"\0" * (align(len(raw), ALIGN) - len(raw))
        built.append({"raw": raw, "entries": entries, "shapes": shapes, "offset": offset})
    shard_name = "shard-00000.lss"

    # Blob (§3.4), in an order of our own choosing, with unreferenced filler between strings.
    blob = bytearray(b"unreferenced")
    refs = {}

    def put(key, data):
        if not data:
            refs[key] = (0, 0)
            return
        refs[key] = (len(blob), len(data))
        blob.extend(data)
        blob.extend(b"~")  # an unreferenced byte after every string

    put("shard", shard_name.encode())
    for i in reversed(range(n)):
        put(("source", i), SAMPLES[i]["source"][0].encode())
    for i in range(n):
        put(("meta", i), encode_meta(SAMPLES[i]["meta"]))
    for name, _, _, _ in reversed(FIELDS):
        put(("field", name), name.encode())
    blob.extend(b"\0" * (align(len(blob), 8) - len(blob)))
    uids_offset = len(blob)
    blob.extend(struct.pack("<Q", SHARD_UID))

    # Sections (§3.1).
    fields_offset = 128
    shards_offset = fields_offset + 32 * f_count
    samples_offset = shards_offset + 32 * s_count
    tensors_offset = samples_offset + 128 * n
    dims_offset = tensors_offset + 16 * n * f_count
    blob_offset = dims_offset + 8 * n * d
    file_size = blob_offset + len(blob)

    fields = b""
    for name, dtype, rank, seq in FIELDS:
        fields += struct.pack("<IIiIQQ", DTYPES[dtype][0], rank, seq, 0, *refs[("field", name)])
    shards = struct.pack("<QQQQ", *refs["shard"], len(shard), n)
    records = tensors = dims = b""
    for i, (s, b) in enumerate(zip(SAMPLES, built)):
        raw = b["raw"]
        path, sbytes, mtime, shash = s["source"]
        # §3.3: offset, stored_size, raw_size, checksum, shard, flags, length, meta, source...
        records += struct.pack("<QQQQIIQQQQQQqQ", b["offset"], len(raw), len(raw), xxh3(raw), 0, 0,
                               s["len"], *refs[("meta", i)], *refs[("source", i)], sbytes, mtime,
                               shash) + b"\0" * 24
        for off, nbytes in b["entries"]:
            tensors += struct.pack("<QQ", off, nbytes)
        for shape in b["shapes"]:
            dims += struct.pack("<%dQ" % len(shape), *shape)
    header = bytearray(128)
    header[0:8] = b"LSHDIDX\0"
    struct.pack_into("<IIQIIQQQQQQQQiQ", header, 8, 1, 1, n, f_count, s_count, fields_offset,
                     shards_offset, samples_offset, tensors_offset, dims_offset, blob_offset,
                     len(blob), file_size, LENGTH_FIELD, uids_offset)
    index = header + fields + shards + records + tensors + dims + blob
    assert len(index) == file_size
    struct.pack_into("<Q", index, 120, xxh3(index))  # §3.6: hashed with bytes 120..127 zero
    index_xxh3 = struct.unpack_from("<Q", index, 120)[0]

    manifest = {
        "format": "libshard",
        "version": 1,
        "schema": {"fields": [{"name": nm, "dtype": dt, "rank": r, "seq_dim": sd}
                              for nm, dt, r, sd in FIELDS],
                   "length_field": FIELDS[LENGTH_FIELD][0]},
        "index": {"file": "index.lsi", "size": file_size, "xxh3": "%016x" % index_xxh3},
        "shards": [{"file": shard_name, "size": len(shard), "samples": n}],
        "totals": {"samples": n, "raw_bytes": sum(len(b["raw"]) for b in built),
                   "stored_bytes": len(shard)},
        "provenance": {"source_root": "/by/hand",
                       "sources": sum(1 for s in SAMPLES if s["source"][0]),
                       "created_by": "tests/data/make_golden_by_hand.py",
                       "created_at": "2026-01-02T03:04:05Z"},
    }
    expected = {
        "index_xxh3": "%016x" % index_xxh3, "index_size": file_size,
        "shards": [{"file": shard_name, "size": len(shard), "samples": n,
                    "uid": "%016x" % SHARD_UID}],
        "samples": [],
    }
    for i, (s, b) in enumerate(zip(SAMPLES, built)):
        path, sbytes, mtime, shash = s["source"]
        expected["samples"].append({
            "shard": 0, "flags": 0, "offset": b["offset"], "stored_size": len(b["raw"]),
            "raw_size": len(b["raw"]), "checksum": "%016x" % xxh3(b["raw"]), "length": s["len"],
            "tensors": [{"name": FIELDS[f][0], "dtype": FIELDS[f][1], "shape": b["shapes"][f],
                         "offset": b["entries"][f][0], "nbytes": b["entries"][f][1],
                         "hex": b["raw"][b["entries"][f][0]:sum(b["entries"][f])].hex()}
                        for f in range(f_count)],
            "metadata": [{"key": k, "type": t, "value": v} for k, t, v in s["meta"]],
            "source": {"path": path, "size": sbytes, "mtime_ns": mtime,
                       "content_hash": "%016x" % shash},
        })

    with open(os.path.join(OUT, shard_name), "wb") as fh:
        fh.write(shard)
    with open(os.path.join(OUT, "index.lsi"), "wb") as fh:
        fh.write(index)
    with open(os.path.join(OUT, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(OUT, "expected.json"), "w") as fh:
        json.dump(expected, fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    main()
