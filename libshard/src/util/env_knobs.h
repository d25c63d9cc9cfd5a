// Every LIBSHARD_* environment variable the library reads, declared once: one row each (name,
// type, default, bounds, one line of doc) in an option table (libshard/option_table.h), read
// through the same parsers as the options (a byte count takes "10GiB" as `cache_size=` does). A
// bad value is an InvalidArgument naming the variable, never ignored. docs/guide/environment.md
// lists the table as EnvKnobsMarkdown() prints it (tests/env_knobs_test.cc holds the two
// together).
#pragma once

#include <cstdint>
#include <string>

#include "libshard/option_table.h"
#include "libshard/status.h"

namespace libshard {

// The variables' values, defaults where unset.
struct EnvKnobs {
  // Cache of s3:// datasets (docs/CACHE.md).
  std::string cache_dir;  // LIBSHARD_CACHE_DIR; empty: $XDG_CACHE_HOME/libshard, ~/.cache/libshard
  uint64_t cache_block_size = uint64_t{4} << 20;
  uint64_t cache_min_free = kUnset;  // kUnset: 5 % of the file system, at most 10 GiB
  uint64_t cache_measure_seconds = 60;
  // The S3 client.
  uint64_t s3_connections = 8;
  uint64_t s3_max_attempts = 8;
  uint64_t s3_stall_seconds = 30;
  uint64_t s3_timeout_seconds = 300;
  uint64_t s3_backoff_ms = 100;
  std::string s3_addressing;  // "", auto, path or virtual
  // gs:// (Cloud Storage's S3-interoperable XML API, over the same client).
  std::string gs_endpoint;    // "": https://storage.googleapis.com
  std::string gs_addressing;  // "", auto, path or virtual
  // Writing to s3://.
  uint64_t s3_part_size = uint64_t{16} << 20;
  uint64_t s3_upload_threads = 8;
  bool s3_content_md5 = true;
  std::string s3_staging;
  // Reading.
  std::string engine;            // "", auto, uring, io_uring or pread
  std::string io_mode;           // "", auto, direct or buffered
  std::string io_refuse_direct;  // "", open or read
  double stats_seconds = -1;     // < 0: unset
  // Kernels.
  std::string planes_kernel;  // "", auto, sse2 or avx2
  std::string xxh3;           // "": the fastest; else a build's name

  static constexpr uint64_t kUnset = UINT64_MAX;
};

const OptionTable<EnvKnobs>& EnvKnobTable();

// Every variable of the table that is set, parsed; InvalidArgument naming the first bad one:
// "environment variable 'LIBSHARD_CACHE_MIN_FREE' ...". Reads the environment on every call.
Result<EnvKnobs> ReadEnvKnobs();
// The same, for code with no error path (a kernel choice made once): each bad variable takes its
// default, the others their values. Every entry point of the library refuses a bad variable
// first (storage::OpenStorage, Loader::Create), so this differs from ReadEnvKnobs only when the
// environment changed since.
EnvKnobs EnvKnobsOrDefaults();

// The table as docs/guide/environment.md shows it (a Markdown table).
std::string EnvKnobsMarkdown();

}  // namespace libshard
