"""SpecForge's offline hidden-state preparation, as tests/python/test_trainer_capture_generators.py
runs it on a CPU.

Written for libshard's tests from reading sgl-project/SpecForge's scripts/prepare_hidden_states.py
(in the repository, not the specforge wheel; its target runs in sglang, which needs a GPU): the
same save path. A generator object whose ``with`` block owns an io ``ThreadPoolExecutor``;
``_save_tensor_async`` queues ``_save_tensor_sync`` (skip a record with a NaN; ``torch.save`` to
``rows_{g}-{g+G}/data_{idx}.ckpt``, or through ``gzip.open`` to ``.ckpt.gz`` with
``--compress``), bounded by ``--io-queue-size`` pending futures; before each batch
``_check_existing_files_batch`` asks ``os.path.exists`` for both extensions from a thread pool
(its resume); ``_prepare_output_dirs`` makes the group directories. The vocabulary mapping is made
by the specforge wheel's own ``generate_vocab_mapping_file`` into a hidden temporary, read back
with ``torch.load`` and moved into ``OUTPUT/vocab_mapping/vocab_mapping.pt`` with ``os.replace``,
as the script does. The target is SmolLM2-135M in plain PyTorch (examples/smollm2.py) with
EAGLE-3 forward hooks on layers 1, 14, 26 (``aux_hidden_state`` [1, S, 3H]) and the final norm
(``hidden_state`` [1, S, H]). Prints ``saved <idx>`` after each file.
"""

import argparse
import gzip
import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import smollm2  # noqa: E402


class HiddenStatesGenerator:
    def __init__(self, model, layers, args) -> None:
        self.model, self.layers = model, layers
        self.compress, self.compression_level = args.compress, 1
        self.num_io_threads, self.io_queue_size = args.num_io_threads, args.io_queue_size
        self.file_group_size = args.file_group_size
        self.file_extension = ".ckpt.gz" if args.compress else ".ckpt"
        self.io_executor = None
        self.pending_futures = []

    def __enter__(self):
        self.io_executor = ThreadPoolExecutor(max_workers=self.num_io_threads)
        self.pending_futures = []
        return self

    def __exit__(self, *exc):
        for future in self.pending_futures:
            future.result()
        self.pending_futures.clear()
        self.io_executor.shutdown(wait=True)
        self.io_executor = None

    def _save_tensor_sync(self, record, output_file: str) -> None:
        persisted = dict(record)
        for name, tensor in persisted.items():
            if torch.is_floating_point(tensor) and bool(torch.isnan(tensor).any()):
                print(f"Warning: NaN found in {name} for {output_file}. Skipping save.")
                return
        if self.compress:
            with gzip.open(output_file, "wb", compresslevel=self.compression_level) as f:
                torch.save(persisted, f)
        else:
            torch.save(persisted, output_file)
        print("saved", Path(output_file).name, flush=True)

    def _save_tensor_async(self, record, output_file: str) -> None:
        if len(self.pending_futures) >= self.io_queue_size:
            self.pending_futures = [f for f in self.pending_futures if not f.done()]
            if len(self.pending_futures) >= self.io_queue_size:
                self.pending_futures.pop(0).result()
        self.pending_futures.append(
            self.io_executor.submit(self._save_tensor_sync, record, output_file))

    def _prepare_output_dirs(self, output_path: str, start_idx: int, total: int) -> None:
        start_group = (start_idx // self.file_group_size) * self.file_group_size
        end_group = ((start_idx + total - 1) // self.file_group_size) * self.file_group_size
        for g in range(start_group, end_group + 1, self.file_group_size):
            os.makedirs(os.path.join(output_path, f"rows_{g}-{g + self.file_group_size}"),
                        exist_ok=True)

    def _get_file_path(self, output_path: str, idx: int, extension=None) -> str:
        ext = self.file_extension if extension is None else extension
        g = (idx // self.file_group_size) * self.file_group_size
        return os.path.join(output_path, f"rows_{g}-{g + self.file_group_size}",
                            f"data_{idx}{ext}")

    def _check_existing_files_batch(self, output_path: str, indices):
        def check_single_file(idx):
            if os.path.exists(self._get_file_path(output_path, idx)):
                return True
            return (os.path.exists(self._get_file_path(output_path, idx, ".ckpt"))
                    or os.path.exists(self._get_file_path(output_path, idx, ".ckpt.gz")))
        with ThreadPoolExecutor(max_workers=self.num_io_threads) as executor:
            return list(executor.map(check_single_file, indices))

    @torch.no_grad()
    def generate(self, samples, output_path: str, batch_size: int) -> None:
        self._prepare_output_dirs(output_path, 0, len(samples))
        for start in range(0, len(samples), batch_size):
            indices = list(range(start, min(start + batch_size, len(samples))))
            exists = self._check_existing_files_batch(output_path, indices)
            for idx, done in zip(indices, exists):
                if done:
                    continue
                input_ids, loss_mask = samples[idx]
                captured = {}
                hooks = [self.model.layers[i].register_forward_hook(
                    lambda m, a, out, i=i: captured.__setitem__(i, out)) for i in self.layers]
                try:
                    last = self.model(input_ids)
                finally:
                    for h in hooks:
                        h.remove()
                aux = torch.cat([captured[i] for i in self.layers], dim=-1)
                record = {"input_ids": input_ids, "loss_mask": loss_mask,
                          "aux_hidden_state": aux.unsqueeze(0).to(torch.bfloat16),
                          "hidden_state": last.unsqueeze(0).to(torch.bfloat16)}
                self._save_tensor_async(record, self._get_file_path(output_path, idx))


def shared_vocab_mapping(samples, output_path: str, target_vocab: int, draft_vocab: int) -> str:
    import datasets
    from specforge.data.preprocessing import generate_vocab_mapping_file
    mapping_dir = os.path.join(output_path, "vocab_mapping")
    mapping_path = os.path.join(mapping_dir, "vocab_mapping.pt")
    ds = datasets.Dataset.from_dict({"input_ids": [s[0].tolist() for s in samples],
                                     "loss_mask": [s[1].tolist() for s in samples]})
    ds.set_format("torch")
    temporary_path = generate_vocab_mapping_file(
        dataset=ds, target_vocab_size=target_vocab, draft_vocab_size=draft_vocab,
        cache_dir=mapping_dir, cache_key=f".vocab_mapping.{uuid.uuid4().hex}")
    mapping = torch.load(temporary_path, map_location="cpu", weights_only=True)
    assert tuple(mapping["d2t"].shape) == (draft_vocab,)
    os.replace(temporary_path, mapping_path)
    return mapping_path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--output-path", required=True)
    p.add_argument("--num-samples", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--num-io-threads", type=int, default=2)
    p.add_argument("--io-queue-size", type=int, default=4)
    p.add_argument("--file-group-size", type=int, default=4)
    p.add_argument("--compress", action="store_true")
    args = p.parse_args()
    model, tok = smollm2.load()
    text = smollm2.english_text()
    samples = []
    for i in range(args.num_samples):
        ids = torch.tensor(tok.encode(text[i * 250:(i + 1) * 250]).ids[:16 + 4 * i])
        mask = torch.ones_like(ids)
        mask[: len(ids) // 3] = 0
        samples.append((ids, mask))
    shared_vocab_mapping(samples, args.output_path, model.vocab_size, 256)
    with HiddenStatesGenerator(model, [1, 14, 26], args) as gen:
        gen.generate(samples, args.output_path, args.batch_size)


if __name__ == "__main__":
    main()
