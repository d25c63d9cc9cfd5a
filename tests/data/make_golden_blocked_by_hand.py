#!/usr/bin/env python3
"""Writes tests/data/golden_by_hand_v2/, golden_by_hand_v3/ and golden_by_hand_v4/: the samples of
golden_by_hand (make_golden_by_hand.py), with an index of version 2 built from docs/FORMAT.md §3.8
alone (the index of sample blocks that versions 3 and 4 keep), one of version 3 (§3.9: the same
plus a checksum per field, header flags bit 1), and one of version 4 (§3.10: plus a block table
per sample, row-block checksums in a tables part).

As for version 1, nothing comes from libshard: every byte is laid out with struct.pack from the
spec, checksums are XXH3-64 from the `xxhash` package. The shard file and the samples are
golden_by_hand's (imported from make_golden_by_hand.py, which must have run first); the reader
must return exactly what its expected.json says (tests/format_golden_test.cc,
FormatGoldenTest.HandWrittenDatasetReads).

It uses freedoms the spec grants that the libshard writer does not use: two samples a block (so
two blocks, the last one short), columns wider than their values need (offset_pages 4 bytes,
lengths 2 bytes), a dim that never varies stored as a column instead of a constant, strings in
another order with unreferenced bytes between them; in version 4, row blocks of its own choosing
(2 and 4 rows, a field without blocks beside one with them), tables written in reverse sample
order with unreferenced bytes between them, and table columns wider than needed.

Run from anywhere (needs `pip install xxhash`); the output is deterministic:
    python3 tests/data/make_golden_blocked_by_hand.py
(It was tests/data/make_golden_v2_by_hand.py when golden_by_hand_v2 and _v3 were written; their
manifests keep that name in created_by.)
"""
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden_by_hand as v1  # noqa: E402  (the samples, their encodings and xxh3)

SRC = v1.OUT
HERE = os.path.dirname(os.path.abspath(__file__))
B = 2  # block_samples (§3.8.2): a power of two


def uint(v, width):
    """A little-endian unsigned value of `width` bytes (§3.8.6)."""
    assert 0 <= v < (1 << (8 * width)) or width == 0 and v == 0
    return v.to_bytes(width, "little")


def field_checksum(tensor):
    """§3.9: the low 32 bits of the xxh3-64 of the field's bytes (a raw tensor here)."""
    return v1.xxh3(bytes.fromhex(tensor["hex"])) & 0xFFFFFFFF


# §3.10.2: per sample, per field, the rows of a block (0: none). Sample 2 has no rows: no table.
BLOCK_ROWS = [{"tokens": 2, "hidden": 0}, {"tokens": 4, "hidden": 2}, {"tokens": 0, "hidden": 0}]


def block_table(i, s):
    """§3.10.2: the u32 words of sample i's block table (b"" when no field has blocks): per field
    block_rows, then (raw fields) the low 32 bits of the xxh3 of each block's bytes."""
    if not any(BLOCK_ROWS[i].values()):
        return b""
    words = b""
    for t in s["tensors"]:
        br = BLOCK_ROWS[i][t["name"]]
        words += struct.pack("<I", br)
        if br == 0:
            continue
        data = bytes.fromhex(t["hex"])
        rows = t["shape"][0]  # seq_dim 0: rows are dim 0
        row_bytes = len(data) // rows
        assert 1 <= br < rows
        for b in range(0, rows, br):
            words += struct.pack("<I", v1.xxh3(data[b * row_bytes:min(rows, b + br) * row_bytes])
                                 & 0xFFFFFFFF)
    return words


IDENTITY_ATTRIBUTES = {"target_model": "by/hand", "hidden_size": 4, "seed": -7}


def canonical_identity(schema, attributes):
    """§2.2: the canonical encoding of an identity (schema and attributes)."""
    def string(b):
        b = b.encode() if isinstance(b, str) else b
        return struct.pack("<I", len(b)) + b

    out = b"LSID" + struct.pack("<I", 1) + struct.pack("<I", len(schema["fields"]))
    names = [f["name"] for f in schema["fields"]]
    for f in schema["fields"]:
        out += string(f["name"]) + string(f["dtype"]) + struct.pack("<Ii", f["rank"], f["seq_dim"])
    lf = schema["length_field"]
    out += struct.pack("<i", -1 if lf is None else names.index(lf))
    out += struct.pack("<I", len(attributes))
    for key in sorted(attributes, key=lambda k: k.encode()):
        value = attributes[key]
        out += string(key)
        if isinstance(value, int):
            out += b"\0" + struct.pack("<q", value)
        else:
            out += b"\1" + string(value)
    return out


def main(version):
    OUT = os.path.join(HERE, "golden_by_hand_v%d" % version)
    os.makedirs(OUT, exist_ok=True)
    expected = json.load(open(os.path.join(SRC, "expected.json")))
    shard_name = "shard-00000.lss"
    shard = open(os.path.join(SRC, shard_name), "rb").read()
    samples = expected["samples"]
    n, f_count, s_count = len(samples), len(v1.FIELDS), 1
    d = sum(r for _, _, r, _ in v1.FIELDS)  # tokens [L], hidden [L, 4]
    k_count = (n + B - 1) // B

    # Strings (§3.8.3), our own order, unreferenced bytes between.
    strings = bytearray(b"filler")
    refs = {}
    for key, data in [("shard", shard_name.encode())] + [
            (("field", nm), nm.encode()) for nm, _, _, _ in reversed(v1.FIELDS)]:
        refs[key] = (len(strings), len(data))
        strings += data + b"#"
    strings_size = len(strings)
    strings += b"\0" * (v1.align(len(strings), 8) - len(strings))

    fields = b""
    for nm, dt, rank, seq in v1.FIELDS:
        off, size = refs[("field", nm)]
        # dtype, rank, codec 0 (raw), seq_dim, name_size, stored_width 0, reserved, name_offset,
        # codec_params (zero for a raw field).
        fields += struct.pack("<IHHiHBBQ", v1.DTYPES[dt][0], rank, 0, seq, size, 0, 0, off)
        fields += bytes(8)
    # Dims: tokens[0] = the length (kind 1); hidden[0] = the length; hidden[1] = 4, stored as a
    # 2-byte column (kind 2) although it never varies.
    dim_kinds = [(1, 0, 0), (1, 0, 0), (2, 2, 0)]
    dims = b"".join(struct.pack("<BB6xQ", kind, width, value) for kind, width, value in dim_kinds)
    shards = struct.pack("<QQQQQ", *refs["shard"], len(shard), n, v1.SHARD_UID)

    # Columns (§3.8.6): shard, offset_pages, stored_size (0: derived), checksum (8), flags,
    # source_bytes, source_mtime_ns, source_hash, path_end, meta_end.
    widths = [1, 4, 0, 8, 0, 4, 8, 8, 2, 2]
    length_width = 2

    head_size = 128 + len(fields) + len(dims) + len(shards) + 16 * k_count + len(strings)
    lengths = b"".join(uint(s["length"], length_width) for s in samples)
    lengths += b"\0" * (v1.align(len(lengths), 8) - len(lengths))

    # §3.10.1: the tables part, written in reverse sample order with 4 filler bytes before each
    # table (readers ignore bytes no record points at); a sample without a table has 0, 0, 0.
    TABLE_WIDTHS = (3, 2)  # wider than needed
    tables, tables_at = b"", [(0, 0, 0)] * n
    if version == 4:
        for i in reversed(range(n)):
            t = block_table(i, samples[i])
            if t:
                tables += b"pad!"
                tables_at[i] = (len(tables), len(t), v1.xxh3(t) & 0xFFFFFFFF)
                tables += t

    blocks = []
    for b in range(k_count):
        records, paths, metas = b"", b"", b""
        for i in range(b * B, min(n, (b + 1) * B)):
            s, src = samples[i], v1.SAMPLES[i]
            path = s["source"]["path"].encode()
            if path:  # front coding (§3.8.6): nothing shared at a block's first record
                paths += struct.pack("<H", 0) + path
            metas += v1.encode_meta(src["meta"])
            hidden = next(t for t in s["tensors"] if t["name"] == "hidden")["shape"]
            records += b"".join([
                uint(s["shard"], widths[0]), uint(s["offset"] // 4096, widths[1]),
                uint(int(s["checksum"], 16), widths[3]),
                uint(s["source"]["size"], widths[5]),
                uint(s["source"]["mtime_ns"] & (2**64 - 1), widths[6]),
                uint(int(s["source"]["content_hash"], 16), widths[7]),
                uint(len(paths), widths[8]), uint(len(metas), widths[9]),
                uint(hidden[1], 2)])  # the kind-2 dim column
            if version >= 3:  # §3.9: the field checksums, one per field, of its tensor bytes
                for t in s["tensors"]:
                    records += uint(field_checksum(t), 4)
            if version == 4:  # §3.10.1: table_offset, table_size, table_checksum
                t_off, t_size, t_sum = tables_at[i]
                records += uint(t_off, TABLE_WIDTHS[0]) + uint(t_size, TABLE_WIDTHS[1])
                records += uint(t_sum, 4)
        blocks.append(records + paths + metas)

    directory = b""
    offset = head_size + len(lengths)
    for blk in blocks:
        directory += struct.pack("<QQ", offset, v1.xxh3(blk))
        offset += len(blk)
    tables_offset = offset
    file_size = offset + len(tables)

    header = bytearray(128)
    header[0:8] = b"LSHDIDX\0"
    flags = 1 | (2 if version >= 3 else 0)  # shard uids; field checksums (§3.9)
    struct.pack_into("<IIQIIIiQQQQ", header, 8, version, flags, n, f_count, s_count, B,
                     v1.LENGTH_FIELD,
                     strings_size, v1.xxh3(lengths), file_size,
                     sum(s["raw_size"] for s in samples))
    header[72] = length_width
    header[73:83] = bytes(widths)
    struct.pack_into("<I", header, 84, d)
    if version == 4:  # §3.10.1
        struct.pack_into("<Q", header, 88, tables_offset)
        header[96], header[97] = TABLE_WIDTHS
    head = header + fields + dims + shards + directory + strings
    assert len(head) == head_size
    struct.pack_into("<Q", head, 120, v1.xxh3(head))  # §3.8.2: hashed with 120..127 zero
    index = bytes(head) + lengths + b"".join(blocks) + tables
    assert len(index) == file_size
    index_xxh3 = struct.unpack_from("<Q", head, 120)[0]

    manifest = json.load(open(os.path.join(SRC, "manifest.json")))
    manifest["version"] = version
    manifest["index"] = {"file": "index.lsi", "size": file_size, "xxh3": "%016x" % index_xxh3}
    manifest["provenance"]["created_by"] = (
        "tests/data/make_golden_blocked_by_hand.py" if version >= 4
        else "tests/data/make_golden_v2_by_hand.py")  # the script's name when it wrote them
    expected["index_xxh3"] = "%016x" % index_xxh3
    expected["index_size"] = file_size
    if version >= 3:
        for s in samples:
            s["field_checksums"] = ["%016x" % field_checksum(t) for t in s["tensors"]]
    if version == 4:
        for i, s in enumerate(samples):
            s["block_table"] = block_table(i, s).hex()
    if version >= 3:
        # §2.2: attributes, and the identity's digest of the canonical encoding of the schema and
        # them, recorded as provenance.identity.
        manifest["provenance"]["attributes"] = IDENTITY_ATTRIBUTES
        digest = "%016x" % v1.xxh3(canonical_identity(manifest["schema"], IDENTITY_ATTRIBUTES))
        manifest["provenance"]["identity"] = {"version": 1, "xxh3": digest}
        expected["identity"] = digest

    shutil.copyfile(os.path.join(SRC, shard_name), os.path.join(OUT, shard_name))
    with open(os.path.join(OUT, "index.lsi"), "wb") as fh:
        fh.write(index)
    with open(os.path.join(OUT, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(OUT, "expected.json"), "w") as fh:
        json.dump(expected, fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    for v in sys.argv[1:] and [int(a) for a in sys.argv[1:]] or (2, 3, 4):
        main(v)
