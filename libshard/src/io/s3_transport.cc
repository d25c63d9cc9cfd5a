// S3Response's sink and the process's transport factory (s3_transport.h).
#include "io/s3_transport.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "io/s3_internal.h"

namespace libshard::io {

namespace {

std::mutex g_factory_mu;
S3TransportFactory& Factory() {
  static S3TransportFactory factory;
  return factory;
}

}  // namespace

void S3Response::Reset() {
  code = 0;
  received = 0;
  overflow = false;
  text.clear();
  error_body.clear();
  etag.clear();
  encryption.clear();
  content_range.clear();
  content_length = -1;
}

void S3Response::OnStatus(long status) {
  code = status;
  etag.clear();
  encryption.clear();
  content_range.clear();
  content_length = -1;
}

void S3Response::OnHeader(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    if (line.substr(0, 5) == "HTTP/") {  // a new response (after a redirect or 100)
      const size_t sp = line.find(' ');
      OnStatus(sp == std::string_view::npos
                   ? 0
                   : std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10));
    }
    return;
  }
  const std::string name =
      s3_internal::Lower(s3_internal::Trim(std::string(line.substr(0, colon))));
  const std::string value = s3_internal::Trim(std::string(line.substr(colon + 1)));
  if (name == "etag") etag = value;
  if (name == "x-amz-server-side-encryption") encryption = value;
  if (name == "x-amz-server-side-encryption-customer-algorithm") encryption = "SSE-C";
  if (name == "content-range") content_range = value;
  if (name == "content-length") {
    // Digits only; anything else is no length at all (the client then checks by other means).
    char* end = nullptr;
    const long long n = std::strtoll(value.c_str(), &end, 10);
    content_length = !value.empty() && *end == '\0' && n >= 0 ? n : -1;
  }
}

bool S3Response::OnBody(const char* p, size_t n) {
  if (code < 200 || code >= 300) {
    error_body.append(p, std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, error_body.size())));
    return true;
  }
  if (received + n > cap) {
    overflow = true;
    return false;
  }
  if (dst != nullptr) {
    std::memcpy(dst + received, p, n);
  } else {
    text.append(p, n);
  }
  received += n;
  return true;
}

Result<std::unique_ptr<S3Transport>> MakeS3Transport() {
  S3TransportFactory factory;
  {
    std::lock_guard<std::mutex> lock(g_factory_mu);
    factory = Factory();
  }
  return factory ? factory() : MakeCurlTransport();
}

S3TransportFactory SetS3TransportFactory(S3TransportFactory factory) {
  std::lock_guard<std::mutex> lock(g_factory_mu);
  return std::exchange(Factory(), std::move(factory));
}

}  // namespace libshard::io
