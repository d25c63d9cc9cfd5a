// The Cloud Storage store (object_store.h): gs://BUCKET/PREFIX through Cloud Storage's
// S3-interoperable XML API (SigV4 with an HMAC key), over the S3-dialect store
// (s3_dialect_store.h: the S3 client's requests, retries and checks). What is Cloud Storage's own
// is here: its bucket rules and its configuration.
//
//   credentials: GS_ACCESS_KEY_ID / GS_SECRET_ACCESS_KEY (an HMAC key of a service account or a
//     user); neither: unsigned (anonymous) requests, which read public buckets. No AWS_* variable
//     and no AWS file is read for gs://.
//   endpoint: LIBSHARD_GS_ENDPOINT (an emulator, a private endpoint), else
//     https://storage.googleapis.com; addressing LIBSHARD_GS_ADDRESSING (auto: path-style, which
//     Cloud Storage takes for every bucket name, dots and '_' included).
//   region: "auto" (what Cloud Storage's SigV4 scope takes for any bucket's location).
//   bounds: the client's (LIBSHARD_S3_MAX_ATTEMPTS ...: io::ReadS3ClientBounds).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "objstore/s3_dialect_store.h"
#include "util/env_knobs.h"

namespace libshard::objstore {
namespace {

constexpr std::string_view kScheme = "gs";
constexpr const char* kKeyId = "GS_ACCESS_KEY_ID";
constexpr const char* kSecret = "GS_SECRET_ACCESS_KEY";
constexpr const char* kDefaultEndpoint = "https://storage.googleapis.com";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// Cloud Storage's bucket naming rules: a-z, 0-9, '-', '_', '.'; beginning and ending with a
// letter or digit; 3-63 characters, or up to 222 with dots, each dot-separated part 1-63; not
// an IP address in dotted-decimal; no "goog" prefix and no "google" in it.
Status CheckBucket(std::string_view url, const std::string& bucket) {
  const auto bucket_char = [](unsigned char c) {
    return std::islower(c) || std::isdigit(c) || c == '-' || c == '_' || c == '.';
  };
  const auto alnum = [](unsigned char c) { return std::islower(c) || std::isdigit(c); };
  const bool dotted = bucket.find('.') != std::string::npos;
  bool ok = bucket.size() >= 3 && bucket.size() <= (dotted ? 222u : 63u) &&
            alnum(bucket.front()) && alnum(bucket.back());
  for (unsigned char c : bucket) ok = ok && bucket_char(c);
  // Each dot-separated part 1-63 characters; four parts of digits only are an IP address.
  bool digits_only = true;
  size_t parts = 0;
  for (size_t begin = 0; ok && begin <= bucket.size(); ++parts) {
    const size_t dot = std::min(bucket.find('.', begin), bucket.size());
    ok = dot - begin >= 1 && dot - begin <= 63;
    for (size_t i = begin; i < dot; ++i)
      digits_only = digits_only && std::isdigit(static_cast<unsigned char>(bucket[i]));
    begin = dot + 1;
  }
  if (ok && digits_only && parts == 4) ok = false;  // 192.168.5.4
  if (ok && (bucket.rfind("goog", 0) == 0 || bucket.find("google") != std::string::npos))
    ok = false;
  if (ok) return Status::OK();
  return Status::InvalidArgument(
      std::string(url) + ": '" + bucket +
      "' is not a valid Cloud Storage bucket name (3-63 characters of a-z, 0-9, '-', '_', '.', "
      "or up to 222 with dots, beginning and ending with a letter or digit, not an IP address, "
      "no \"goog\" prefix, no \"google\"); write gs://BUCKET/PREFIX");
}

}  // namespace

Result<io::S3Config> LoadGcsConfig() {
  io::S3Config c;
  c.region = "auto";
  c.credential_hint = std::string(kKeyId) + " / " + kSecret +
                      " (a Cloud Storage HMAC key) for gs://, and LIBSHARD_GS_ENDPOINT";
  c.reload = &LoadGcsConfig;
  c.access_key = Env(kKeyId);
  c.secret_key = Env(kSecret);
  if (!c.access_key.empty() && c.secret_key.empty())
    return Status::InvalidArgument(std::string("gs://: ") + kKeyId + " is set but " + kSecret +
                                   " is not; set both to a Cloud Storage HMAC key");
  if (c.access_key.empty() && !c.secret_key.empty())
    return Status::InvalidArgument(std::string("gs://: ") + kSecret + " is set but " + kKeyId +
                                   " is not; set both to a Cloud Storage HMAC key");
  c.source = c.access_key.empty()
                 ? std::string("none (anonymous requests; set ") + kKeyId + " and " + kSecret +
                       " to sign gs:// requests)"
                 : std::string("the environment (") + kKeyId + ")";
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  // (An endpoint without http:// or https:// was refused by the table, naming the variable.)
  c.endpoint = knobs.gs_endpoint.empty() ? kDefaultEndpoint : knobs.gs_endpoint;
  while (c.endpoint.back() == '/') c.endpoint.pop_back();
  c.path_style = knobs.gs_addressing != "virtual";  // a word of the table's: checked there
  LIBSHARD_RETURN_IF_ERROR(io::ReadS3ClientBounds(&c));
  return c;
}

Result<std::shared_ptr<ObjectStore>> OpenGcsStore(std::string_view url) {
  LIBSHARD_ASSIGN_OR_RETURN(ObjectUrl parsed, ParseObjectUrl(url, kScheme));
  LIBSHARD_RETURN_IF_ERROR(CheckBucket(url, parsed.bucket));
  return MakeS3DialectStore(std::move(parsed), LoadGcsConfig());
}

}  // namespace libshard::objstore
