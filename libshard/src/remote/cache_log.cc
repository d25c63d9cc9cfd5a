// CacheWarning (cache_log.h).
#include "remote/cache_log.h"

#include <cstdio>
#include <mutex>
#include <utility>

namespace libshard::remote {
namespace {

std::mutex g_mu;
CacheWarningSink& Sink() {
  static CacheWarningSink sink;
  return sink;
}

}  // namespace

void CacheWarning(const std::string& message) {
  const std::string line = "libshard: warning: " + message;
  CacheWarningSink sink;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    sink = Sink();
  }
  if (sink) {
    sink(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

CacheWarningSink SetCacheWarningSink(CacheWarningSink sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  return std::exchange(Sink(), std::move(sink));
}

}  // namespace libshard::remote
