// ReadScheduler (read_scheduler.h), the completion side: sub-reads finishing, each item's checks
// and decoding (inline or on a worker thread), and handing it to the consumer through the item
// queue. The scheduler thread and the set-up are in read_scheduler.cc.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <utility>

#include "dataset/dataset_access.h"
#include "format/checksum.h"
#include "io/direct_io.h"
#include "loader/read_layout.h"
#include "loader/read_scheduler.h"
#include "remote/shard_filler.h"

namespace libshard {

void ReadScheduler::OnSubReadDone(Item* item, const io::ReadCompletion& c, uint64_t offset,
                                  uint64_t length) {
  --item->subs_pending;
  item->bytes_read += c.bytes;
  diagnostics_->AddBytesRead(c.bytes);
  if (item->error.ok()) {
    if (!c.status.ok()) {
      item->error = c.status.WithContext("sample " + std::to_string(item->sample));
    } else {
      const uint64_t needed = item->layout.needed;
      const uint64_t required = needed > offset ? std::min(length, needed - offset) : 0;
      if (c.bytes < required) {
        item->error = Status::Corruption(
            ItemWhere(*item) + ": sample " + std::to_string(item->sample) + ": read only " +
            std::to_string(c.bytes) + " of " + std::to_string(required) + " bytes at offset " +
            std::to_string(item->layout.file_offset + offset) +
            " (end of file); the shard is shorter than the index says; restore it or re-run "
            "libshard pack");
      }
    }
  }
  if (item->subs_pending == 0 && item != issuing_) FinishRead(item);
}

void ReadScheduler::FinishRead(Item* item) {
  item->cache_holds.clear();  // every sub-read of the cache file has completed (docs/CACHE.md §3)
  DoneReading(item);
  if (!item->error.ok()) {
    Complete(item, item->error);
    return;
  }
  const bool compressed = SampleNeedsDecode(item->location.flags);
  // A row-range read is checked, decoded and cut on a worker (Complete: FinishSliceRead).
  if (Verifies(*item) || compressed || item->layout.slice) {
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      tasks_.push_back(item);
      if (compressed) {  // a checksum alone keeps up with the reads
        ++backlog_items_;
        backlog_bytes_ += item->slot_bytes;
        backlog_peak_ = std::max(backlog_peak_, backlog_bytes_);
      }
    }
    work_cv_.notify_one();
    return;
  }
  Complete(item, Status::OK());
}

bool ReadScheduler::Verifies(const Item& item) const {
  return options_.verify_checksums && (item.layout.whole || item.layout.check_fields);
}

Status ReadScheduler::VerifyAndDecode(Item* item) {
  const SampleLocation& loc = item->location;
  // A row-range read: its checks and decoding are FinishSliceRead's, which Complete runs.
  if (item->layout.slice) return Status::OK();
  std::span<const std::byte> stored(item->read_slot.get(), loc.stored_size);
  if (Verifies(*item) && item->layout.check_fields) {
    // A partial read of a raw sample: the field checksum of every field served (FORMAT.md §3.9).
    const ReadLayout& l = item->layout;
    Status st = internal::DatasetAccess::VerifyFields(
        *dataset_, item->sample, item->read_slot.get() + l.skew, l.payload_begin,
        l.payload_end - l.payload_begin, field_indices_);
    if (!st.ok() && st.code() == StatusCode::kCorruption) diagnostics_->OnChecksumFailure();
    return st;
  }
  if (Verifies(*item)) {
    const uint64_t sum = format::Xxh3(stored);
    if (sum != loc.checksum) {
      diagnostics_->OnChecksumFailure();
      char buf[160];
      std::snprintf(buf, sizeof buf, "checksum mismatch (xxh3 of the %llu stored bytes is %016llx, "
                    "the index says %016llx)",
                    static_cast<unsigned long long>(loc.stored_size),
                    static_cast<unsigned long long>(sum),
                    static_cast<unsigned long long>(loc.checksum));
      return Status::Corruption(ItemWhere(*item) + ": sample " + std::to_string(item->sample) +
                                ": " + buf + "; the shard is damaged: restore it or re-run "
                                "libshard pack");
    }
  }
  if (SampleNeedsDecode(loc.flags)) {
    std::span<std::byte> raw(item->raw_slot.get(), loc.raw_size);
    // Only the selected fields, and only their max_len prefix where the codec allows it.
    LIBSHARD_RETURN_IF_ERROR(
        internal::DatasetAccess::DecodeSelected(*dataset_, item->sample, stored, raw,
                                                field_indices_, options_.max_len)
            .WithContext(ItemWhere(*item)));
  }
  return Status::OK();
}

Status ReadScheduler::HealItem(Item* item, const Status& failure) {
  ShardFiller* filler = internal::DatasetAccess::shard_filler(*dataset_);
  if (filler == nullptr || item->read_slot == nullptr) return failure;
  // Every byte served is checked: the fresh bytes land in the slot and VerifyAndDecode runs
  // again on them (docs/CACHE.md §7).
  return filler->Heal(item->location.shard, item->layout.file_offset, item->layout.read_length,
                      failure, item->read_slot.get(), [&] { return VerifyAndDecode(item); });
}

namespace {

// A delivered sample's memory owner: its slots and the dataset whose schema its names view.
struct SampleKeepsDataset {
  std::shared_ptr<const void> memory;
  std::shared_ptr<const Dataset> dataset;
};

// An s3:// dataset's row-range read that failed its checks (docs/CACHE.md §7): the cache blocks
// under its extents fetched again from the bucket, the extents read again from the cached copy
// into the slot and checked again; a second failure blames the bucket's object.
Result<Sample> HealSlice(const Dataset& dataset, const Item& item, const Status& failure,
                         const std::shared_ptr<const void>& memory) {
  const ReadLayout& l = item.layout;
  const SampleLocation& loc = item.location;
  if (l.extents.empty()) return failure;
  const ReadExtent& last = l.extents.back();
  Result<Sample> again = failure;
  Status healed = internal::DatasetAccess::shard_filler(dataset)->Heal(
      loc.shard, l.file_offset, last.file_offset + last.length - l.file_offset, failure, nullptr,
      [&]() -> Status {
        for (const ReadExtent& e : l.extents) {
          const uint64_t from = e.file_offset - loc.offset;  // pages of the sample's extent
          if (from >= loc.stored_size) continue;
          LIBSHARD_RETURN_IF_ERROR(internal::DatasetAccess::ReadStoredRange(
              dataset, item.sample, from, std::min(e.length, loc.stored_size - from),
              item.read_slot.get() + e.slot_offset));
        }
        again = FinishSliceRead(dataset, loc, l, item.read_slot.get(), item.raw_slot.get(),
                                memory);
        return again.status();
      });
  if (!healed.ok()) return healed;
  return again;
}

}  // namespace

void ReadScheduler::Complete(Item* item, Status status) {
  std::optional<Sample> sample;
  if (status.ok()) {
    const SampleLocation& loc = item->location;
    Result<Sample> built = Status::Internal("unset");
    if (item->layout.slice) {
      // Row blocks (FORMAT.md §3.10): every block read is checked here, on a worker thread.
      std::shared_ptr<const void> memory =
          item->raw_slot != nullptr
              ? std::shared_ptr<const void>(std::make_shared<std::pair<std::shared_ptr<std::byte>,
                                                                       std::shared_ptr<std::byte>>>(
                    item->read_slot, item->raw_slot))
              : std::shared_ptr<const void>(item->read_slot);
      built = FinishSliceRead(*dataset_, loc, item->layout, item->read_slot.get(),
                              item->raw_slot.get(), memory);
      if (!built.ok() && built.status().code() == StatusCode::kCorruption) {
        diagnostics_->OnChecksumFailure();
        if (internal::DatasetAccess::shard_filler(*dataset_) != nullptr)
          built = HealSlice(*dataset_, *item, built.status(), memory);
      }
      if (!built.ok()) built = built.status().WithContext(ItemWhere(*item));
    } else if (item->raw_slot != nullptr) {
      built = BuildSample(*dataset_, item->sample, item->raw_slot.get(), 0, loc.raw_size,
                          item->raw_slot, field_indices_, options_.max_len);
    } else if (item->layout.whole) {
      built = BuildSample(*dataset_, item->sample, item->read_slot.get(), 0, loc.stored_size,
                          item->read_slot, field_indices_, options_.max_len);
    } else {
      built = BuildSample(*dataset_, item->sample, item->read_slot.get() + item->layout.skew,
                          item->layout.payload_begin,
                          item->layout.payload_end - item->layout.payload_begin, item->read_slot,
                          field_indices_, options_.max_len);
    }
    if (built.ok()) {
      sample = std::move(built).value();
      // The tensors' names live in the dataset's schema: the sample holds the dataset, so they
      // outlive the loader (Loader::Create's last reference, follow mode's snapshots).
      sample->set_memory_owner(std::make_shared<const SampleKeepsDataset>(
          SampleKeepsDataset{sample->memory_owner(), dataset_}));
      if (item->sp.sp_size > 0) sample->set_sequence_slice(item->sp);
    } else {
      status = built.status();
    }
  }
  std::shared_ptr<std::byte> drop;  // the stored bytes of a decoded sample, released unlocked
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    // A row-range read's Sample may view both slots (raw rows in place, decoded fields): its
    // read slot stays counted until the item is taken.
    if (item->raw_slot != nullptr && item->read_slot != nullptr && !item->layout.slice) {
      queue_->pipeline_bytes -= SlotBytes(item->layout.read_length);
      item->slot_bytes -= SlotBytes(item->layout.read_length);
      drop = std::move(item->read_slot);
    }
    if (sample) {
      item->result = std::move(sample);
    } else {
      item->error = std::move(status);
      queue_->pipeline_bytes -= item->slot_bytes;  // the slots go now, not when it is popped
      item->slot_bytes = 0;
    }
    item->read_slot.reset();
    item->raw_slot.reset();
    item->ready = true;
    // Only an item of the batch the consumer waits for can end its wait: completions further
    // ahead would wake it for nothing (a futex round trip and a context switch each).
    wake = item->seq < queue_->wake_before_seq;
  }
  if (wake) queue_->ready_cv.notify_all();
}

void ReadScheduler::WorkerLoop() {
  std::unique_lock<std::mutex> lock(queue_->mu);
  while (true) {
    work_cv_.wait(lock, [this] { return workers_exit_ || !tasks_.empty(); });
    if (tasks_.empty()) return;
    Item* item = tasks_.front();
    tasks_.pop_front();
    ++active_tasks_;
    // In the backlog (FinishRead); read now: the item may be consumed once Complete returns.
    const bool counted = SampleNeedsDecode(item->location.flags);
    const uint64_t bytes = item->slot_bytes;
    lock.unlock();
    Status s = VerifyAndDecode(item);
    if (!s.ok() && s.code() == StatusCode::kCorruption) s = HealItem(item, s);
    Complete(item, std::move(s));
    lock.lock();
    if (counted) {
      --backlog_items_;
      backlog_bytes_ -= bytes;
    }
    if (blocked_on_backlog_ && BacklogLow()) {
      blocked_on_backlog_ = false;
      engine_->Wake();
    }
    --active_tasks_;
    if (active_tasks_ == 0) idle_cv_.notify_all();
  }
}

std::string ReadScheduler::ItemWhere(const Item& item) const {
  const auto& shards = dataset_->shards();
  const std::string file =
      item.location.shard < shards.size() ? shards[item.location.shard].path : "?";
  return file + " offset " + std::to_string(item.location.offset);
}

}  // namespace libshard
