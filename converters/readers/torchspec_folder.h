// TorchSpec's offline folder (the "simple folder format" of its offline training, torchspec/
// offline/dataset.py, schema version 1) as a pack source. Written from reading that public code;
// none of it is copied.
//
// Layout of the directory:
//   dataset.json    {"version": 1, "last_hidden_states_prenorm": bool or null}
//   manifest.jsonl  one JSON object a line (blank lines skipped): {"split": "train" | "eval",
//                   "data_id": str, "file": "samples/<sha1 of data_id>.pt", "seq_len": int}
//   samples/*.pt    one torch.save dict a sample: input_ids, hidden_states and optionally target
//                   and last_hidden_states tensors, data_id (str), packed_loss_mask (str or None),
//                   metadata (dict)
//
// Sample i is the file of manifest line i (blank lines not counted), read by the .pt reader
// (readers/torch_zip_source.h): its tensors and metadata as torch.load gives them, plus the
// metadata "split" from its manifest line. Its key is the line's "file". Checked: dataset.json's
// version; every line's split, data_id (a string or an integer, unique), file (a plain relative
// path beneath the folder: no "..", no symlink followed) and seq_len; and, when a sample is read,
// that its data_id and input_ids length match its line (as TorchSpec's reader checks).
#pragma once

#include <memory>

#include "readers/cache_source.h"

namespace libshard::convert {

Result<std::unique_ptr<CacheSource>> OpenTorchSpecFolder(std::unique_ptr<CacheDir> dir,
                                                         const SourceOptions& options);

}  // namespace libshard::convert
