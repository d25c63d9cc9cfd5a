// The read-ahead's settings (libshard/read_ahead.h): the rows of the loader's option table that
// apply to it, its defaults, and the check that the others were left alone.
#include <string>
#include <vector>

#include "libshard/read_ahead.h"

namespace libshard {
namespace {

constexpr std::string_view kWhat = "read-ahead option";

// Loader option rows that apply to the read-ahead, with the defaults it changes.
struct Row {
  std::string_view name;
  std::string_view default_value;  // empty: the loader's
};
constexpr Row kRows[] = {
    {"memory_budget", "'512MiB'"}, {"queue_depth", ""},    {"read_size", ""},
    {"engine", ""},                {"io_mode", ""},        {"pin_memory", "False"},
    {"worker_threads", ""},        {"verify", ""},         {"verify_checksums", ""},
    {"slow_wait_warning_seconds", ""},
};

}  // namespace

LoaderOptions DefaultReadAheadOptions() {
  LoaderOptions o;
  o.memory_budget = kReadAheadDefaultBudget;
  o.pin_memory = PinMemory::kOff;
  o.bucket_window = 0;
  return o;
}

const OptionTable<LoaderOptions>& ReadAheadOptionTable() {
  static const OptionTable<LoaderOptions>* const table = [] {
    std::vector<OptionSpec<LoaderOptions>> specs;
    for (const Row& row : kRows) {
      const OptionSpec<LoaderOptions>* spec = LoaderOptionTable().Find(row.name);
      if (spec == nullptr) continue;  // every row exists: read_ahead_test checks
      OptionSpec<LoaderOptions> copy = *spec;
      if (!row.default_value.empty()) copy.default_value = row.default_value;
      specs.push_back(std::move(copy));
    }
    return new OptionTable<LoaderOptions>(kWhat, std::move(specs));
  }();
  return *table;
}

Status ValidateReadAheadOptions(const LoaderOptions& o) {
  LIBSHARD_RETURN_IF_ERROR(ValidateLoaderOptions(o));
  std::string bad;
  const auto refuse = [&bad](bool set, std::string_view name) {
    if (set) bad += (bad.empty() ? "" : ", ") + std::string(name);
  };
  refuse(!o.fields.empty(), "fields");
  refuse(o.max_len > 0, "max_len");
  refuse(o.batch_size > 1, "batch_size");
  refuse(o.max_tokens > 0, "max_tokens");
  refuse(o.bucket_window > 0 && o.bucket_window != kAutoBucketWindow, "bucket_window");
  refuse(o.collate != Collate::kNone, "collate");
  refuse(o.order.kind() != OrderKind::kGlobal, "order");
  refuse(o.resume.has_value(), "resume");
  refuse(o.on_error != OnError::kRaise, "on_error");
  if (bad.empty()) return Status::OK();
  return Status::InvalidArgument(
      "read-ahead options: " + bad +
      " do not apply: the read-ahead serves whole samples by index in the order announced "
      "(its settings are memory_budget, queue_depth, read_size, engine, io_mode, pin_memory, "
      "worker_threads, verify, slow_wait_warning_seconds)");
}

}  // namespace libshard
