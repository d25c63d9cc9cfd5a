// Writing a dataset to s3://BUCKET/PREFIX (docs/guide/object-storage.md, "Writing").
//
// The dataset is written as usual into a local staging directory (StagingDir), with its journal
// (FORMAT.md §6); each shard is uploaded (remote/uploader.h) as soon as the Writer seals it,
// while the next one is written. Finish commits locally, waits for every shard, then puts the
// index and, last, manifest.json: until that PUT a reader of the URL finds no dataset, after it
// the whole new one (the commit point, as the manifest's rename is locally). Create refuses a
// prefix that already holds a manifest.json, so a reader never sees a mix of two writes.
//
// A killed writer resumes (Writer::Resume, `pack --resume`) from the staging directory: the
// local journal restores the samples, the upload journal the uploads (no part that is up is
// uploaded again). After the manifest is up the staging directory is removed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "libshard/merge.h"
#include "libshard/writer.h"

namespace libshard::remote {

// The staging directory of an s3:// output: $LIBSHARD_S3_STAGING/BUCKET/KEY when set, else
// CACHE_ROOT/staging/BUCKET/KEY (the node-local cache root of remote_dataset.h). Deterministic,
// so that a resumed job finds it. InvalidArgument for a bad URL.
Result<std::string> StagingDir(const std::string& url);

Result<std::unique_ptr<Writer>> CreateS3Writer(const std::string& url, const Schema& schema,
                                               const WriterOptions& options);
Result<std::unique_ptr<Writer>> ResumeS3Writer(const std::string& url,
                                               const WriterOptions& options);

// MergeDatasets with an s3:// output: merges into the staging directory, then publishes it
// (shards, index, manifest last). A merge killed while uploading is finished by running it again.
[[nodiscard]] Status MergeToS3(const std::string& url, const std::vector<std::string>& parts,
                               const MergeOptions& options);

}  // namespace libshard::remote
