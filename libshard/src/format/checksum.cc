#include "format/checksum.h"

#include <cstdlib>
#include <cstring>

#include "format/xxh3/xxh3_variants.h"
#include "util/cpu_features.h"
#include "util/env_knobs.h"

namespace libshard {

// One build's entry points.
struct internal::Xxh3Ops {
  format::Xxh3Isa isa;
  uint64_t (*hash)(const void*, size_t);
  uint64_t (*hole)(const void*, size_t, size_t);
  void (*reset)(void*);
  void (*update)(void*, const void*, size_t);
  uint64_t (*digest)(const void*);
  int (*vector)();

  static Xxh3Stream MakeStream(const Xxh3Ops* ops) { return Xxh3Stream(ops); }
};

namespace format {
namespace {

using internal::Xxh3Ops;

#define LIBSHARD_XXH3_OPS(isa_enum, isa)                                                 \
  Xxh3Ops {                                                                               \
    isa_enum, libshard_xxh3_64_##isa, libshard_xxh3_64_hole_##isa,                        \
        libshard_xxh3_reset_##isa, libshard_xxh3_update_##isa, libshard_xxh3_digest_##isa, \
        libshard_xxh3_vector_##isa                                                        \
  }

constexpr Xxh3Ops kOps[] = {
    LIBSHARD_XXH3_OPS(Xxh3Isa::kBaseline, baseline),
#if defined(LIBSHARD_XXH3_X86_VARIANTS)
    LIBSHARD_XXH3_OPS(Xxh3Isa::kAvx2, avx2),
    LIBSHARD_XXH3_OPS(Xxh3Isa::kAvx512, avx512),
#endif
};

const Xxh3Ops* OpsFor(Xxh3Isa isa) {
  for (const Xxh3Ops& ops : kOps)
    if (ops.isa == isa) return &ops;
  return &kOps[0];
}

std::vector<Xxh3Isa> DetectSupported() {
  std::vector<Xxh3Isa> isas{Xxh3Isa::kBaseline};
#if defined(LIBSHARD_XXH3_X86_VARIANTS)
  // AVX2 / AVX-512 F with their register state saved by the OS (util/cpu_features.h).
  const internal::CpuFeatures& f = internal::HostCpuFeatures();
  if (f.Has(internal::CpuFeature::kAvx2)) isas.push_back(Xxh3Isa::kAvx2);
  if (f.Has(internal::CpuFeature::kAvx512F)) isas.push_back(Xxh3Isa::kAvx512);
#endif
  return isas;
}

// The fastest supported build, or the one LIBSHARD_XXH3 names when that one is supported.
const Xxh3Ops* SelectActive() {
  const std::vector<Xxh3Isa>& supported = SupportedXxh3Isas();
  Xxh3Isa best = supported.back();
  if (const std::string knob = EnvKnobsOrDefaults().xxh3; !knob.empty()) {
    const char* env = knob.c_str();
    for (Xxh3Isa isa : supported) {
      if (Xxh3IsaName(isa) == env || (isa == Xxh3Isa::kBaseline && std::strcmp(env, "baseline") == 0))
        best = isa;
    }
  }
  return OpsFor(best);
}

const Xxh3Ops& Active() {
  static const Xxh3Ops* const active = SelectActive();
  return *active;
}

const Xxh3Ops& Checked(Xxh3Isa isa) {
  for (Xxh3Isa s : SupportedXxh3Isas())
    if (s == isa) return *OpsFor(isa);
  std::abort();  // a precondition: calling an unsupported build would fault (SIGILL) anyway
}

}  // namespace

uint64_t Xxh3WithHole(std::span<const std::byte> bytes, size_t hole) {
  return Active().hole(bytes.data(), bytes.size(), hole);
}

std::string_view Xxh3IsaName(Xxh3Isa isa) {
  switch (OpsFor(isa)->vector()) {
    case 0: return "scalar";
    case 1: return "sse2";
    case 2: return "avx2";
    case 3: return "avx512";
    case 4: return "neon";
    case 5: return "vsx";
    default: return "other";
  }
}

const std::vector<Xxh3Isa>& SupportedXxh3Isas() {
  static const std::vector<Xxh3Isa> supported = DetectSupported();
  return supported;
}

Xxh3Isa ActiveXxh3Isa() { return Active().isa; }

uint64_t Xxh3Using(Xxh3Isa isa, const void* data, size_t size) {
  return Checked(isa).hash(data, size);
}

uint64_t Xxh3WithHoleUsing(Xxh3Isa isa, std::span<const std::byte> bytes, size_t hole) {
  return Checked(isa).hole(bytes.data(), bytes.size(), hole);
}

Xxh3Stream Xxh3StreamUsing(Xxh3Isa isa) { return internal::Xxh3Ops::MakeStream(&Checked(isa)); }

}  // namespace format

uint64_t Xxh3(const void* data, size_t size) { return format::Active().hash(data, size); }

Xxh3Stream::Xxh3Stream() : Xxh3Stream(&format::Active()) {}

Xxh3Stream::Xxh3Stream(const internal::Xxh3Ops* ops) : ops_(ops) {
  static_assert(kStateBytes == LIBSHARD_XXH3_STATE_BYTES, "see format/xxh3/xxh3_variants.h");
  static_assert(alignof(Xxh3Stream) >= LIBSHARD_XXH3_STATE_ALIGN);
  Reset();
}

void Xxh3Stream::Reset() { ops_->reset(state_); }

void Xxh3Stream::Update(const void* data, size_t size) { ops_->update(state_, data, size); }

uint64_t Xxh3Stream::Digest() const { return ops_->digest(state_); }

}  // namespace libshard
