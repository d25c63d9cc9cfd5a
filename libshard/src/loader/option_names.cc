// The user-facing names of the loader's enum settings, parsed in one place for the Python
// options, the CLI flags and the environment variables.
#include <string>
#include <string_view>

#include "libshard/loader.h"
#include "loader/recipes/batch_recipe.h"

namespace libshard {
namespace {

Status NotOneOf(std::string_view name, const char* accepted) {
  return Status::InvalidArgument("'" + std::string(name) + "' is not one of " + accepted);
}

}  // namespace

Result<IoEngineKind> ParseIoEngineKind(std::string_view name) {
  if (name == "auto") return IoEngineKind::kAuto;
  if (name == "uring" || name == "io_uring") return IoEngineKind::kIoUring;
  if (name == "pread") return IoEngineKind::kPread;
  return NotOneOf(name, "auto, uring, pread");
}

Result<IoMode> ParseIoMode(std::string_view name) {
  if (name == "auto") return IoMode::kAuto;
  if (name == "direct") return IoMode::kDirect;
  if (name == "buffered") return IoMode::kBuffered;
  return NotOneOf(name, "auto, direct, buffered");
}

Result<PinMemory> ParsePinMemory(std::string_view name) {
  if (name == "auto") return PinMemory::kAuto;
  if (name == "on" || name == "true") return PinMemory::kOn;
  if (name == "off" || name == "false") return PinMemory::kOff;
  return NotOneOf(name, "auto, on, off");
}

Result<OnError> ParseOnError(std::string_view name) {
  if (name == "raise") return OnError::kRaise;
  if (name == "skip") return OnError::kSkip;
  return NotOneOf(name, "raise, skip");
}

Result<TokenBudget> ParseTokenBudget(std::string_view name) {
  if (name == "auto") return TokenBudget::kAuto;
  if (name == "sum") return TokenBudget::kSum;
  if (name == "padded") return TokenBudget::kPadded;
  return NotOneOf(name, "auto, sum, padded");
}

Result<Collate> ParseCollate(std::string_view name) {
  if (name == "none") return Collate::kNone;
  if (name == "pad") return Collate::kPad;
  if (name == "pack") return Collate::kPack;
  std::string names = "none, pad, pack";
  for (const BatchRecipeEntry* e : BatchRecipes()) {
    if (name == e->name) return e->id;
    names += ", " + std::string(e->name);
  }
  return Status::InvalidArgument("'" + std::string(name) + "' is not one of " + names);
}

Result<OversizedSample> ParseOversizedSample(std::string_view name) {
  if (name == "batch") return OversizedSample::kOwnBatch;
  if (name == "error") return OversizedSample::kError;
  return NotOneOf(name, "batch, error");
}

}  // namespace libshard
