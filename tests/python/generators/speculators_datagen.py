"""speculators' offline datagen with vLLM's hidden-states connector, as
tests/python/test_capture_generators.py runs it on a CPU.

Written for libshard's tests from reading vllm-project/speculators' scripts/data_generation_offline.py
and vLLM's ExampleHiddenStatesConnector (and hs-connectors' FP8HiddenStatesConnector): the vLLM
server is replaced by SmolLM2-135M run in plain PyTorch (examples/smollm2.py; vLLM needs a GPU),
whose "connector" writes each request's ``{"hidden_states": [S, L+1, H], "token_ids": [S]}`` with
safetensors' ``save_file`` into its staging directory under a ``.lock`` file, from a writer thread
pool, as the connector does. The client part is the datagen's: the speculators wheel's own
``get_existing_hidden_state_indices`` (its resume: ``Path.iterdir`` of the output directory) and
``get_indices_to_process``, asyncio workers that wait for the lock, ``shutil.move`` the file to
``OUTPUT/hs_{i}.safetensors`` and, with ``--validate-outputs``, read it back with ``load_file``
and the wheel's ``check_hidden_states``. ``--fp8`` quantizes as hs-connectors' FP8 connector does
(its ``quantize_tensor_to_fp8``). Prints ``saved <i>`` after each sample.
"""

import argparse
import asyncio
import os
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from speculators.data_generation.offline import (
    check_hidden_states,
    get_existing_hidden_state_indices,
    get_indices_to_process,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import smollm2  # noqa: E402


class HiddenStatesServer:
    """The model and its connector: generate(token_ids) returns the path of a staged file."""

    def __init__(self, model, staging: Path, layers, fp8: bool) -> None:
        self.model = model
        self.layers, self.fp8, self.staging = layers, fp8, staging
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="vllm-hs-save")
        staging.mkdir(parents=True, exist_ok=True)
        self._n = 0
        self._lock = threading.Lock()

    def _write(self, tensors, filename: str, lock_fd: int) -> None:
        try:
            if self.fp8:
                from hs_connectors.fp8_utils import SCALES_KEY, quantize_tensor_to_fp8
                q, scales = quantize_tensor_to_fp8(tensors["hidden_states"])
                tensors = {**tensors, "hidden_states": q, SCALES_KEY: scales}
            save_file(tensors, filename)
        finally:
            os.close(lock_fd)

    def generate(self, token_ids) -> str:
        ids = torch.tensor(token_ids)
        captured = {}
        with self._lock:  # one forward at a time (the engine schedules the requests)
            hooks = [self.model.layers[i].register_forward_hook(
                lambda m, a, out, i=i: captured.__setitem__(i, out)) for i in self.layers]
            try:
                with torch.inference_mode():
                    last = self.model(ids)
            finally:
                for h in hooks:
                    h.remove()
        states = [captured[i].reshape(len(token_ids), -1) for i in self.layers]
        states.append(last.reshape(len(token_ids), -1))
        hs = torch.stack(states, dim=1).to(torch.bfloat16)  # [S, L+1, H]
        with self._lock:
            self._n += 1
            filename = str(self.staging / f"req-{self._n}.safetensors")
        import fcntl
        lock_fd = os.open(filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        self.pool.submit(self._write, {"hidden_states": hs, "token_ids": ids}, filename, lock_fd)
        return filename


async def wait_for_lock_async(lock_path: str) -> None:
    import fcntl
    fd = os.open(lock_path, os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(0.01)
    finally:
        os.close(fd)
    os.remove(lock_path)


async def worker(server, queue, out: Path, validate: bool) -> None:
    while True:
        item = await queue.get()
        if item is None:
            queue.task_done()
            return
        idx, token_ids = item
        target = out / f"hs_{idx}.safetensors"
        path = await asyncio.to_thread(server.generate, token_ids)
        lock_path = path + ".lock"
        if Path(lock_path).exists():
            await wait_for_lock_async(lock_path)
        await asyncio.to_thread(shutil.move, path, target)
        if validate:
            loaded = await asyncio.to_thread(load_file, target)
            if "hidden_states_scales" not in loaded:
                check_hidden_states(loaded, token_ids)
        print("saved", idx, flush=True)
        queue.task_done()


async def generate(args, model, prompts) -> None:
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    existing = get_existing_hidden_state_indices(out)
    to_process = get_indices_to_process(len(prompts), args.max_samples, existing,
                                        args.world_size, args.rank)
    print(f"existing {len(existing)}", flush=True)
    if not to_process:
        return
    server = HiddenStatesServer(model, Path(args.staging), [1, 14, 26], args.fp8)
    queue: asyncio.Queue = asyncio.Queue(maxsize=args.concurrency * 4)
    workers = [asyncio.create_task(worker(server, queue, out, args.validate_outputs))
               for _ in range(args.concurrency)]
    for i in to_process:
        await queue.put((i, prompts[i]))
    for _ in workers:
        await queue.put(None)
    await asyncio.gather(*workers)
    server.pool.shutdown(wait=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--output", required=True)
    p.add_argument("--staging", required=True, help="the connector's shared_storage_path")
    p.add_argument("--max-samples", type=int, default=None)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--validate-outputs", action="store_true")
    p.add_argument("--fp8", action="store_true")
    args = p.parse_args()
    model, tok = smollm2.load()
    text = smollm2.english_text()
    prompts = [tok.encode(text[i * 300:(i + 1) * 300]).ids[:20 + 3 * i]
               for i in range(args.num_prompts)]
    asyncio.run(generate(args, model, prompts))


if __name__ == "__main__":
    main()
