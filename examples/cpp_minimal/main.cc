// The few lines a C++ training loop needs from libshard: open a packed dataset, configure the
// loader, iterate, checkpoint the loader's position and resume from it. Core library only; see
// ../cpp_trainer for LibTorch tensors.
//
//   cpp_minimal DATASET STATE_FILE [MAX_BATCHES]
//
// Resumes from STATE_FILE when it exists, reads token-budget batches until the end of the epoch
// (or MAX_BATCHES), and writes its position to STATE_FILE after every batch. Prints the samples
// and tokens it read. Exit 0 ok, 1 failure, 2 usage.
#include <libshard/dataset.h>
#include <libshard/loader.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

namespace {

// The loader's position is one line of text (libshard::EncodeLoaderState); keep it wherever the
// model checkpoint goes.
void SaveState(const std::string& path, const libshard::LoaderState& state) {
  {
    std::ofstream out(path + ".tmp");
    out << libshard::EncodeLoaderState(state) << '\n';
  }
  std::filesystem::rename(path + ".tmp", path);  // a crash leaves the old state, never half
}

// No file: nullopt (start at epoch 0). A file that is not a state ends the program with the
// library's message, which names what is wrong with it.
std::optional<libshard::LoaderState> LoadState(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  auto state = libshard::DecodeLoaderState(text);
  if (!state.ok()) {
    std::cerr << "cpp_minimal: " << path << ": " << state.status().ToString() << "\n";
    std::exit(1);
  }
  return *state;
}

int Fail(const libshard::Status& status) {
  std::cerr << "cpp_minimal: " << status.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: cpp_minimal DATASET STATE_FILE [MAX_BATCHES]\n";
    return 2;
  }
  const std::string state_file = argv[2];
  const uint64_t max_batches = argc == 4 ? std::strtoull(argv[3], nullptr, 10) : UINT64_MAX;

  // [minimal]
  auto dataset = libshard::Dataset::Open(argv[1]);
  if (!dataset.ok()) return Fail(dataset.status());

  libshard::LoaderOptions options;
  options.order = libshard::Order::Shuffled(/*seed=*/1234);
  options.max_tokens = 4096;                       // batches of at most 4096 tokens
  options.memory_budget = uint64_t{256} << 20;     // the pinned arena; bounds all prefetching
  options.resume = LoadState(state_file);          // nullopt: start at epoch 0, position 0
  auto loader = libshard::Loader::Create(*dataset, options);
  if (!loader.ok()) return Fail(loader.status());

  uint64_t batches = 0, samples = 0, tokens = 0;
  while (batches < max_batches) {
    auto batch = (*loader)->Next();                // blocks until the batch is in memory
    if (!batch.ok()) return Fail(batch.status());  // names the sample, shard file and offset
    if (!batch->has_value()) break;                // end of the epoch: SetEpoch(epoch + 1)
    for (const libshard::Sample& sample : (*batch)->samples) {
      const libshard::TensorView* ids = sample.Find("input_ids");  // zero-copy view
      tokens += ids != nullptr ? ids->shape.at(0) : 0;
      ++samples;
    }
    ++batches;
    SaveState(state_file, (*loader)->state());     // resume from here after a crash
  }
  // [minimal]

  const libshard::LoaderStats stats = (*loader)->stats();
  std::cout << "samples " << samples << " tokens " << tokens << " batches " << batches
            << " position " << (*loader)->state().position << " engine " << stats.engine
            << " wait_share " << stats.wait_share << "\n";
  return 0;
}
