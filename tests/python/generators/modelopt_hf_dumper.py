"""ModelOpt's Hugging Face hidden-state dumper, as tests/python/test_capture_generators.py runs it.

Written for libshard's tests from reading NVIDIA/Model-Optimizer's
examples/speculative_decoding/collect_hidden_states/compute_hidden_states_hf.py (that script is
in the repository, not in the nvidia-modelopt wheel): the same arguments, the same steps and the
same way of writing a sample. It loads conversations from jsonl with ``datasets``, keeps this DP
rank's shard, drops the conversations whose ``OUTPUT_DIR/<conversation_id>.pt`` exists
(``Path.exists``: its resume), runs a transformers ``AutoModel`` with ``output_hidden_states``,
and writes each conversation with ``open(file, "wb")`` + ``torch.save({...}, f)`` from asyncio
tasks. ``--aux-layers eagle`` asks ModelOpt itself (the wheel's
``default_eagle_aux_layer_ids``). One line is added: ``dumped <id>`` on stdout after each file,
so a test can kill the run after a given sample.
"""

import argparse
import asyncio
from pathlib import Path

import torch
from datasets import load_dataset
from transformers import AutoModel, AutoTokenizer


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model", type=str, required=True)
    p.add_argument("--max-seq-len", type=int, default=3072)
    p.add_argument("--input-data", type=Path, required=True)
    p.add_argument("--output-dir", type=Path, required=True)
    p.add_argument("--debug-max-num-conversations", type=int, default=None)
    p.add_argument("--dp-rank", type=int, default=0)
    p.add_argument("--dp-world-size", type=int, default=1)
    p.add_argument("--aux-layers", type=str, default="eagle")
    return p.parse_args()


def resolve_aux_layers(value: str, num_hidden_layers: int) -> list:
    if value.strip().lower() == "eagle":
        from modelopt.torch.speculative.plugins.hf_eagle import default_eagle_aux_layer_ids
        return default_eagle_aux_layer_ids(num_hidden_layers)
    return sorted({int(t) for t in value.split(",") if t.strip()})


def main(args: argparse.Namespace) -> None:
    if args.input_data.is_file() and str(args.input_data).endswith(".jsonl"):
        dataset = load_dataset("json", data_files=str(args.input_data), split="train")
    else:
        dataset = load_dataset("json", data_files={"train": f"{args.input_data}/*.jsonl"},
                               split="train")
    if args.dp_world_size > 1:
        dataset = dataset.shard(num_shards=args.dp_world_size, index=args.dp_rank)

    def keep_conversation(entry):
        conversation_id = entry.get("conversation_id", entry.get("uuid", None))
        return not (args.output_dir / f"{conversation_id}.pt").exists()

    original_num = len(dataset)
    dataset = dataset.filter(keep_conversation)
    print("Removed", original_num - len(dataset), "conversations due to existing output files",
          flush=True)
    if args.debug_max_num_conversations is not None:
        dataset = dataset.select(range(args.debug_max_num_conversations))

    model = AutoModel.from_pretrained(args.model, dtype="auto", device_map="auto")
    selected_layer_ids = resolve_aux_layers(args.aux_layers, model.config.num_hidden_layers)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    output_dir = args.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)

    async def dump_hidden_states(conversation_id, input_ids, loss_mask):
        with torch.inference_mode():
            outputs = model(input_ids=input_ids.to(model.device), output_hidden_states=True)
            hidden_states = outputs.hidden_states
            aux_hidden_states = torch.cat(
                [hidden_states[lid + 1].squeeze(0).cpu() for lid in selected_layer_ids], dim=-1)
            output_hidden_states = hidden_states[-1].squeeze(0).cpu()
        output_file = output_dir / f"{conversation_id}.pt"
        with open(output_file, "wb") as f:
            torch.save({"input_ids": input_ids.squeeze(0).cpu(),
                        "hidden_states": output_hidden_states,
                        "aux_hidden_states": aux_hidden_states,
                        "loss_mask": loss_mask,
                        "conversation_id": conversation_id}, f)
        print("dumped", conversation_id, flush=True)

    async def submit_generates():
        tasks = []
        for entry in dataset:
            conversation_id = entry.get("conversation_id", entry.get("uuid"))
            conversations = entry.get("messages") or entry["conversations"]
            out = tokenizer.apply_chat_template(conversations, return_tensors="pt",
                                                return_dict=True, add_generation_prompt=False)
            input_ids = out["input_ids"]
            n = input_ids.shape[1]
            if n <= 10 or n > args.max_seq_len:
                continue
            loss_mask = torch.ones(n, dtype=torch.long)
            tasks.append(dump_hidden_states(conversation_id, input_ids, loss_mask))
        await asyncio.gather(*tasks)

    asyncio.run(submit_generates())


if __name__ == "__main__":
    main(parse_args())
