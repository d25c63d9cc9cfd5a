// Tests for the IoEngine implementations (io_uring and the pread pool), each on a real disk and
// on tmpfs, with O_DIRECT and buffered descriptors: same bytes, short reads at EOF, errors that
// name the file and offset, Wake() and CancelAll().
#include "io/io_engine.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <algorithm>
#include <functional>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "io/direct_io.h"
#include "io/file.h"
#include "io/filesystem.h"
#include "testutil/testutil.h"

namespace libshard::io {
namespace {

namespace fs = std::filesystem;

struct AlignedFree {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, AlignedFree>;

AlignedBuffer Allocate(size_t n) {
  return AlignedBuffer(static_cast<std::byte*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096)));
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Engine x direct x file-system location.
using Param = std::tuple<IoEngineKind, bool, std::string>;

class IoEngineTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const auto& [type, direct, base] = GetParam();
    std::string tmpl = base + "/libshard_engine_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) GTEST_SKIP() << base << " is not usable";
    dir_ = tmpl;
    // 3 MiB + 1234 bytes: the last read crosses end of file.
    data_ = RandomBytes((3 << 20) + 1234, 7);
    path_ = (dir_ / "data.bin").string();
    testing::WriteStringToFile(path_, data_);
    Result<OpenedFile> f = OpenForReading(path_, direct ? IoMode::kAuto : IoMode::kBuffered);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(f->file);
    direct_ = f->direct;
    EngineOptions options;
    options.queue_depth = 4;
    options.threads = 2;
    options.register_ready = [this](const void* begin) {
      asked_.push_back(begin);
      return ready_;
    };
    Result<CreatedEngine> e = CreateIoEngine(type, options);
    if (!e.ok() && e.status().code() == StatusCode::kUnsupported) {
      GTEST_SKIP() << "io_uring unavailable here: " << e.status().ToString();
    }
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->kind, type);
    EXPECT_TRUE(e->uring_error.ok()) << e->uring_error.ToString();
    EXPECT_EQ(e->engine->name(), type == IoEngineKind::kIoUring ? "io_uring" : "pread");
    engine_ = std::move(e->engine);
    const int fd = file_.fd();
    ASSERT_TRUE(engine_->SetFiles({&fd, 1}, {&path_, 1}).ok());
  }
  void TearDown() override {
    engine_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Reads the whole file in `chunk`-byte requests with at most capacity() in flight.
  void ReadAll(std::byte* dst, uint64_t chunk) {
    const uint64_t size = data_.size();
    const uint64_t padded = (size + 4095) / 4096 * 4096;
    uint64_t next = 0;
    uint64_t total = 0;
    uint32_t outstanding = 0;
    while (next < padded || outstanding > 0) {
      while (next < padded && engine_->in_flight() < engine_->capacity()) {
        const uint64_t len = std::min(chunk, padded - next);
        ASSERT_TRUE(engine_->Submit(ReadRequest{0, next, len, dst + next, next}).ok());
        next += len;
        ++outstanding;
      }
      ASSERT_TRUE(engine_->Flush().ok());
      std::vector<ReadCompletion> done;
      ASSERT_TRUE(engine_->Reap(&done, true, 1000).ok());
      for (const ReadCompletion& c : done) {
        ASSERT_TRUE(c.status.ok()) << c.status.ToString();
        const uint64_t expect = std::min(chunk, size > c.tag ? size - c.tag : 0);
        EXPECT_EQ(c.bytes, std::min(expect, padded - c.tag)) << "read at " << c.tag;
        total += c.bytes;
        --outstanding;
      }
    }
    EXPECT_EQ(total, size);
  }

  fs::path dir_;
  std::string path_;
  std::string data_;
  File file_;
  bool direct_ = false;
  std::unique_ptr<IoEngine> engine_;
  bool ready_ = true;               // what register_ready answers
  std::vector<const void*> asked_;  // the chunks register_ready was asked about
};

TEST_P(IoEngineTest, ReadsIdenticalBytesIncludingShortReadAtEof) {
  const uint64_t padded = (data_.size() + 4095) / 4096 * 4096;
  AlignedBuffer buf = Allocate(padded);
  ReadAll(buf.get(), 1 << 20);
  EXPECT_EQ(std::memcmp(buf.get(), data_.data(), data_.size()), 0);
}

TEST_P(IoEngineTest, RegisteredBufferGivesSameBytes) {
  const uint64_t padded = (data_.size() + 4095) / 4096 * 4096;
  AlignedBuffer buf = Allocate(padded);
  const BufferRegistration how = engine_->RegisterBuffer(buf.get(), padded);
  using State = BufferRegistration::State;
  if (std::get<0>(GetParam()) == IoEngineKind::kPread) {
    EXPECT_EQ(how.state, State::kNotUsed);
  } else {
    EXPECT_TRUE(how.state == State::kRegistered || how.state == State::kOnFirstUse ||
                how.state == State::kFailed)
        << Describe(how);
    // Registered on first use: nothing is asked (nor touched) before a read lands in it.
    EXPECT_TRUE(asked_.empty());
    EXPECT_EQ(engine_->RegisterBuffer(buf.get(), padded).state,
              how.state == State::kFailed ? State::kFailed : State::kAlreadyRegistered);
  }
  ReadAll(buf.get(), 256 << 10);
  EXPECT_EQ(std::memcmp(buf.get(), data_.data(), data_.size()), 0);
}

// A buffer of three 64 MiB chunks (the io_uring engine registers it sparsely, each chunk on the
// first read that lands in it), fresh from mmap and untouched: reads land in chunk 2 first, then
// chunk 0, then across the chunk 0/1 boundary (a plain read: no one registered buffer holds it),
// then inside chunk 1, which that read already wrote and which is registered only now. Every
// read gives the file's bytes, on both engines.
TEST_P(IoEngineTest, ReadsIntoLateRegisteredChunksGiveSameBytes) {
  constexpr size_t kChunk = size_t{64} << 20;
  const size_t size = 3 * kChunk;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::unique_ptr<void, std::function<void(void*)>> unmap(p, [size](void* q) { ::munmap(q, size); });
  auto* base = static_cast<std::byte*>(p);
  const BufferRegistration how = engine_->RegisterBuffer(base, size);
  using State = BufferRegistration::State;
  if (std::get<0>(GetParam()) == IoEngineKind::kPread) {
    EXPECT_EQ(how.state, State::kNotUsed);
  } else {
    EXPECT_TRUE(how.state == State::kOnFirstUse || how.state == State::kRegistered ||
                how.state == State::kFailed)
        << Describe(how);
  }
  // Chunk 0 is "not ready" (not faulted in) for its first read, so that read is plain and the
  // chunk is registered at a later one.
  int round = 0;
  for (const size_t at : {2 * kChunk + 4096, size_t{0}, kChunk - (size_t{1} << 20),
                          kChunk + (size_t{8} << 20), size_t{4} << 20}) {
    SCOPED_TRACE("destination offset " + std::to_string(at));
    ready_ = round++ != 1;
    ReadAll(base + at, 256 << 10);
    ASSERT_EQ(std::memcmp(base + at, data_.data(), data_.size()), 0);
  }
  if (how.state == State::kOnFirstUse) {
    // Asked about chunk 2, then chunk 0 (refused), ..., then chunk 0 again.
    ASSERT_GE(asked_.size(), 3u);
    EXPECT_EQ(asked_[0], base + 2 * kChunk);
    EXPECT_EQ(std::count(asked_.begin(), asked_.end(), static_cast<const void*>(base)) >= 2, true);
  }
  engine_.reset();  // no read may be in flight when the memory goes
}

TEST_P(IoEngineTest, ReadPastEndOfFileReturnsZeroBytes) {
  AlignedBuffer buf = Allocate(4096);
  const uint64_t beyond = (data_.size() + 4095) / 4096 * 4096 + 4096;
  ASSERT_TRUE(engine_->Submit(ReadRequest{0, beyond, 4096, buf.get(), 9}).ok());
  ASSERT_TRUE(engine_->Flush().ok());
  std::vector<ReadCompletion> done;
  while (done.empty()) ASSERT_TRUE(engine_->Reap(&done, true, 1000).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok());
  EXPECT_EQ(done[0].tag, 9u);
  EXPECT_EQ(done[0].bytes, 0u);
}

TEST_P(IoEngineTest, FailedReadNamesFileAndOffset) {
  // A write-only descriptor makes every read fail (EBADF) on both engines.
  Result<File> wo = File::Open(path_, O_WRONLY);
  ASSERT_TRUE(wo.ok());
  const int fd = wo->fd();
  ASSERT_TRUE(engine_->SetFiles({&fd, 1}, {&path_, 1}).ok());
  AlignedBuffer buf = Allocate(8192);
  ASSERT_TRUE(engine_->Submit(ReadRequest{0, 4096, 4096, buf.get(), 5}).ok());
  ASSERT_TRUE(engine_->Flush().ok());
  std::vector<ReadCompletion> done;
  while (done.empty()) ASSERT_TRUE(engine_->Reap(&done, true, 1000).ok());
  ASSERT_FALSE(done[0].status.ok());
  EXPECT_EQ(done[0].status.code(), StatusCode::kIoError);
  EXPECT_NE(done[0].status.message().find(path_), std::string::npos) << done[0].status.ToString();
  EXPECT_NE(done[0].status.message().find("offset 4096"), std::string::npos);
}

TEST_P(IoEngineTest, WakeInterruptsABlockingReap) {
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine_->Wake();
  });
  const auto start = std::chrono::steady_clock::now();
  std::vector<ReadCompletion> done;
  ASSERT_TRUE(engine_->Reap(&done, true, -1).ok());
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  waker.join();
  EXPECT_TRUE(done.empty());
  EXPECT_LT(s, 10.0);  // liveness, not speed: normally milliseconds
}

TEST_P(IoEngineTest, ReapWantingMoreThanInFlightReturnsWhatThereIs) {
  // `want` is capped by the reads in flight: asking for 16 with 2 in flight must not wait for
  // the timeout (no timeout here: a wrong cap would hang the test), and nothing is lost.
  AlignedBuffer buf = Allocate(8192);
  ASSERT_TRUE(engine_->Submit(ReadRequest{0, 0, 4096, buf.get(), 1}).ok());
  ASSERT_TRUE(engine_->Submit(ReadRequest{0, 4096, 4096, buf.get() + 4096, 2}).ok());
  ASSERT_TRUE(engine_->Flush().ok());
  std::vector<ReadCompletion> done;
  while (done.size() < 2) ASSERT_TRUE(engine_->Reap(&done, true, -1, 16).ok());
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(engine_->in_flight(), 0u);
  EXPECT_EQ(std::memcmp(buf.get(), data_.data(), 8192), 0);
}

TEST_P(IoEngineTest, CancelAllLeavesNothingInFlight) {
  AlignedBuffer buf = Allocate(4 << 20);
  for (uint32_t i = 0; i < engine_->capacity(); ++i) {
    ASSERT_TRUE(engine_->Submit(ReadRequest{0, uint64_t{i} << 20, 1 << 20,
                                            buf.get() + (uint64_t{i} << 20), i}).ok());
  }
  ASSERT_TRUE(engine_->Flush().ok());
  engine_->CancelAll();
  EXPECT_EQ(engine_->in_flight(), 0u);
  std::vector<ReadCompletion> done;
  ASSERT_TRUE(engine_->Reap(&done, false, 0).ok());
  EXPECT_TRUE(done.empty());
  // The engine stays usable.
  ReadAll(buf.get() - 0, 1 << 20);
}

// kAuto always gives an engine and says which one, and why not io_uring when it fell back.
TEST(CreateIoEngineTest, AutoSaysWhichEngineAndWhyAFallback) {
  Result<CreatedEngine> uring = CreateIoEngine(IoEngineKind::kIoUring, EngineOptions{});
  Result<CreatedEngine> automatic = CreateIoEngine(IoEngineKind::kAuto, EngineOptions{});
  ASSERT_TRUE(automatic.ok()) << automatic.status().ToString();
  ASSERT_NE(automatic->engine, nullptr);
  if (uring.ok()) {
    EXPECT_EQ(uring->kind, IoEngineKind::kIoUring);
    EXPECT_EQ(automatic->kind, IoEngineKind::kIoUring);
    EXPECT_EQ(automatic->engine->name(), "io_uring");
    EXPECT_TRUE(automatic->uring_error.ok());
  } else {
    EXPECT_EQ(automatic->kind, IoEngineKind::kPread);
    EXPECT_EQ(automatic->engine->name(), "pread");
    EXPECT_EQ(automatic->uring_error.message(), uring.status().message());
  }
  Result<CreatedEngine> pread = CreateIoEngine(IoEngineKind::kPread, EngineOptions{});
  ASSERT_TRUE(pread.ok());
  EXPECT_EQ(pread->kind, IoEngineKind::kPread);
  EXPECT_TRUE(pread->uring_error.ok());
}

// Engines made and dropped by threads that never synchronise with each other, as the loaders of
// several ranks in one process do: the kernel hands a dropped ring's addresses to the next ring,
// and under ThreadSanitizer (the TSan step of `make test` runs this suite) that reuse must not read
// as a data race, since liburing maps its rings where the sanitizer cannot see.
TEST(CreateIoEngineTest, RingsOfUnsynchronisedThreadsReuseAddressesWithoutARace) {
  if (!CreateIoEngine(IoEngineKind::kIoUring, EngineOptions{}).ok()) {
    GTEST_SKIP() << "io_uring unavailable here";
  }
  // Relaxed on purpose: the order between the threads must not give the sanitizer an edge.
  std::atomic<int> turn{0};
  auto take_turns = [&turn](int me) {
    for (int round = 0; round < 8; ++round) {
      while (turn.load(std::memory_order_relaxed) % 2 != me) std::this_thread::yield();
      {
        Result<CreatedEngine> e = CreateIoEngine(IoEngineKind::kIoUring, EngineOptions{});
        EXPECT_TRUE(e.ok()) << e.status().ToString();
      }
      turn.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::thread a(take_turns, 0);
  std::thread b(take_turns, 1);
  a.join();
  b.join();
  EXPECT_EQ(turn.load(), 16);
}

// The same reuse between a file mapped and dropped on one thread (a dataset's journal read as a
// follow loader starts) and a ring on another. The sanitizer sees the file's map as a write, and
// its unmap forgets that write only for whole pages of the length given: dropped with the file's
// own length, the last page stayed written, and the ring liburing later mapped there with raw
// system calls read as racing with it (CI, TSan loader suites, follow_test). Here the ring is a
// page mapped the way liburing maps, at the dropped file's last page, and read the way liburing
// reads its head.
TEST(CreateIoEngineTest, MapsTheSanitizerCannotSeeReuseTheLastPageOfAFileDroppedOnAnotherThread) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  libshard::testing::TempDir dir;
  const std::string path = (dir / "journal").string();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string bytes(page + 21, 'j');  // a page and a bit: the last page is partial
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    ASSERT_EQ(std::fclose(f), 0);
  }
  // Relaxed on purpose: the order between the threads must not give the sanitizer an edge.
  std::atomic<uintptr_t> last_page{0};
  std::thread mapper([&] {
    Result<libshard::internal::MappedFile> m = libshard::internal::MappedFile::Map(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const uintptr_t at = reinterpret_cast<uintptr_t>(m->bytes().data()) + page;
    *m = libshard::internal::MappedFile();  // dropped before the address is handed over
    last_page.store(at, std::memory_order_relaxed);
  });
  std::thread ringer([&] {
    uintptr_t at = 0;
    while ((at = last_page.load(std::memory_order_relaxed)) == 0) std::this_thread::yield();
    const long mapped = ::syscall(SYS_mmap, at, page, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (mapped < 0 || static_cast<uintptr_t>(mapped) != at) return;  // taken meanwhile
    auto* head = reinterpret_cast<const unsigned*>(at);
    EXPECT_EQ(__atomic_load_n(head, __ATOMIC_ACQUIRE), 0u);
    ::syscall(SYS_munmap, at, page);
  });
  mapper.join();
  ringer.join();
}

TEST(CreateIoEngineTest, RegistrationsDescribeThemselves) {
  using State = BufferRegistration::State;
  EXPECT_EQ(Describe({State::kRegistered}), "registered");
  EXPECT_EQ(Describe({State::kOnFirstUse}), "registered on first use");
  EXPECT_EQ(Describe({State::kAlreadyRegistered}), "a buffer is already registered");
  EXPECT_EQ(Describe({State::kFailed, ENOMEM}),
            "io_uring_register_buffers failed (Cannot allocate memory); plain reads");
}

INSTANTIATE_TEST_SUITE_P(
    AllEngines, IoEngineTest,
    ::testing::Combine(::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kPread),
                       ::testing::Bool(), ::testing::Values("/var/tmp", "/dev/shm")),
    [](const ::testing::TestParamInfo<Param>& info) {
      std::string name = std::get<0>(info.param) == IoEngineKind::kIoUring ? "Uring" : "Pread";
      name += std::get<1>(info.param) ? "Direct" : "Buffered";
      name += std::get<2>(info.param) == "/dev/shm" ? "Tmpfs" : "Disk";
      return name;
    });

}  // namespace
}  // namespace libshard::io
