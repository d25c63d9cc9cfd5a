#!/usr/bin/env python3
"""Generates the reader fixtures in tests/data/pt/ with real torch.save (torch 2.13) and
safetensors, plus expected.json: for every fixture either the tensors (name, dtype, shape and the
hex of their C-contiguous bytes *as torch.load / safetensors.load_file return them*) and metadata,
or the error the reader must give (status code and message fragments).

Run from anywhere:  python3 tests/data/make_pt_fixtures.py [OUT_DIR]
The checked-in fixtures are small (< 200 KB in all); tests read them without needing Python.
Malicious fixtures are only ever *written* here (pickle does not run a __reduce__ payload when
dumping); they are never loaded with torch.load.
"""
import collections
import gzip
import io
import json
import os
import struct
import sys
import zipfile

import warnings

import torch

warnings.filterwarnings("ignore", message=".*pickle protocol.*")

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "pt")
# The command a malicious fixture's pickle would run; the C++ test asserts it never appears.
PWNED_MARKER = "/tmp/libshard_readers_pwned_marker"

DTYPE_NAMES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.uint16: "uint16", torch.uint32: "uint32",
    torch.uint64: "uint64", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.float32: "float32", torch.float64: "float64", torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e5m2: "float8_e5m2",
}
ALL_DTYPES = list(DTYPE_NAMES)

expected = {}
gen = torch.Generator().manual_seed(1234)


def path(name):
    return os.path.join(OUT, name)


def rand(shape, dtype):
    """Deterministic values with every byte pattern class (signs, fractions, large ints)."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(dtype)
    info_hi = {torch.uint8: 255, torch.int8: 127, torch.int16: 32767, torch.uint16: 65535}
    hi = info_hi.get(dtype, 2**31 - 1)
    lo = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -hi
    v = torch.randint(lo, hi, shape, generator=gen, dtype=torch.int64)
    if dtype in (torch.int64, torch.uint64):
        v = v * 4099 + (2**40 if dtype == torch.uint64 else -(2**41))
        v = v.abs() if dtype == torch.uint64 else v
    return v.to(dtype)


def raw_hex(t):
    t = t.detach().contiguous()
    if t.numel() == 0:
        return ""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes().hex()


def flatten(obj, prefix, tensors, meta):
    def name(part):
        return f"{prefix}.{part}" if prefix else str(part)

    if isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, name(k), tensors, meta)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(v, name(i), tensors, meta)
    elif isinstance(obj, torch.Tensor):
        tensors.append({"name": prefix, "dtype": DTYPE_NAMES[obj.dtype],
                        "shape": list(obj.shape), "hex": raw_hex(obj)})
    elif obj is None:
        pass  # the reader drops None
    elif isinstance(obj, bool):
        meta.append({"key": prefix, "type": "bool", "value": obj})
    elif isinstance(obj, int):
        meta.append({"key": prefix, "type": "int", "value": obj})
    elif isinstance(obj, float):
        meta.append({"key": prefix, "type": "float",
                     "bits": struct.unpack("<q", struct.pack("<d", obj))[0]})
    elif isinstance(obj, str):
        meta.append({"key": prefix, "type": "str", "value": obj})
    else:
        raise TypeError(type(obj))


def expect_loaded(fname, loaded):
    tensors, meta = [], []
    flatten(loaded, "", tensors, meta)
    expected[fname] = {"tensors": tensors, "metadata": meta}


def save_pt(fname, obj, **kw):
    torch.save(obj, path(fname), **kw)
    # torch's weights-only unpickler has no FRAME opcode (protocols 4, 5); these fixtures are our
    # own, so the full unpickler is safe for them.
    safe = kw.get("pickle_protocol", 2) <= 3
    expect_loaded(fname, torch.load(path(fname), weights_only=safe))


def expect_error(fname, code, *fragments):
    expected[fname] = {"error": {"code": code, "contains": list(fragments)}}


def craft_zip(fname, prefix, records):
    """A stored zip with the given (name, bytes) records under prefix/ (Python zipfile layout:
    no alignment, no data descriptors, so it also exercises those differences)."""
    with zipfile.ZipFile(path(fname), "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in records:
            # A fixed timestamp keeps regenerated fixtures byte-identical.
            z.writestr(zipfile.ZipInfo(f"{prefix}/{name}", date_time=(2024, 1, 1, 0, 0, 0)), data)


def force_zip64(fname):
    """Rewrites the central directory so every entry carries zip64 extended information (sizes
    and local header offset saturated to 0xFFFFFFFF), and the end records are zip64 only."""
    b = open(path(fname), "rb").read()
    z = zipfile.ZipFile(io.BytesIO(b))
    body = b[:z.start_dir]
    cd = b""
    for i in z.infolist():
        name = i.filename.encode()
        extra = struct.pack("<HHQQQ", 1, 24, i.file_size, i.compress_size, i.header_offset)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, i.flag_bits, i.compress_type,
                          0, 0, i.CRC, 0xFFFFFFFF, 0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0,
                          0xFFFFFFFF) + name + extra
    n = len(z.infolist())
    cd_off = len(body)
    eocd64_off = cd_off + len(cd)
    eocd64 = struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, n, n, len(cd), cd_off)
    loc = struct.pack("<IIQI", 0x07064b50, 0, eocd64_off, 1)
    eocd = struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    open(path(fname), "wb").write(body + cd + eocd64 + loc + eocd)


class Evil:
    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))

    # Every dtype, each a distinct storage.
    save_pt("all_dtypes.pt", {DTYPE_NAMES[d]: rand((2, 3), d) for d in ALL_DTYPES})

    # 0-d and empty tensors.
    save_pt("scalars_empty.pt", {
        "scalar_f32": torch.tensor(3.25), "scalar_i64": torch.tensor(-7),
        "scalar_bf16": torch.tensor(1.5, dtype=torch.bfloat16),
        "scalar_f8": torch.tensor(0.5).to(torch.float8_e4m3fn),
        "empty": torch.zeros(0), "empty_3d": torch.zeros(2, 0, 3, dtype=torch.int16),
        "empty_u64": torch.zeros(0, dtype=torch.uint64),
    })

    # Views: transposes, slices with storage offsets and steps, zero strides, shared storages
    # (the ModelOpt vLLM pattern: two non-contiguous views of one [N, 4, H] storage).
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    hs = rand((5, 4, 6), torch.bfloat16)
    save_pt("views.pt", {
        "base": base, "transposed": base.transpose(0, 2), "sliced": base[:, 1:, ::2],
        "row": base[1], "column": base[:, :, 3], "expanded": torch.arange(3).expand(4, 3),
        "last_hidden": hs[:, -1, :], "aux_hidden": hs[:, :-1, :],
        "f8_tail": rand((10,), torch.float8_e5m2)[4:], "u32_t": rand((3, 2), torch.uint32).t(),
    })

    # One-key dict (EMPTY_DICT key value SETITEM, no MARK/SETITEMS).
    save_pt("one_key.pt", {"only": rand((4,), torch.int64)})

    # Nested containers, int keys, OrderedDict values.
    save_pt("nested.pt", {
        "hidden_states": [rand((2, 3), torch.float16) for _ in range(3)],
        "a": {"b": rand((2,), torch.int32), "c": {"d": rand((1,), torch.float64)}},
        "tup": (rand((2,), torch.uint8), 5),
        "layers": collections.OrderedDict([(0, rand((2,), torch.bool)), (1, rand((2,), torch.int8))]),
    })

    # Metadata entries of every kind; None is dropped.
    meta = {"input_ids": rand((5,), torch.int64), "conversation_id": "conv-42 \u00e9\u4e2d",
            "score": 0.1, "neg": -3.5e-300, "count": 7, "big": 2**40, "neg_big": -(2**62),
            "int64_max": 2**63 - 1, "int64_min": -(2**63), "flag": True, "off": False,
            "nothing": None, "large_int": 70000}
    save_pt("metadata.pt", meta)

    # Pickle protocols 2..5 (3+ adds nothing torch uses; 4/5 add FRAME, MEMOIZE, STACK_GLOBAL,
    # SHORT_BINUNICODE).
    for p in (2, 3, 4, 5):
        save_pt(f"proto{p}.pt", {
            "ids": rand((3,), torch.int64), "h": rand((2, 2), torch.bfloat16),
            "f8": rand((3,), torch.float8_e4m3fn), "list": [rand((1,), torch.float32)],
            "name": "x", "n": 3, "big": 3 * 2**31}, pickle_protocol=p)

    # An EAGLE-3 SpecForge sample (L=7, H=8), plain and gzip (file object => prefix "archive").
    L, H = 7, 8
    eagle = {"input_ids": rand((L,), torch.int64), "loss_mask": rand((L,), torch.int64) % 2,
             "aux_hidden_state": rand((1, L, 3 * H), torch.bfloat16),
             "hidden_state": rand((1, L, H), torch.bfloat16)}
    save_pt("data_17.ckpt", eagle)
    with gzip.GzipFile(path("data_17.ckpt.gz"), "wb", compresslevel=6, mtime=0) as f:
        torch.save(eagle, f)
    expected["data_17.ckpt.gz"] = expected["data_17.ckpt"]
    with gzip.open(path("data_17.ckpt.gz"), "rb") as f:
        reloaded = torch.load(io.BytesIO(f.read()), weights_only=True)
    assert all(torch.equal(reloaded[k], eagle[k]) for k in eagle)

    # More than 256 memo entries: LONG_BINPUT / LONG_BINGET (views of one storage keep it small).
    shared = torch.arange(64, dtype=torch.int16)
    save_pt("long_memo.pt", {f"k{i}": shared[i:i + 2] for i in range(48)})

    # nn.Parameter (torch._utils._rebuild_parameter).
    save_pt("parameter.pt", {"w": torch.nn.Parameter(rand((2, 2), torch.float32)),
                             "b": torch.nn.Parameter(rand((2,), torch.float32), requires_grad=False)})

    # OrderedDict at the top level; a top-level list.
    save_pt("ordered_root.pt", collections.OrderedDict([("z", rand((2,), torch.float32)),
                                                        ("a", rand((2,), torch.int64))]))
    save_pt("list_root.pt", [rand((2,), torch.float32), rand((3,), torch.uint16)])

    # zip64 everywhere (torch only needs it past 4 GiB): patched from a real file.
    save_pt("zip64_small.pt", {"x": rand((3, 3), torch.float32), "y": rand((2,), torch.bfloat16)})
    force_zip64("zip64_small.pt")
    assert zipfile.ZipFile(path("zip64_small.pt")).testzip() is None
    expect_loaded("zip64_small.pt", torch.load(path("zip64_small.pt"), weights_only=True))

    # Big-endian archive: byteorder "big" and byte-swapped records (torch.load swaps back).
    be_src = {"f32": rand((3,), torch.float32), "i64": rand((2, 2), torch.int64).t(),
              "bf16": rand((4,), torch.bfloat16), "u8": rand((3,), torch.uint8)}
    torch.save(be_src, path("bigendian.pt"))
    z = zipfile.ZipFile(path("bigendian.pt"))
    loaded = torch.load(path("bigendian.pt"), weights_only=True)
    recs = []
    storages = {}
    pkl = z.read("bigendian/data.pkl")
    # Map record key -> element size from the loaded tensors (storage order = dict order here).
    for key, (k, t) in enumerate(be_src.items()):
        storages[str(key)] = t.element_size()
    for info in z.infolist():
        name = info.filename.split("/", 1)[1]
        data = z.read(info)
        if name == "byteorder":
            data = b"big"
        elif name.startswith("data/"):
            es = storages[name[5:]]
            data = b"".join(data[i:i + es][::-1] for i in range(0, len(data), es))
        recs.append((name, data))
    craft_zip("bigendian.pt", "bigendian", recs)
    assert pkl == zipfile.ZipFile(path("bigendian.pt")).read("bigendian/data.pkl")
    reloaded = torch.load(path("bigendian.pt"), weights_only=True)
    for k in be_src:
        assert torch.equal(reloaded[k], loaded[k]), k
    expect_loaded("bigendian.pt", reloaded)

    # --- Inputs that must be refused ---
    # os.system via __reduce__ (GLOBAL 'posix system', protocol 2) and via STACK_GLOBAL (p4).
    torch.save({"x": torch.ones(1), "evil": Evil(os.system, f"touch {PWNED_MARKER}")},
               path("malicious_system.pt"))
    expect_error("malicious_system.pt", "Unsupported", "GLOBAL 'posix system' is not allowed",
                 "data.pkl byte")
    torch.save({"evil": Evil(os.system, f"touch {PWNED_MARKER}")}, path("malicious_p4.pt"),
               pickle_protocol=4)
    expect_error("malicious_p4.pt", "Unsupported", "GLOBAL 'posix system' is not allowed")
    torch.save({"evil": Evil(eval, f"__import__('os').system('touch {PWNED_MARKER}')")},
               path("malicious_eval.pt"))
    expect_error("malicious_eval.pt", "Unsupported", "GLOBAL '__builtin__ eval' is not allowed")

    # Hand-written pickles inside otherwise valid archives.
    def pk(body):
        return b"\x80\x02" + body + b"."
    craft_zip("reduce_storage.pt", "archive",
              [("data.pkl", pk(b"}q\x00X\x01\x00\x00\x00actorch\nFloatStorage\n)Rs")),
               ("byteorder", b"little")])
    expect_error("reduce_storage.pt", "Unsupported", "REDUCE on a storage type")
    craft_zip("build_opcode.pt", "archive", [("data.pkl", pk(b"}q\x00}b")), ("byteorder", b"little")])
    expect_error("build_opcode.pt", "Unsupported", "(BUILD)", "data.pkl byte 6")
    craft_zip("huge_long.pt", "archive",
              [("data.pkl", pk(b"}X\x01\x00\x00\x00n\x8a\x09" + (2**64).to_bytes(9, "little") + b"s"))])
    expect_error("huge_long.pt", "Unsupported", "does not fit in int64")
    # A view that reaches past its storage (declared 4 floats; view needs 5).
    craft_zip("oob_view.pt", "archive", [
        ("data.pkl", pk(b"}X\x01\x00\x00\x00actorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00"
                        b"storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ"
                        b"K\x01K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRs")),
        ("data/0", b"\x00" * 16)])
    expect_error("oob_view.pt", "Corruption", "reaches past its storage", "data.pkl byte")
    # Declared storage size differs from the record (CVE-2026-24747 class).
    craft_zip("short_record.pt", "archive", [
        ("data.pkl", pk(b"}X\x01\x00\x00\x00actorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00"
                        b"storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ"
                        b"K\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRs")),
        ("data/0", b"\x00" * 12)])
    expect_error("short_record.pt", "Corruption", "declares a storage of 16 bytes",
                 "holds 12 bytes")

    # Unsupported but legitimate torch files.
    torch.save({"c": torch.ones(2, dtype=torch.complex64)}, path("complex.pt"))
    expect_error("complex.pt", "Unsupported", "ComplexFloatStorage")
    torch.save({"n": torch.ones(3)._neg_view()}, path("neg_view.pt"))
    expect_error("neg_view.pt", "Unsupported", "math bits")
    torch.save({"a": torch.ones(2)}, path("legacy.pt"), _use_new_zipfile_serialization=False)
    expect_error("legacy.pt", "Unsupported", "legacy (pre-1.6")

    class AddOne(torch.nn.Module):
        def forward(self, x):
            return x + 1
    torch.jit.save(torch.jit.trace(AddOne(), torch.ones(1)), path("torchscript.pt"))
    expect_error("torchscript.pt", "Unsupported", "TorchScript")
    torch.save(torch.ones(2), path("bare_tensor.pt"))
    expect_error("bare_tensor.pt", "Unsupported", "top-level object is a tensor")

    # Safetensors (real writer), plain and gzip.
    from safetensors.torch import save_file, load_file
    st = {DTYPE_NAMES[d]: rand((2, 3), d) for d in ALL_DTYPES}
    st["scalar"] = torch.tensor(2.5)
    st["empty"] = torch.zeros(0, 4, dtype=torch.bfloat16)
    save_file(st, path("all_dtypes.safetensors"), metadata={"format": "pt", "source": "libshard"})
    loaded = load_file(path("all_dtypes.safetensors"))
    # Header order is the file's order; safetensors.load_file returns a dict in that order too.
    header_len = struct.unpack("<Q", open(path("all_dtypes.safetensors"), "rb").read(8))[0]
    header = json.loads(open(path("all_dtypes.safetensors"), "rb").read(8 + header_len)[8:],
                        object_pairs_hook=collections.OrderedDict)
    order = [k for k in header if k != "__metadata__"]
    tensors = [{"name": k, "dtype": DTYPE_NAMES[loaded[k].dtype], "shape": list(loaded[k].shape),
                "hex": raw_hex(loaded[k])} for k in order]
    md = [{"key": k, "type": "str", "value": v} for k, v in header["__metadata__"].items()]
    expected["all_dtypes.safetensors"] = {"tensors": tensors, "metadata": md}
    data = open(path("all_dtypes.safetensors"), "rb").read()
    with gzip.GzipFile(path("all_dtypes.safetensors.gz"), "wb", mtime=0) as f:
        f.write(data)
    expected["all_dtypes.safetensors.gz"] = expected["all_dtypes.safetensors"]

    with open(path("expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    total = sum(os.path.getsize(path(f)) for f in os.listdir(OUT))
    print(f"wrote {len(os.listdir(OUT))} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
