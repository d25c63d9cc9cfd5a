"""A small resumable hidden-state generator for tests/python/test_capture.py: writes EAGLE-3
samples the ways real generators do (``--mode``), skips those whose file exists (``--check``:
the query real generators use), and also writes files that are not samples.

Deterministic: sample i's tensors come from a generator seeded with i, so a rerun, a resumed run
and a run of another rank write the same bytes for the same file. Prints ``wrote PATH`` for each
sample and ``skipped N`` at the end, flushed, so a test can kill it after a given sample.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import shutil
import sys
import time
from pathlib import Path

import torch

MODES = ("torch_path", "open_wb", "gzip", "pathlib", "safetensors", "safetensors_numpy", "bytes",
         "rename", "move", "threads")
CHECKS = ("exists", "path_exists", "isfile", "getsize", "listdir", "iterdir", "glob", "rglob",
          "scandir", "walk", "stat")


def sample(i: int, hidden: int) -> dict:
    g = torch.Generator().manual_seed(1000 + i)
    n = 5 + (i * 7) % 23
    return {
        "input_ids": torch.randint(0, 32000, (n,), generator=g),
        "loss_mask": (torch.rand(n, generator=g) > 0.3).long(),
        "hidden_state": torch.randn(1, n, hidden, generator=g).to(torch.bfloat16),
        "aux_hidden_state": torch.randn(1, n, 3 * hidden, generator=g).to(torch.bfloat16),
    }


def name_of(i: int, mode: str) -> str:
    ext = {"gzip": ".ckpt.gz", "safetensors": ".safetensors", "safetensors_numpy": ".safetensors",
           "bytes": ".safetensors", "move": ".safetensors"}.get(mode, ".ckpt")
    return f"rows_{i // 8 * 8}-{i // 8 * 8 + 8}/data_{i}{ext}"


def done(out: Path, i: int, mode: str, check: str) -> bool:
    """Whether sample i's file exists, asked the way `check` names."""
    rel = name_of(i, mode)
    p = out / rel
    d, base = p.parent, p.name
    if check == "exists":
        return os.path.exists(str(p))
    if check == "path_exists":
        return p.exists()
    if check == "isfile":
        return os.path.isfile(p) and p.is_file()
    if check == "getsize":
        try:
            return os.path.getsize(p) > 0
        except OSError:
            return False
    if check == "stat":
        try:
            return p.stat().st_size > 0
        except FileNotFoundError:
            return False
    if check == "listdir":
        return d.is_dir() and base in os.listdir(d)
    if check == "iterdir":
        return d.is_dir() and any(q.name == base for q in d.iterdir())
    if check == "glob":
        import glob
        return str(p) in glob.glob(str(out / "rows_*" / "data_*"))
    if check == "rglob":
        return p in set(out.rglob("data_*"))
    if check == "scandir":
        if not d.is_dir():
            return False
        with os.scandir(d) as it:
            return any(e.name == base and e.is_file() for e in it)
    if check == "walk":
        return any(base in files and Path(root) == d for root, _, files in os.walk(out))
    raise ValueError(check)


def write(out: Path, i: int, mode: str, hidden: int, staging: Path) -> None:
    s = sample(i, hidden)
    p = out / name_of(i, mode)
    p.parent.mkdir(parents=True, exist_ok=True)
    if mode == "torch_path":
        torch.save({**s, "conversation_id": f"conv-{i}", "turns": i % 3}, str(p))
    elif mode == "open_wb":
        with open(p, "wb") as f:
            torch.save({**s, "conversation_id": i}, f)
    elif mode == "gzip":
        with gzip.open(p, "wb", compresslevel=1) as f:
            torch.save(s, f)
    elif mode == "pathlib":
        buf = io.BytesIO()
        torch.save({**s, "meta": {"i": i, "ok": True, "none": None}}, buf)
        p.write_bytes(buf.getvalue())
    elif mode in ("safetensors", "move"):
        from safetensors.torch import save_file
        tensors = {"hidden_states": torch.cat([s["aux_hidden_state"][0],
                                               s["hidden_state"][0]], -1).view(-1, 4, hidden),
                   "token_ids": s["input_ids"]}
        if mode == "safetensors":
            save_file(tensors, str(p), metadata={"index": str(i)})
        else:  # a server writes it elsewhere, the generator moves it into place
            staging.mkdir(parents=True, exist_ok=True)
            tmp = staging / f"req-{i}.safetensors"
            save_file(tensors, str(tmp))
            shutil.move(str(tmp), str(p))
    elif mode == "safetensors_numpy":
        from safetensors.numpy import save_file
        save_file({"token_ids": s["input_ids"].numpy(),
                   "hidden_states": s["hidden_state"][0].float().numpy()}, str(p))
    elif mode == "bytes":
        from safetensors.torch import save
        with open(p, "wb") as f:
            f.write(save({"token_ids": s["input_ids"], "hs": s["hidden_state"][0]}))
    elif mode == "rename":
        tmp = p.parent / f".{p.name}.tmp"
        torch.save(s, tmp)
        os.replace(tmp, p)
    else:
        raise ValueError(mode)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--output-dir", type=Path, required=True)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--indices", default="", help="comma-separated subset (a rank's share)")
    ap.add_argument("--mode", choices=MODES, default="torch_path")
    ap.add_argument("--check", choices=CHECKS, default="exists")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--staging", type=Path, default=None)
    ap.add_argument("--readback", action="store_true", help="torch.load / load_file each sample")
    args = ap.parse_args()
    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "generation.log").write_text("started\n")
    (out / "config.json").write_text('{"hidden": %d}\n' % args.hidden)
    (out / "vocab_mapping").mkdir(exist_ok=True)
    torch.save({"d2t": torch.arange(8), "t2d": torch.ones(32, dtype=torch.bool)},
               out / "vocab_mapping" / "vocab_mapping.pt")
    staging = args.staging or out.parent / (out.name + ".staging")
    indices = [int(x) for x in args.indices.split(",")] if args.indices else range(args.n)
    skipped = 0
    mode = args.mode
    if mode == "threads":  # SpecForge's io thread pool: torch.save from worker threads
        from concurrent.futures import ThreadPoolExecutor
        todo = [i for i in indices if not done(out, i, "torch_path", args.check)]
        skipped = len(indices) - len(todo)
        with ThreadPoolExecutor(max_workers=3) as pool:
            for f in [pool.submit(write, out, i, "torch_path", args.hidden, staging) for i in todo]:
                f.result()
        for i in todo:
            print(f"wrote {name_of(i, 'torch_path')}", flush=True)
    else:
        for i in indices:
            if done(out, i, mode, args.check):
                skipped += 1
                continue
            write(out, i, mode, args.hidden, staging)
            if args.readback:
                p = out / name_of(i, mode)
                if p.name.endswith(".safetensors"):
                    from safetensors.torch import load_file
                    got = load_file(str(p))
                    assert torch.equal(got["token_ids"], sample(i, args.hidden)["input_ids"])
                else:
                    got = torch.load(p, map_location="cpu", weights_only=True)
                    assert torch.equal(got["input_ids"], sample(i, args.hidden)["input_ids"])
            print(f"wrote {name_of(i, mode)}", flush=True)
            if args.sleep:
                time.sleep(args.sleep)
    (out / "generation.log").write_text("done\n")
    print(f"skipped {skipped}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
