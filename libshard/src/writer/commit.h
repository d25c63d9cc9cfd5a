// Writing the index and the manifest of a dataset and committing it (FORMAT.md §2.3), shared by
// Writer::Finish and MergeDatasets.
#pragma once

#include <string>
#include <vector>

#include "format/index.h"
#include "libshard/dataset.h"
#include "libshard/schema.h"
#include "libshard/status.h"
#include "libshard/writer.h"

namespace libshard::internal {

struct CommitRequest {
  std::string dir;
  Schema schema;
  std::vector<format::IndexShard> shards;  // complete, final names, sizes as on disk
  const std::vector<format::IndexSample>* samples = nullptr;
  std::string index_file = "index.lsi";    // must not be the index the current manifest names
  std::string old_index_file;              // removed after the commit when not empty
  std::string source_root;
  std::string created_by;
  Attributes attributes;
  // Per field (FORMAT.md §3.8.3); empty when every field is raw. Samples then carry
  // field_stored_sizes.
  std::vector<format::FieldCodec> codecs;
  bool fsync = true;
};

// Writes the index (tmp + rename), then the manifest (tmp + rename), fsyncs the directory and
// removes the old index. The manifest rename is the commit point.
Result<WriteSummary> CommitDataset(const CommitRequest& request);

// Sample i of `dataset` as a writer holds it (append, merge).
Result<format::IndexSample> SampleEntryFromDataset(const Dataset& dataset, uint64_t i);

}  // namespace libshard::internal
