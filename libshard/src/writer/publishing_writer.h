// The Writer entry points' common path (writer.cc): the location's storage driver
// (storage/storage_driver.h) gives a WriteTarget; the local writer (WriterImpl) writes the
// target's local directory, tells it each shard it seals, and Finish publishes through it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "libshard/writer.h"
#include "storage/storage_driver.h"

namespace libshard::writer_internal {

// Opens the local writer of a target's directory (WriterImpl::Create, Resume or OpenForAppend).
using OpenLocalWriter = std::function<Result<std::unique_ptr<Writer>>(
    const std::string& dir, const WriterOptions& options)>;

// A write of `location` of kind `kind`: begins it with the location's driver (a write that was
// committed locally and not yet published is published first: the resumed writer then adds to
// the published dataset), opens the local writer with `open` on the target's directory, and
// returns a Writer whose Finish commits locally, publishes and releases the local copy.
Result<std::unique_ptr<Writer>> OpenThroughStorage(const std::string& location,
                                                   storage::WriteKind kind,
                                                   const WriterOptions& options,
                                                   const OpenLocalWriter& open);

}  // namespace libshard::writer_internal
