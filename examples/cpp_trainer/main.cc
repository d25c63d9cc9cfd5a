// A small LibTorch training loop fed by libshard: trains a tiny EAGLE-3-style draft head on a
// packed dataset of hidden states. Shows the loader's shuffle, rank split (RANK / WORLD_SIZE from
// the environment, as torchrun sets them), token-budget batches, zero-copy tensors from
// libshard::torch, and a checkpoint that holds the model, the optimizer and the loader's position,
// so a restarted job resumes on exactly the next batch.
//
//   cpp_trainer make-data DIR [--samples N] [--hidden H]      # a synthetic dataset (Writer)
//   cpp_trainer train DIR [--steps N] [--checkpoint FILE] [--save-every N] [--max-tokens T]
//                         [--lr X] [--device cpu|cuda] [--log-every N]
//
// Exit 0 ok, 1 failure, 2 usage.
#include <libshard/dataset.h>
#include <libshard/loader.h>
#include <libshard/torch.h>
#include <libshard/writer.h>
// The parts of LibTorch used here, rather than <torch/torch.h>: it halves the compile time.
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int64_t kVocab = 256;

// Thrown at the edge of the program only: libshard reports failures as Status.
void Check(const libshard::Status& status) {
  if (!status.ok()) throw std::runtime_error(status.ToString());
}
template <typename T>
T Take(libshard::Result<T> result) {
  Check(result.status());
  return std::move(result).value();
}

// --flag value pairs after the positional arguments.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
  std::string Get(const std::string& name, const std::string& fallback) const {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : it->second;
  }
  int64_t Int(const std::string& name, int64_t fallback) const {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : std::stoll(it->second);
  }
};

std::optional<Args> Parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return std::nullopt;
      args.flags[a.substr(2)] = argv[++i];
    } else {
      args.positional.push_back(a);
    }
  }
  return args;
}

uint32_t EnvInt(const char* name, uint32_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<uint32_t>(std::stoul(v)) : fallback;
}

// ---- make-data: an EAGLE-3-like dataset whose next token is recoverable from the states ----

int MakeData(const Args& args) {
  const std::string dir = args.positional.at(1);
  const int64_t samples = args.Int("samples", 64);
  const int64_t hidden = args.Int("hidden", 64);
  libshard::Schema schema;
  schema.fields = {{"input_ids", libshard::DType::kInt64, 1, 0},
                   {"loss_mask", libshard::DType::kInt64, 1, 0},
                   {"hidden_state", libshard::DType::kBFloat16, 3, 1},
                   {"aux_hidden_state", libshard::DType::kBFloat16, 3, 1}};
  schema.length_field = 0;
  auto writer = Take(libshard::Writer::Create(dir, schema));

  torch::manual_seed(1);
  const torch::Tensor embedding = torch::randn({kVocab, hidden});  // the "target model"
  for (int64_t i = 0; i < samples; ++i) {
    const int64_t length = torch::randint(64, 512, {1}, torch::kLong).item<int64_t>();
    const torch::Tensor ids = torch::randint(0, kVocab, {length}, torch::kLong);
    torch::Tensor mask = torch::ones({length}, torch::kLong);
    mask.slice(0, 0, length / 8).zero_();  // the prompt carries no loss
    // Position t encodes token t+1 (what the draft head must predict), plus noise.
    const torch::Tensor next = torch::cat({ids.slice(0, 1), ids.slice(0, 0, 1)});
    const torch::Tensor signal = embedding.index_select(0, next);
    const torch::Tensor hs = (0.5 * signal + torch::randn({length, hidden})).unsqueeze(0);
    const torch::Tensor aux =
        torch::cat({signal, torch::randn({length, 2 * hidden})}, 1).unsqueeze(0);
    const std::vector<std::pair<std::string, torch::Tensor>> tensors = {
        {"input_ids", ids}, {"loss_mask", mask},
        {"hidden_state", hs.to(torch::kBFloat16).contiguous()},
        {"aux_hidden_state", aux.to(torch::kBFloat16).contiguous()}};
    libshard::SampleInput input;
    input.source.path = "synthetic/data_" + std::to_string(i) + ".pt";
    for (const auto& [name, tensor] : tensors) {
      input.tensors.push_back(Take(libshard::ToTensorInput(name, tensor)));
    }
    Check(writer->Append(input));  // `tensors` outlive the call, as ToTensorInput requires
  }
  const libshard::WriteSummary summary = Take(writer->Finish());
  std::printf("wrote %llu samples, %.1f MB in %llu shard(s) to %s\n",
              static_cast<unsigned long long>(summary.samples), summary.stored_bytes / 1e6,
              static_cast<unsigned long long>(summary.shards), dir.c_str());
  return 0;
}

// ---- train ----

// EAGLE-3's shape in miniature: fuse the three auxiliary layers (3H -> H), add the last hidden
// state, predict the next token.
struct DraftHeadImpl : torch::nn::Module {
  explicit DraftHeadImpl(int64_t hidden)
      : fc(register_module("fc", torch::nn::Linear(3 * hidden, hidden))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        lm_head(register_module("lm_head", torch::nn::Linear(hidden, kVocab))) {}
  torch::Tensor forward(const torch::Tensor& aux, const torch::Tensor& hidden_state) {
    return lm_head(norm(fc(aux) + hidden_state));
  }
  torch::nn::Linear fc;
  torch::nn::LayerNorm norm;
  torch::nn::Linear lm_head;
};
TORCH_MODULE(DraftHead);

// The loader's position is one line of text (libshard::EncodeLoaderState); it goes into the same
// checkpoint as the model.
void WriteLoaderState(torch::serialize::OutputArchive& archive, const libshard::LoaderState& s) {
  archive.write("state", c10::IValue(libshard::EncodeLoaderState(s)));
}

libshard::LoaderState ReadLoaderState(torch::serialize::InputArchive& archive) {
  c10::IValue v;
  std::string text;
  if (archive.try_read("state", v)) {
    text = v.toStringRef();
  } else {
    // A checkpoint of this example before the encoding: its plain fields, which the library
    // reads as the state dicts of earlier releases (no "order": order 1).
    auto field = [&](const char* key) {
      archive.read(key, v);
      return std::to_string(static_cast<uint64_t>(v.toInt()));
    };
    text = "{\"seed\": " + field("seed") + ", \"epoch\": " + field("epoch") +
           ", \"position\": " + field("position");
    if (archive.try_read("order", v))
      text += ", \"order\": " + std::to_string(static_cast<uint64_t>(v.toInt()));
    torch::Tensor skipped;
    archive.read("skipped", skipped);
    text += ", \"skipped\": [";
    for (int64_t i = 0; i < skipped.numel(); ++i)
      text += (i ? ", " : "") + std::to_string(skipped[i].item<int64_t>());
    text += "]}";
  }
  return Take(libshard::DecodeLoaderState(text));
}

void SaveCheckpoint(const std::string& path, DraftHead& model, torch::optim::Optimizer& optimizer,
                    const libshard::LoaderState& state, int64_t step) {
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive, loader_archive;
  model->save(model_archive);
  optimizer.save(optimizer_archive);
  WriteLoaderState(loader_archive, state);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("loader", loader_archive);
  archive.write("step", c10::IValue(step));
  archive.save_to(path + ".tmp");
  std::filesystem::rename(path + ".tmp", path);  // a crash keeps the previous checkpoint whole
}

int Train(const Args& args) {
  const std::string dir = args.positional.at(1);
  const int64_t steps = args.Int("steps", 100);
  const int64_t log_every = args.Int("log-every", 10);
  const int64_t save_every = args.Int("save-every", 50);
  const std::string checkpoint = args.Get("checkpoint", "");
  const torch::Device device(args.Get("device", torch::cuda::is_available() ? "cuda" : "cpu"));
  const uint32_t rank = EnvInt("RANK", 0), world_size = EnvInt("WORLD_SIZE", 1);

  auto dataset = Take(libshard::Dataset::Open(dir));
  const libshard::Schema& schema = dataset->schema();
  const auto aux_field = schema.Find("aux_hidden_state");
  if (!aux_field || schema.fields[*aux_field].rank != 3) {
    throw std::runtime_error(dir + ": expected an aux_hidden_state field of shape [1, L, 3H]");
  }
  const int64_t hidden = static_cast<int64_t>(dataset->tensor(0, *aux_field).shape.at(2)) / 3;

  torch::manual_seed(0);
  DraftHead model(hidden);
  model->to(device);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(
                                                         std::stod(args.Get("lr", "3e-3"))));

  libshard::LoaderOptions options;
  options.order = libshard::Order::Shuffled(/*seed=*/42);
  options.rank = rank;
  options.world_size = world_size;
  options.max_tokens = static_cast<uint64_t>(args.Int("max-tokens", 2048));
  options.memory_budget = uint64_t{256} << 20;
  int64_t step = 0;
  if (!checkpoint.empty() && std::filesystem::exists(checkpoint)) {
    torch::serialize::InputArchive archive, model_archive, optimizer_archive, loader_archive;
    archive.load_from(checkpoint, device);
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    archive.read("loader", loader_archive);
    model->load(model_archive);
    optimizer.load(optimizer_archive);
    options.resume = ReadLoaderState(loader_archive);
    c10::IValue v;
    archive.read("step", v);
    step = v.toInt();
    std::printf("resumed from %s: step %lld, epoch %llu, position %llu\n", checkpoint.c_str(),
                static_cast<long long>(step),
                static_cast<unsigned long long>(options.resume->epoch),
                static_cast<unsigned long long>(options.resume->position));
  }
  auto loader = Take(libshard::Loader::Create(dataset, options));
  uint64_t epoch = options.resume ? options.resume->epoch : 0;
  std::printf("rank %u/%u, %llu samples, %llu batches an epoch on this rank, device %s\n", rank,
              world_size, static_cast<unsigned long long>(dataset->size()),
              static_cast<unsigned long long>(loader->batches_per_epoch()),
              device.str().c_str());

  libshard::TorchOptions to_device;
  to_device.device = device;  // CPU: zero-copy views; CUDA: one non_blocking copy from the arena
  const auto start = std::chrono::steady_clock::now();
  double loss_value = 0;
  while (step < steps) {
    std::optional<libshard::Batch> batch = Take(loader->Next());
    if (!batch) {  // end of the epoch on this rank
      Check(loader->SetEpoch(++epoch));
      continue;
    }
    // Samples are independent sequences; the head looks at one position at a time, so the
    // batch is their concatenation: position t predicts token t+1 where loss_mask[t+1] is set.
    std::vector<torch::Tensor> aux, hs, targets, masks;
    for (const libshard::TensorDict& t : Take(libshard::ToTensors(*batch, to_device))) {
      const int64_t length = t["input_ids"].size(0);
      aux.push_back(t["aux_hidden_state"][0].slice(0, 0, length - 1));
      hs.push_back(t["hidden_state"][0].slice(0, 0, length - 1));
      targets.push_back(t["input_ids"].slice(0, 1));
      masks.push_back(t["loss_mask"].slice(0, 1));
    }  // the arena slots return to the loader once these views are consumed below
    const torch::Tensor logits =
        model(torch::cat(aux).to(torch::kFloat), torch::cat(hs).to(torch::kFloat));
    const torch::Tensor mask = torch::cat(masks).to(torch::kFloat);
    const torch::Tensor per_token =
        torch::nn::functional::cross_entropy(logits, torch::cat(targets),
                                             torch::nn::functional::CrossEntropyFuncOptions()
                                                 .reduction(torch::kNone));
    const torch::Tensor loss = (per_token * mask).sum() / mask.sum().clamp_min(1);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    ++step;
    loss_value = loss.item<double>();
    if (step % log_every == 0 || step == steps) {
      const libshard::LoaderStats stats = loader->stats();
      std::printf("step %lld epoch %llu loss %.6f data_wait %.1f%% read %.2f GB/s\n",
                  static_cast<long long>(step), static_cast<unsigned long long>(epoch),
                  loss_value, 100 * stats.wait_share, stats.throughput_gbps);
      std::fflush(stdout);
    }
    if (!checkpoint.empty() && (step % save_every == 0 || step == steps)) {
      SaveCheckpoint(checkpoint, model, optimizer, loader->state(), step);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const libshard::LoaderStats stats = loader->stats();
  std::printf("done: %lld steps in %.2f s, final loss %.6f; data wait %.2f s (%.1f%% of the "
              "loop), engine %s%s, arena %s, peak %.1f MB\n",
              static_cast<long long>(step), seconds, loss_value, stats.wait_seconds,
              seconds > 0 ? 100 * stats.wait_seconds / seconds : 0.0, stats.engine.c_str(),
              stats.direct_io ? " O_DIRECT" : " buffered",
              stats.pinned              ? "pinned"
              : stats.pin_status.empty() ? "not pinned"
                                         : stats.pin_status.c_str(),
              stats.arena_peak / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Args> args = Parse(argc, argv);
  const char* usage =
      "usage: cpp_trainer make-data DIR [--samples N] [--hidden H]\n"
      "       cpp_trainer train DIR [--steps N] [--checkpoint FILE] [--save-every N]\n"
      "                   [--max-tokens T] [--lr X] [--device cpu|cuda] [--log-every N]\n"
      "RANK and WORLD_SIZE (as torchrun sets them) pick this process's share of every epoch.\n";
  if (!args || args->positional.size() != 2 ||
      (args->positional[0] != "make-data" && args->positional[0] != "train")) {
    std::fputs(usage, stderr);
    return 2;
  }
  try {
    return args->positional[0] == "make-data" ? MakeData(*args) : Train(*args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_trainer: %s\n", e.what());
    return 1;
  }
}
