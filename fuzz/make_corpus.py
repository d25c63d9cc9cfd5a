#!/usr/bin/env python3
"""Regenerates the fuzz seed corpora under fuzz/corpus/<target>/ from the test fixtures.

Usage: python3 fuzz/make_corpus.py   (from anywhere; writes next to this script)

Seeds are made from tests/data/pt/* (torch.save zips, their data.pkl, gzips, safetensors),
tests/data/golden_v1*/ (index.lsi, manifest.json, shard headers, per-sample metadata, and journals
re-encoded from the golden indexes per FORMAT.md §6), plus hand-made hostile inputs: the cases of
issue 9 (a pickle bomb of memo references, deep nesting, a gzip of zeros in many members,
overlapping safetensors offsets, non-UTF-8 keys, forged counts), and issue 33's object storage
inputs (S3 XML replies, ~/.aws files, the cache's state files and .usage, upload.journal). Every file is small (under
64 KiB) except the 200,000-deep manifest, which the issue asks for as it is.

The targets' input layouts (flag bytes) are described at the top of each fuzz/<target>.cc.
Needs only the Python standard library and libxxhash (for the journal's checksums).
"""

import ctypes
import ctypes.util
import gzip
import io
import json
import shutil
import struct
import zipfile
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent
PT = ROOT / "tests" / "data" / "pt"
# Complete datasets named index.lsi (golden_v1_append names index.a.lsi; golden_v1_journal holds
# only a journal).
GOLDEN = sorted(g for g in (ROOT / "tests" / "data").glob("golden_v1*") if (g / "index.lsi").exists())
CORPUS = FUZZ / "corpus"
MAX_SEED = 64 << 10

_xxh = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
_xxh.XXH3_64bits.restype = ctypes.c_uint64
_xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(b: bytes) -> int:
    return _xxh.XXH3_64bits(b, len(b))


class Corpus:
    def __init__(self, target: str):
        self.dir = CORPUS / target
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)

    def add(self, name: str, data: bytes, allow_large: bool = False):
        assert allow_large or len(data) <= MAX_SEED, (self.dir.name, name, len(data))
        (self.dir / name).write_bytes(data)


def pt_files():
    return sorted(p for p in PT.iterdir() if p.suffix in (".pt", ".ckpt"))


def data_pkl(path: Path):
    """The data.pkl record of a torch.save zip, or None (legacy files)."""
    try:
        with zipfile.ZipFile(path) as z:
            for n in z.namelist():
                if n.endswith("/data.pkl"):
                    return z.read(n)
    except zipfile.BadZipFile:
        return None
    return None


def with_pickle(path: Path, pkl: bytes) -> bytes:
    """`path` (a torch.save zip) with its data.pkl replaced, stored like torch.save does."""
    out = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = pkl if info.filename.endswith("/data.pkl") else src.read(info.filename)
            dst.writestr(zipfile.ZipInfo(info.filename), data)
    return out.getvalue()


# --- hostile pickles (protocol 2 opcodes) -------------------------------------------------------

PROTO2 = b"\x80\x02"


def binunicode(s: bytes) -> bytes:
    return b"X" + struct.pack("<I", len(s)) + s


def pickle_bomb(string_bytes: int, fanout: int, levels: int) -> bytes:
    """{"a0": s, "a1": L_1, ..., "aN": L_N} where s is a string of `string_bytes` and L_i is a
    list of `fanout` memo references to L_{i-1} (s for L_1): fanout**levels references,
    string_bytes * fanout**levels bytes when flattened, from a pickle of about
    string_bytes + 5 * fanout * levels bytes."""
    p = PROTO2 + b"}" + binunicode(b"a0")
    p += binunicode(b"A" * string_bytes) + b"r" + struct.pack("<I", 0) + b"s"  # LONG_BINPUT 0
    for level in range(1, levels + 1):
        p += binunicode(b"a%d" % level)
        p += b"](" + (b"j" + struct.pack("<I", level - 1)) * fanout + b"e"  # LONG_BINGET, APPENDS
        p += b"r" + struct.pack("<I", level) + b"s"  # memoize, SETITEM
    return p + b"."


def deep_list(depth: int) -> bytes:
    """{"k": [[[...]]]} nested `depth` lists deep."""
    return PROTO2 + b"}" + binunicode(b"k") + b"]" * depth + b"a" * (depth - 1) + b"s."


def mark_flood(n: int) -> bytes:
    return PROTO2 + b"(" * n + b"."


def non_utf8_key() -> bytes:
    k = b"\xff\xfe\xc0\x80"
    return PROTO2 + b"}" + b"X" + struct.pack("<I", len(k)) + k + b"K\x01s."


def tensor_refs(path: Path, n: int) -> bytes:
    """A list of `n` memo references to the first REDUCE result (a tensor) of `path`'s pickle."""
    pkl = data_pkl(path)
    # Appended after the original root: a dict {"t": [ref]*n} built from memo slot 1 (torch.save
    # memoizes each rebuilt tensor; slot numbers differ per file, the fuzzer adjusts them).
    body = pkl[:-1]  # drop STOP; the root dict stays on the stack
    body += binunicode(b"refs") + b"](" + b"h\x01" * n + b"es."
    return body


# --- targets -------------------------------------------------------------------------------------


def pickle_corpus():
    c = Corpus("pickle_fuzz")
    for p in pt_files():
        pkl = data_pkl(p)
        if pkl is not None:
            c.add(p.stem + ".pkl", pkl)
    c.add("bomb_memo_1m_refs.pkl", pickle_bomb(32 << 10, 16, 5))  # 16^5 = 1M refs to 32 KiB
    c.add("bomb_memo_tensor.pkl", tensor_refs(PT / "one_key.pt", 4000))
    c.add("deep_list_30k.pkl", deep_list(30000))
    c.add("mark_flood.pkl", mark_flood(60000))
    c.add("non_utf8_key.pkl", non_utf8_key())
    return c


def zip_corpus():
    c = Corpus("zip_fuzz")
    for p in pt_files():
        data = p.read_bytes()
        c.add(p.name + ".nocrc", b"\x01" + data)  # flag bit 0: CRC-32 checks off
    for name in ("one_key.pt", "zip64_small.pt", "views.pt"):
        c.add(name + ".crc", b"\x00" + (PT / name).read_bytes())
    one = PT / "one_key.pt"
    c.add("bomb_memo.pt", b"\x01" + with_pickle(one, pickle_bomb(4 << 10, 16, 5)))
    c.add("deep_list.pt", b"\x01" + with_pickle(one, deep_list(20000)))
    c.add("non_utf8_key.pt", b"\x01" + with_pickle(one, non_utf8_key()))
    data = one.read_bytes()
    c.add("truncated.pt", b"\x01" + data[: len(data) // 2])
    c.add("eocd_only.pt", b"\x01" + data[data.rfind(b"PK\x05\x06"):])
    return c


def gzip_corpus():
    c = Corpus("gzip_fuzz")
    for p in sorted(PT.glob("*.gz")):
        c.add(p.name, p.read_bytes())
    for name in ("one_key.pt", "views.pt", "nested.pt", "all_dtypes.safetensors", "metadata.pt"):
        c.add(name + ".gz", gzip.compress((PT / name).read_bytes(), mtime=0))
    # Two members: a .pt split across concatenated gzip members.
    data = (PT / "one_key.pt").read_bytes()
    half = len(data) // 2
    c.add("two_members.pt.gz", gzip.compress(data[:half], mtime=0) + gzip.compress(data[half:], mtime=0))
    # Zeros in many members: 48 members of 1 MiB each inflate far past the target's 1 MiB limit.
    member = gzip.compress(bytes(1 << 20), compresslevel=9, mtime=0)
    c.add("zeros_48_members.gz", member * 48)
    c.add("zeros_one_member.gz", gzip.compress(bytes(48 << 20), compresslevel=9, mtime=0))
    c.add("nested.gz.gz", gzip.compress(gzip.compress(data, mtime=0), mtime=0))
    gz = gzip.compress(data, mtime=0)
    c.add("truncated.gz", gz[: len(gz) // 2])
    c.add("bad_trailer.gz", gz[:-8] + b"\0" * 8)
    return c


def safetensors(header, data: bytes = b"", raw_header: bytes = None) -> bytes:
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_corpus():
    c = Corpus("safetensors_fuzz")
    for p in sorted(PT.glob("*.safetensors")):
        c.add(p.name, p.read_bytes())
    c.add("small.safetensors", safetensors(
        {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
         "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
         "__metadata__": {"source": "x"}}, bytes(range(22))))
    c.add("overlap.safetensors", safetensors(
        {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
         "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(24)))
    c.add("same_range.safetensors", safetensors(
        {"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
         "b": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}}, bytes(8)))
    c.add("non_utf8_key.safetensors", safetensors(
        None, bytes(4), raw_header=b'{"\xff\xfe":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}'))
    c.add("shape_overflow.safetensors", safetensors(
        {"a": {"dtype": "F64", "shape": [1 << 32, 1 << 32, 16], "data_offsets": [0, 0]}}))
    c.add("offsets_past_end.safetensors", safetensors(
        {"a": {"dtype": "U8", "shape": [16], "data_offsets": [0, 1 << 62]}}, bytes(16)))
    c.add("header_len_huge.safetensors", struct.pack("<Q", 1 << 63) + b"{}")
    c.add("deep_json.safetensors", safetensors(None, raw_header=b"[" * 30000 + b"]" * 30000))
    c.add("duplicate_key.safetensors", safetensors(
        None, bytes(4), raw_header=b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                                   b'"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}'))
    c.add("metadata_types.safetensors", safetensors(
        {"__metadata__": {"n": 1, "l": [1, 2], "d": {"x": None}},
         "a": {"dtype": "BOOL", "shape": [], "data_offsets": [0, 1]}}, b"\x01"))
    return c


def golden_indexes():
    return [(g.name, (g / "index.lsi").read_bytes()) for g in GOLDEN]


def with_checksum(index: bytes) -> bytes:
    b = bytearray(index)
    b[120:128] = bytes(8)
    b[120:128] = struct.pack("<Q", xxh3(bytes(b)))
    return bytes(b)


def index_corpus():
    c = Corpus("index_fuzz")
    for name, idx in golden_indexes():
        c.add(name + ".lsi", b"\x00" + idx)
        c.add(name + ".raw.lsi", b"\x01" + idx)
    # Version 2, 3 and 4 indexes (FORMAT.md §3.8, §3.9, §3.10); flag 0 lets the target reseal
    # their checksums.
    data = ROOT / "tests" / "data"
    for g in sorted([*data.glob("golden_v2*"), *data.glob("golden_v3*"), *data.glob("golden_v4*"),
                     data / "golden_by_hand_v3", data / "golden_by_hand_v4"]):
        for f in sorted(g.glob("index*.lsi")):
            c.add(g.name + ".lsi", b"\x00" + f.read_bytes())
            c.add(g.name + ".raw.lsi", b"\x01" + f.read_bytes())
            forged = bytearray(f.read_bytes())
            forged[16:24] = struct.pack("<Q", 1 << 40)  # N = 2^40, refused from the header
            c.add(g.name + ".forged_count.lsi", b"\x00" + bytes(forged))
    idx = bytearray(golden_indexes()[0][1])
    forged = bytearray(idx)
    forged[16:24] = struct.pack("<Q", 1 << 60)  # N = 2^60 (FORMAT.md §3.1)
    c.add("forged_count.lsi", b"\x01" + with_checksum(bytes(forged)))
    forged = bytearray(idx)
    forged[24:28] = struct.pack("<I", 0xFFFFFFFF)  # F = 2^32 - 1
    c.add("forged_fields.lsi", b"\x01" + with_checksum(bytes(forged)))
    c.add("header_only.lsi", b"\x00" + bytes(idx[:128]))
    return c


def parse_index(idx: bytes):
    n, f_count, s_count = struct.unpack_from("<QII", idx, 16)
    fields_off, _, samples_off, tensors_off, dims_off, blob_off = struct.unpack_from("<6Q", idx, 32)
    (length_field,) = struct.unpack_from("<i", idx, 96)
    blob = lambda off, size: idx[blob_off + off: blob_off + off + size]
    fields = []
    for f in range(f_count):
        dtype, rank, seq_dim, _, name_off, name_size = struct.unpack_from(
            "<IIiIQQ", idx, fields_off + 32 * f)
        fields.append((dtype, rank, seq_dim, blob(name_off, name_size)))
    d = sum(f[1] for f in fields)
    samples = []
    for i in range(n):
        rec = bytearray(idx[samples_off + 128 * i: samples_off + 128 * (i + 1)])
        meta_off, meta_size, src_off, src_size = struct.unpack_from("<4Q", rec, 48)
        rec[48:80] = bytes(32)
        tensors = idx[tensors_off + 16 * f_count * i: tensors_off + 16 * f_count * (i + 1)]
        dims = idx[dims_off + 8 * d * i: dims_off + 8 * d * (i + 1)]
        samples.append((bytes(rec[:104]), tensors, dims, blob(meta_off, meta_size),
                        blob(src_off, src_size)))
    return fields, length_field, samples


def journal_entry(kind: int, payload: bytes) -> bytes:
    e = struct.pack("<IIQ", 0x454A534C, kind, len(payload)) + payload
    return e + struct.pack("<Q", xxh3(e))


def journal_from_index(idx: bytes, per_entry: int) -> bytes:
    """The journal (FORMAT.md §6) a writer would have left after writing `idx`'s samples."""
    fields, length_field, samples = parse_index(idx)
    h = b"LSHDJNL\0" + struct.pack("<IIIi", 1, 0, len(fields), length_field)
    for dtype, rank, seq_dim, name in fields:
        h += struct.pack("<IIiI", dtype, rank, seq_dim, len(name)) + name
    out = journal_entry(1, h)
    for first in range(0, len(samples), per_entry):
        batch = samples[first: first + per_entry]
        p = struct.pack("<QII", first, len(batch), 0)
        for rec, tensors, dims, meta, path in batch:
            p += rec + tensors + dims + struct.pack("<I", len(meta)) + meta
            p += struct.pack("<I", len(path)) + path
        out += journal_entry(2, p)
    return out


def journal_corpus():
    c = Corpus("journal_fuzz")
    for name, idx in golden_indexes():
        for per in (1, 4):
            j = journal_from_index(idx, per)
            c.add(f"{name}_per{per}.lsj", b"\x01" + j)
            c.add(f"{name}_per{per}.fix.lsj", b"\x00" + j)
        c.add(f"{name}_torn.lsj", b"\x01" + j[:-5])
    j = journal_from_index(golden_indexes()[0][1], 2)
    c.add("header_only.lsj", b"\x01" + j[: j.find(b"LSJE", 4)])
    # The writers' own journals: before field checksums, with them (header flags bit 0, §6), and
    # with block tables (bit 1).
    for name in ("golden_v1_journal", "golden_v3_journal", "golden_v4_journal"):
        j = (ROOT / "tests" / "data" / name / "_journal.lsj").read_bytes()
        c.add(f"{name}.lsj", b"\x01" + j)
        c.add(f"{name}.fix.lsj", b"\x00" + j)
    return c


def manifest_corpus():
    c = Corpus("manifest_fuzz")
    for g in GOLDEN:
        c.add(g.name + ".json", (g / "manifest.json").read_bytes())
    text = (GOLDEN[0] / "manifest.json").read_text()
    c.add("deep_list_200k.json", b"[" * 200000 + b"]" * 200000, allow_large=True)
    c.add("deep_object.json", b'{"a":' * 10000 + b"1" + b"}" * 10000)
    c.add("non_utf8_name.json", text.replace('"input_ids"', '"\\udcff"').encode())
    c.add("raw_non_utf8_name.json", text.encode().replace(b'"input_ids"', b'"\xff\xfe"'))
    c.add("huge_numbers.json", text.replace('"size": 3286', '"size": 1e400').encode())
    for name, case in identity_manifests().items():
        c.add(name, case)
    return c


def identity_manifests():
    """provenance.identity (FORMAT.md §2.2): recorded and matching, of another digest (refused),
    of a later version (ignored), not an object, and attributes with it."""
    data = ROOT / "tests" / "data"
    out = {"golden_v3.json": (data / "golden_v3" / "manifest.json").read_bytes(),
           "identity_by_hand.json": (data / "golden_by_hand_v3" / "manifest.json").read_bytes()}
    m = json.loads(out["identity_by_hand.json"])
    m["provenance"]["identity"]["xxh3"] = "0123456789abcdef"
    out["identity_mismatch.json"] = json.dumps(m).encode()
    m["provenance"]["identity"]["version"] = 2
    out["identity_version2.json"] = json.dumps(m).encode()
    m["provenance"]["identity"] = "0123456789abcdef"
    out["identity_not_object.json"] = json.dumps(m).encode()
    m["provenance"]["identity"] = {"version": 1, "xxh3": 7}
    out["identity_bad_digest.json"] = json.dumps(m).encode()
    return out


def metadata_corpus():
    c = Corpus("metadata_fuzz")
    for name, idx in golden_indexes():
        for i, (_, _, _, meta, _) in enumerate(parse_index(idx)[2]):
            if meta:
                c.add(f"{name}_meta{i}", b"\x00" + meta)
        for g in GOLDEN:
            if g.name == name:
                header = (g / "shard-00000.lss").read_bytes()[:4096]
                c.add(f"{name}_shard_header", b"\x01" + header)
                c.add(f"{name}_shard_header.raw", b"\x03" + header)
    big = struct.pack("<I", 0xFFFFFFFF) + struct.pack("<H", 1) + b"k" + b"\x04" + struct.pack("<I", 1 << 31)
    c.add("forged_count_meta", b"\x00" + big)
    return c


def codec_region(codec: int, dtype: int, rows: int, row_elems: int, chunk_rows: int, values) -> bytes:
    """A FORMAT.md §4.3 region with every chunk stored (mode 0): planes (2) or zstd (1) of 2-byte
    values, so seeds reach the decoders' chunk paths without a zstd encoder here."""
    count = (rows + chunk_rows - 1) // chunk_rows
    head = b"LSFC" + bytes([codec, dtype, 0, 0]) + struct.pack("<QQII", rows, row_elems, chunk_rows, count)
    table, body = b"", b""
    for c in range(count):
        vals = values[c * chunk_rows * row_elems:(c + 1) * chunk_rows * row_elems]
        lo = bytes(v & 0xFF for v in vals)
        hi = bytes(v >> 8 for v in vals)
        table += struct.pack("<IB3x", len(hi) if codec == 2 else 2 * len(vals), 0)
        body += lo + hi
    return head + table + body


def planes2_region(dtype: int, rows: int, row_elems: int, chunk_rows: int, values) -> bytes:
    """A FORMAT.md §4.3.7 (codec 5) region, every chunk stored (mode 0), no channel base: fixed
    part the low bytes then a sign bitmap per row, plane the 7 exponent bits."""
    count = (rows + chunk_rows - 1) // chunk_rows
    head = b"LSFC" + bytes([5, dtype, 0, 0]) + struct.pack("<QQII", rows, row_elems, chunk_rows, count)
    table, body = b"", b""
    for c in range(count):
        vals = values[c * chunk_rows * row_elems:(c + 1) * chunk_rows * row_elems]
        signs = b""
        for r in range(len(vals) // row_elems):
            row = vals[r * row_elems:(r + 1) * row_elems]
            bits = bytearray((row_elems + 7) // 8)
            for k, v in enumerate(row):
                bits[k // 8] |= (v >> 15) << (k % 8)
            signs += bytes(bits)
        table += struct.pack("<IB3x", len(vals), 0)
        body += bytes(v & 0xFF for v in vals) + signs + bytes((v >> 8) & 0x7F for v in vals)
    return head + table + body


def fp8_planes_region(dtype: int, rows: int, row_elems: int, chunk_rows: int, codes, scales) -> bytes:
    """A FORMAT.md §4.3.8 (codec 6) region, every chunk stored (mode 0), no channel base: fixed
    part the row scales then a nibble row per row (sign and mantissa bits), plane the exponent
    fields."""
    count = (rows + chunk_rows - 1) // chunk_rows
    head = b"LSFC" + bytes([6, dtype, 0, 0]) + struct.pack("<QQII", rows, row_elems, chunk_rows, count)
    table, body = b"", b""
    for c in range(count):
        r0, r1 = c * chunk_rows, min(rows, (c + 1) * chunk_rows)
        nibbles = b""
        for r in range(r0, r1):
            row = codes[r * row_elems:(r + 1) * row_elems]
            nib = bytearray((row_elems + 1) // 2)
            for k, q in enumerate(row):
                nib[k // 2] |= (((q >> 4) & 8) | (q & 7)) << (4 * (k % 2))
            nibbles += bytes(nib)
        plane = bytes((q >> 3) & 0x0F for q in codes[r0 * row_elems:r1 * row_elems])
        table += struct.pack("<IB3x", len(plane), 0)
        body += struct.pack(f"<{r1 - r0}f", *scales[r0:r1]) + nibbles + plane
    return head + table + body


def codec_corpus():
    import random
    c = Corpus("codec_fuzz")
    rng = random.Random(10)
    hidden = [0x3F80 + rng.randrange(-600, 600) ^ (0x8000 if rng.random() < 0.5 else 0)
              for _ in range(4 * 40)]
    for codec in (1, 2):
        # decode mode: byte 0 = codec - 1 (codec 1 with dtype selector 0 = bfloat16)
        region = codec_region(codec, 11, 4, 40, 3, hidden)
        c.add(f"region_codec{codec}", bytes([codec - 1, 4, 40, 2, 0, 0, 0, 0]) + region)
    for codec in (1, 2, 3, 4):
        for fp16 in (0, 4):
            payload = struct.pack(f"<{len(hidden)}H", *hidden)
            head = bytes([(codec - 1) | fp16 | 8, 4, 40, 3, 5, 7, 0, 0x10])
            c.add(f"roundtrip_codec{codec}_{'f16' if fp16 else 'bf16'}", head + payload)
    specials = [0x7F81, 0xFFC5, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x8000, 0x0000] * 9
    c.add("roundtrip_specials", bytes([8 | 1, 9, 8, 4, 2, 3, 0, 0x80]) + struct.pack("<72H", *specials))
    c.add("roundtrip_fp8_specials", bytes([8 | 2, 9, 8, 4, 2, 3, 0, 0x80]) + struct.pack("<72H", *specials))
    wide = [0x3F80 + rng.randrange(-900, 900) ^ (0x8000 if rng.random() < 0.3 else 0) for _ in range(3 * 640)]
    for codec in (2, 4):  # rows of 640: channel base and fp8 tables
        c.add(f"roundtrip_wide_codec{codec}", bytes([0x80 | 8 | (codec - 1), 3, 80, 2, 64, 9, 1, 0x04]) +
              struct.pack(f"<{len(wide)}H", *wide))
    # Codec 5 (planes2): byte 0 bit 5 with codec 2's selector.
    c.add("region_codec5", bytes([0x20 | 1, 4, 40, 2, 0, 0, 0, 0]) + planes2_region(11, 4, 40, 3, hidden))
    c.add("region_codec5_odd_rows", bytes([0x20 | 4 | 1, 3, 9, 1, 0, 0, 0, 0]) +
          planes2_region(10, 3, 9, 2, hidden[:27]))
    for fp16 in (0, 4):
        c.add(f"roundtrip_codec5_{'f16' if fp16 else 'bf16'}",
              bytes([0x20 | 1 | fp16 | 8, 4, 40, 3, 5, 7, 0, 0x10]) + struct.pack(f"<{len(hidden)}H", *hidden))
    c.add("roundtrip_codec5_specials", bytes([0x20 | 8 | 1, 9, 7, 4, 2, 3, 0, 0x80]) +
          struct.pack("<72H", *specials))
    c.add("roundtrip_wide_codec5", bytes([0x20 | 0x80 | 8 | 1, 3, 80, 2, 64, 9, 1, 0x04]) +
          struct.pack(f"<{len(wide)}H", *wide))
    # Codec 6 (fp8-planes): byte 0 bit 5 with codec 4's selector.
    codes = [rng.randrange(256) for _ in range(4 * 40)]
    c.add("region_codec6", bytes([0x20 | 3, 4, 40, 2, 0, 0, 0, 0]) +
          fp8_planes_region(11, 4, 40, 3, codes, [0.5, 1.0, 0.0, 3.0]))
    c.add("region_codec6_odd_rows", bytes([0x20 | 4 | 3, 3, 9, 1, 0, 0, 0, 0]) +
          fp8_planes_region(10, 3, 9, 2, codes[:27], [0.25, 2.0, 1.0]))
    for fp16 in (0, 4):
        c.add(f"roundtrip_codec6_{'f16' if fp16 else 'bf16'}",
              bytes([0x20 | 3 | fp16 | 8, 4, 40, 3, 5, 7, 0, 0x10]) + struct.pack(f"<{len(hidden)}H", *hidden))
    c.add("roundtrip_codec6_specials", bytes([0x20 | 8 | 3, 9, 7, 4, 2, 3, 0, 0x80]) +
          struct.pack("<72H", *specials))
    c.add("roundtrip_wide_codec6", bytes([0x20 | 0x80 | 8 | 3, 3, 80, 2, 64, 9, 1, 0x04]) +
          struct.pack(f"<{len(wide)}H", *wide))
    # Row blocks (FORMAT.md §3.10.2): 40 rows in chunks of byte 4 / 8 + 1 = 4 rows; rows
    # [byte 3 mod 40 = 13, + 1 + byte 7 mod 40 = 23) decoded from the head and chunks 3..8.
    for codec, sel in ((1, 0), (2, 1), (5, 0x20 | 1), (3, 2), (6, 0x20 | 3)):
        c.add(f"roundtrip_rows_codec{codec}",
              bytes([sel | 8, 40, 4, 13, 24, 2, 5, 22]) + struct.pack(f"<{len(hidden)}H", *hidden))
    c.add("roundtrip_rows_wide_codec5", bytes([0x20 | 0x80 | 8 | 1, 3, 80, 1, 0, 1, 9, 1]) +
          struct.pack(f"<{len(wide)}H", *wide))
    return c


def collate_corpus():
    """Batches for collate_fuzz: [mode][dtype][seq_dim + 1][pad f64 BE][samples - 1], then per
    sample [rank] and its dims (one byte each below 64)."""
    c = Corpus("collate_fuzz")
    def batch(mode, dtype, seq_dim, pad, shapes):
        out = bytes([mode, dtype - 1, seq_dim + 1]) + struct.pack(">d", pad) + bytes([len(shapes) - 1])
        for shape in shapes:
            out += bytes([len(shape)]) + bytes(shape)
        return out
    eagle = [(1, 5, 8), (1, 9, 8), (1, 2, 8)]
    for mode in (0, 1):
        name = "pack" if mode else "pad"
        c.add(f"{name}_hidden_bf16", batch(mode, 11, 1, 0.0, eagle))
        c.add(f"{name}_ids_int64", batch(mode, 6, 0, -100.0, [(5,), (9,), (1,)]))
        c.add(f"{name}_no_seq_dim", batch(mode, 12, -1, 0.0, [(1, 4), (1, 4)]))
        c.add(f"{name}_mismatch", batch(mode, 11, 1, 0.0, [(1, 5, 8), (1, 5, 9)]))
        c.add(f"{name}_empty_rows", batch(mode, 10, 1, 1.5, [(1, 0, 8), (1, 3, 8)]))
        # A dim of 2^61 (width 3 with the huge flag): only Plan runs; it must not overflow.
        c.add(f"{name}_huge", batch(mode, 2, 0, 0.0, [(1,), (1,)])[:-2] + bytes([1, 0xE0, 0, 0, 1]))
    return c


def cache_blob(fmt: int, files) -> bytes:
    """A directory as cache_fuzz reads it: a format byte, then (u8 name length, name, u32 size,
    bytes) per file."""
    out = bytearray([fmt])
    for name, data in files.items():
        raw = name.encode()
        out += bytes([len(raw)]) + raw + struct.pack("<I", len(data)) + data
    return bytes(out)


def cache_corpus():
    """DeepSpec, NeMo AutoModel and TorchSpec caches (tests/python/cache_writers.py, written from
    their formats) and hostile variants: forged counts, offsets past a shard, names that leave the
    directory, a shard-size mismatch, duplicate ids."""
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from cache_writers import automodel_files, deepspec_files

    c = Corpus("cache_fuzz")
    samples = []
    for i, L in enumerate((3, 5, 2, 4)):
        samples.append({"input_ids": bytes(range(4 * L)), "attention_mask": b"\x01" * L,
                        "loss_mask": bytes([i % 2]) * L, "target_hidden_states": bytes(2 * 2 * 4 * L),
                        "target_last_hidden_states": bytes([7]) * (2 * 4 * L)})
    ds = deepspec_files(samples, layer_ids=[1, 2], hidden_size=4, max_shard_bytes=200,
                        extra={"target_model_name_or_path": "m"})
    c.add("deepspec.bin", cache_blob(0, ds))
    c.add("deepspec_auto.bin", cache_blob(3, ds))
    fp8 = deepspec_files([{**s, "target_hidden_states": s["target_hidden_states"][::2],
                           "target_last_hidden_states": s["target_last_hidden_states"][::2]}
                          for s in samples], layer_ids=[1, 2], hidden_size=4,
                         hidden_dtype="float8_e4m3fn")
    c.add("deepspec_fp8.bin", cache_blob(0, fp8))
    lie = dict(ds)
    lie["manifest.json"] = lie["manifest.json"].replace(b'"num_samples": 4', b'"num_samples": 1152921504606846976')
    c.add("deepspec_count_lie.bin", cache_blob(0, lie))
    past = dict(ds)
    idx = bytearray(past["samples.idx"])
    idx[56 + 16 + 24:56 + 16 + 32] = struct.pack("<Q", 2 ** 64 - 8)
    past["samples.idx"] = bytes(idx)
    c.add("deepspec_offset_past.bin", cache_blob(0, past))
    escape = dict(ds)
    escape["manifest.json"] = escape["manifest.json"].replace(b'"shard-00001.bin"', b'"../shard-00001.bin"')
    c.add("deepspec_escape.bin", cache_blob(0, escape))

    # An EAGLE-3 cache AutoModel's reader reads (its five common tensors and the full
    # target_probs, draft_vocab_size 8), its top-k form, a DSpark cache, and what AutoModel's own
    # reader refuses (a format_version it does not read, a target_probs_topk the shards contradict,
    # a missing or mistyped draft_vocab_size, a byte-order mark, a shard without a tensor).
    common = {"input_ids": ("int64", [3], [bytes(range(i, i + 24)) for i in range(5)]),
              "attention_mask": ("int64", [3], [bytes(24)] * 5),
              "loss_mask": ("int64", [3], [bytes([1]) * 24] * 5),
              "aux_hidden_states": ("bfloat16", [3, 2], [bytes([i]) * 12 for i in range(5)]),
              "position_mask": ("bool", [3, 1], [b"\x01\x00\x01"] * 5)}
    cols = {**common, "target_probs": ("float32", [3, 8], [bytes([i]) * 96 for i in range(5)])}
    am = automodel_files(cols, shard_size=2, extra={"draft_vocab_size": 8, "target_probs_topk": None})
    c.add("automodel.bin", cache_blob(1, am))
    c.add("automodel_auto.bin", cache_blob(3, am))
    wrong = dict(am)
    wrong["manifest.json"] = wrong["manifest.json"].replace(b'"shard_size": 2', b'"shard_size": 3')
    c.add("automodel_shard_size.bin", cache_blob(1, wrong))
    zero = automodel_files({"x": ("uint8", [0], [b""] * 3)}, shard_size=3)
    c.add("automodel_zero_rows.bin", cache_blob(1, zero))
    topk_cols = {**common,
                 "target_probs_values": ("float32", [3, 2], [bytes([i]) * 24 for i in range(5)]),
                 "target_probs_indices": ("int32", [3, 2], [bytes(24)] * 5)}
    topk = automodel_files(topk_cols, shard_size=2, extra={"draft_vocab_size": 8,
                                                           "target_probs_topk": 2})
    c.add("automodel_topk.bin", cache_blob(1, topk))

    def edited(files, **changes):
        m = json.loads(files["manifest.json"])
        for k, v in changes.items():
            if v is ...:
                m.pop(k, None)
            else:
                m[k] = v
        return {**files, "manifest.json": json.dumps(m, sort_keys=True).encode()}

    c.add("automodel_version3.bin", cache_blob(1, edited(am, format_version=3)))
    c.add("automodel_version1.bin", cache_blob(1, edited(am, format_version=1)))
    c.add("automodel_topk_contradicted.bin", cache_blob(1, edited(am, target_probs_topk=4)))
    c.add("automodel_lossless_over_topk.bin", cache_blob(1, edited(topk, target_probs_topk=None)))
    c.add("automodel_topk_width.bin", cache_blob(1, edited(topk, target_probs_topk=3)))
    c.add("automodel_topk_string.bin", cache_blob(1, edited(am, target_probs_topk="2")))
    c.add("automodel_no_vocab.bin", cache_blob(1, edited(am, draft_vocab_size=...)))
    c.add("automodel_vocab_width.bin", cache_blob(1, edited(am, draft_vocab_size=9)))
    c.add("automodel_bom.bin", cache_blob(1, {**am, "manifest.json": b"\xef\xbb\xbf" +
                                             am["manifest.json"]}))
    no_mask = {k: v for k, v in cols.items() if k != "attention_mask"}
    c.add("automodel_missing_tensor.bin", cache_blob(1, automodel_files(
        no_mask, shard_size=2, extra={"draft_vocab_size": 8, "target_probs_topk": None})))
    dspark_cols = {"input_ids": common["input_ids"], "loss_mask": common["loss_mask"],
                   "target_hidden_states": ("bfloat16", [3, 4], [bytes([i]) * 24 for i in range(5)]),
                   "target_last_hidden_states": ("bfloat16", [3, 2], [bytes(12)] * 5)}
    dspark = automodel_files(dspark_cols, shard_size=2, format_version=1, extra={"complete": True})
    c.add("automodel_dspark.bin", cache_blob(1, dspark))
    c.add("automodel_dspark_version2.bin", cache_blob(1, edited(dspark, format_version=2)))
    c.add("automodel_dspark_incomplete.bin", cache_blob(1, edited(dspark, complete=False)))
    c.add("deepspec_bom.bin", cache_blob(0, {**ds, "manifest.json": b"\xef\xbb\xbf" +
                                            ds["manifest.json"]}))

    pt = (PT / "metadata.pt").read_bytes()
    ts = {"dataset.json": b'{"version": 1, "last_hidden_states_prenorm": false}',
          "manifest.jsonl": b'{"split": "train", "data_id": "a", "file": "samples/a.pt", "seq_len": 4}\n'
                            b'\n{"split": "eval", "data_id": 2, "file": "samples/b.pt", "seq_len": 3}\n',
          "samples/a.pt": pt, "samples/b.pt": pt}
    c.add("torchspec.bin", cache_blob(2, ts))
    dup = dict(ts)
    dup["manifest.jsonl"] = ts["manifest.jsonl"].replace(b'"data_id": 2', b'"data_id": "a"')
    c.add("torchspec_dup.bin", cache_blob(2, dup))
    out = dict(ts)
    out["manifest.jsonl"] = ts["manifest.jsonl"].replace(b"samples/b.pt", b"samples/../../b.pt")
    c.add("torchspec_escape.bin", cache_blob(2, out))
    bom = dict(ts)
    bom["dataset.json"] = b"\xef\xbb\xbf" + ts["dataset.json"]
    c.add("torchspec_bom.bin", cache_blob(2, bom))
    return c


def s3_xml_corpus():
    """S3 replies (issue 33): one flag byte (0 ListParts, 1 ListMultipartUploads,
    2 CompleteMultipartUpload, 3 error code and unescaping, 4 ListObjectsV2), then the body."""
    c = Corpus("s3_xml_fuzz")
    parts = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>&quot;{n:032x}&quot;</ETag>"
                    f"<Size>{5 << 20}</Size></Part>" for n in range(1, 4))
    c.add("list_parts", b"\x00" + (f"<ListPartsResult><IsTruncated>true</IsTruncated>"
                                   f"<NextPartNumberMarker>3</NextPartNumberMarker>{parts}"
                                   "</ListPartsResult>").encode())
    c.add("list_parts_bad_number", b"\x00<ListPartsResult><Part><PartNumber>99999999999"
          b"</PartNumber><Size>1</Size></Part></ListPartsResult>")
    c.add("list_parts_unclosed", b"\x00<ListPartsResult><Part><PartNumber>1</PartNumber>")
    c.add("list_parts_flood", b"\x00" + b"<Part><PartNumber>1</PartNumber><Size>1</Size></Part>" * 200)
    c.add("list_uploads", b"\x01<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>"
          b"<NextKeyMarker>k&amp;1</NextKeyMarker><NextUploadIdMarker>u</NextUploadIdMarker>"
          b"<Upload><Key>p/shard-00000.lss</Key><UploadId>abc</UploadId></Upload>"
          b"</ListMultipartUploadsResult>")
    c.add("complete_ok", b"\x02<CompleteMultipartUploadResult><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e-3"
          b"&quot;</ETag></CompleteMultipartUploadResult>")
    c.add("complete_error", b"\x02<Error><Code>InternalError</Code><Message>try again</Message></Error>")
    objects = "".join(f"<Contents><Key>p/shard-{n:05d}.lss</Key><Size>{n << 20}</Size>"
                      f"<ETag>&quot;{n:032x}&quot;</ETag></Contents>" for n in range(3))
    c.add("list_objects", b"\x04" + (f"<ListBucketResult><IsTruncated>true</IsTruncated>"
                                      f"<NextContinuationToken>t&amp;2</NextContinuationToken>"
                                      f"{objects}</ListBucketResult>").encode())
    c.add("list_objects_no_key", b"\x04<ListBucketResult><Contents><Size>1</Size></Contents>"
          b"<Contents><Key></Key><Size>2</Size></Contents></ListBucketResult>")
    c.add("list_objects_bad_size", b"\x04<ListBucketResult><Contents><Key>k</Key>"
          b"<Size>-1</Size></Contents></ListBucketResult>")
    c.add("list_objects_flood", b"\x04" + b"<Contents><Key>k</Key><Size>1</Size></Contents>" * 300)
    c.add("error_entities", b"\x03<Error><Code>SlowDown</Code><Message>" + b"&amp;&lt;&#34;" * 300
          + b"</Message></Error>")
    return c


def aws_ini_corpus():
    """~/.aws/config and ~/.aws/credentials as users write them, and broken ones."""
    c = Corpus("aws_ini_fuzz")
    c.add("credentials", b"[default]\naws_access_key_id = AKIAEXAMPLE\n"
          b"aws_secret_access_key = secret\n\n[other]\naws_access_key_id=B\n")
    c.add("config_nested", b"[profile dev]\nregion = eu-west-1\ns3 =\n  addressing_style = path\n"
          b"  endpoint_url = http://127.0.0.1:9000\n# comment\n; another\n")
    c.add("broken", b"[unclosed\n= value\nkey without value\n[]\n   indented = orphan\n\x00\xff=\x01")
    c.add("crlf", b"[default]\r\nregion = us-east-1\r\n")
    return c


def cache_state_corpus():
    """The cache's state file header and .usage (docs/CACHE.md §2, §4): u64 file size, u64 now,
    u64 file system bytes, then the record."""
    c = Corpus("cache_state_fuzz")
    now, fs_bytes = 1_764_000_000 * 10**9, 1 << 40
    def frame(file_size, rec):
        return struct.pack("<QQQ", file_size, now, fs_bytes) + rec
    def state(block, size, blocks, version=2):
        return (b"LSCACHE1" + struct.pack("<IIQQQQ", version, 64, block, size, blocks, 0xE7A6)
                + bytes(16))
    c.add("state_v2", frame(64 + 16 * 3, state(4 << 20, 10 << 20, 3)))
    c.add("state_v1", frame(64 + 16 * 1, state(4096, 4096, 1, version=1)))
    c.add("state_huge_count", frame(64 + 16 * 3, state(4096, 1 << 62, 1 << 50)))
    c.add("state_odd_block", frame(64 + 16, state(4095, 100, 1)))
    def usage(used, when, pending=0):
        return b"LSUSAGE1" + struct.pack("<IIQQQ", 1, 64, used, when, pending) + bytes(24)
    c.add("usage_ok", frame(64, usage(1 << 30, now - 10**9)))
    c.add("usage_huge", frame(64, usage(1 << 62, now)))
    c.add("usage_future", frame(64, usage(1 << 30, now + 86400 * 10**9)))
    c.add("usage_pending", frame(64, usage(1 << 30, now, 64 << 20)))
    return c


def upload_journal_corpus():
    """upload.journal of an s3:// write (docs/CACHE.md §6), whole, torn and hostile."""
    c = Corpus("upload_journal_fuzz")
    c.add("resume", b"upload shard-00000.lss 268435456 2~abcDEF\n"
          b"done shard-00000.lss 268435456 \"0123456789abcdef0123456789abcdef-16\"\n"
          b"upload shard-00001.lss 1024 2~x\ndone index.lsi 4096 \"e\"\ndone manifest.json 9")
    c.add("hostile", b"done ../../etc/passwd 1 \"e\"\ndone a/b 1 e\ndone . 1 e\n"
          b"upload x 99999999999999999999999 id\nupload y -1 id\nbogus line\n\n\t\r\n")
    c.add("long_fields", b"upload " + b"n" * 300 + b" 1 id\ndone m 1 " + b"e" * 2000 + b"\n")
    return c


def object_url_corpus():
    """URLs for object_url_fuzz: valid ones, and each refusal of objstore/object_url.h."""
    c = Corpus("object_url_fuzz")
    for name, url in [("plain", "s3://my-bucket/hidden-states/run1"), ("root", "s3://bucket"),
                      ("root_slash", "s3://bucket/"), ("trailing", "s3://bucket/a/b/"),
                      ("dots_inside", "s3://bucket/v1.2/..x/y.."), ("encoded", "s3://b-1/a b/%2e%2e/+"),
                      ("dotdot", "s3://bucket/../other"), ("dot", "s3://bucket/a/./b"),
                      ("empty_segment", "s3://bucket/a//b"), ("double_trailing", "s3://bucket//"),
                      ("control", "s3://bucket/a\nb"), ("no_bucket", "s3:///x"),
                      ("other_scheme", "gs://bucket/x"), ("no_scheme", "/data/s3://x"),
                      ("long", "s3://bucket/" + "k" * 961)]:
        c.add(name, url.encode())
    return c


def loader_state_corpus():
    """Loader states for loader_state_fuzz (docs/ORDER.md §8): the golden states of
    tests/data/loader_state/ (versions 2 and 1 and the unversioned dicts of earlier releases),
    and each refusal of DecodeLoaderState."""
    c = Corpus("loader_state_fuzz")
    for f in sorted((ROOT / "tests" / "data" / "loader_state").glob("*.json")):
        c.add(f.stem, f.read_bytes())
    v1 = '{"state_version":1,"order":%d,"epoch":0,"position":%s,"skipped":[]%s}'
    v2 = v1.replace('"state_version":1', '"state_version":2')
    for name, text in [
            ("not_object", "[1, 2, 3]"), ("not_json", '{"seed": 1,'), ("empty", ""),
            ("deep", "[" * 300 + "]" * 300), ("negative", '{"seed":0,"epoch":0,"position":-3}'),
            ("float", '{"seed":0,"epoch":0,"position":2.5}'),
            ("huge_int", '{"seed":99999999999999999999999,"epoch":0,"position":0}'),
            ("order_7", '{"seed":0,"epoch":0,"position":0,"order":7}'),
            ("v3_no_locality", '{"seed":0,"epoch":0,"position":5,"order":3}'),
            ("locality_v2", '{"seed":0,"epoch":0,"position":0,"locality":{"nodes":2,'
                            '"local_world_size":1,"steps":0}}'),
            ("follow_caller", '{"seed":0,"epoch":0,"position":0,"order":0,"follow_window":4}'),
            ("bad_budget", '{"seed":0,"epoch":0,"position":0,"bucketing":{"window":8,'
                           '"batch_size":2,"max_tokens":0,"budget":"most"}}'),
            ("newer", '{"state_version":3,"order":2}'),
            ("v2_bad_identity", v2 % (2, "0", ',"seed":1,"identity":"0123ABCD"')),
            ("v2_identity_int", v2 % (2, "0", ',"seed":1,"identity":12')),
            ("v2_caller_shuffle", v2 % (0, "0", ',"steps_digest":2,"shuffle":true')),
            ("v2_follow_samples", v2 % (2, "0", ',"seed":1,"follow_window":4,"samples":3')),
            ("v2_shuffle_int", v2 % (2, "0", ',"seed":1,"samples":4,"shuffle":1')),
            ("v1_identity", v1 % (2, "0", ',"seed":1,"identity":null')),
            ("v1_foreign_key", v1 % (2, "0", ',"seed":1,"locality":null')),
            ("v1_missing_seed", v1 % (2, "0", "")),
            ("v1_follow_zero", v1 % (2, "0", ',"seed":1,"follow_window":0')),
            ("v1_caller_seed", v1 % (0, "0", ',"seed":1,"steps_digest":2')),
            ("v1_node_steps_only", v1 % (3, "0", ',"seed":1,"locality":{"nodes":0,'
                                               '"local_world_size":0,"steps":3}'))]:
        c.add(name, text.encode())
    return c


def main():
    for make in (pickle_corpus, zip_corpus, gzip_corpus, safetensors_corpus, index_corpus,
                 journal_corpus, manifest_corpus, metadata_corpus, codec_corpus, collate_corpus,
                 cache_corpus, s3_xml_corpus, aws_ini_corpus, cache_state_corpus,
                 upload_journal_corpus, object_url_corpus, loader_state_corpus):
        c = make()
        files = list(c.dir.iterdir())
        print(f"{c.dir.relative_to(ROOT)}: {len(files)} seeds, "
              f"{sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
