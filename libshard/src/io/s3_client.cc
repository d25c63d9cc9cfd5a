// S3Client on libcurl (see s3_client.h).
#include "io/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

namespace libshard::io {

namespace {

constexpr size_t kMaxErrorBody = 4096;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::string Trim(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An AWS shared config/credentials file: section -> key -> value. A nested block
// ("s3 =" followed by indented "key = value" lines) is stored as "s3.key". Missing file: empty.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
IniFile ReadIni(const std::string& path) {
  IniFile out;
  std::ifstream in(path);
  if (!in) return out;
  std::string line, section, parent;
  for (int n = 0; n < 100000 && std::getline(in, line); ++n) {
    const bool indented = !line.empty() && std::isspace(static_cast<unsigned char>(line[0]));
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Trim(t.substr(1, t.size() - 2));
      parent.clear();
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    std::string key = Lower(Trim(t.substr(0, eq)));
    std::string value = Trim(t.substr(eq + 1));
    if (indented && !parent.empty()) {
      out[section][parent + "." + key] = value;
      continue;
    }
    parent = value.empty() ? key : std::string();
    if (!value.empty()) out[section][key] = value;
  }
  return out;
}

std::string HomeFile(const char* env, const char* name) {
  std::string p = Env(env);
  if (!p.empty()) return p;
  const std::string home = Env("HOME");
  return home.empty() ? std::string() : home + "/.aws/" + name;
}

uint32_t EnvUint(const char* name, uint32_t fallback, uint32_t lo, uint32_t hi) {
  const std::string v = Env(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0') return fallback;
  return static_cast<uint32_t>(std::clamp<unsigned long>(n, lo, hi));
}

// Unreserved characters and '/' pass; everything else is %XX (the SigV4 canonical URI).
std::string EncodeKey(std::string_view key) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// The <Code> of an S3 XML error body, or "".
std::string S3ErrorCode(const std::string& body) {
  const size_t b = body.find("<Code>");
  const size_t e = body.find("</Code>");
  if (b == std::string::npos || e == std::string::npos || e < b) return {};
  return body.substr(b + 6, e - b - 6);
}

std::once_flag g_curl_once;
CURLcode g_curl_init = CURLE_OK;

}  // namespace

bool IsS3Url(std::string_view path) { return path.substr(0, 5) == "s3://"; }

Result<S3Url> ParseS3Url(std::string_view url) {
  if (!IsS3Url(url))
    return Status::InvalidArgument(std::string(url) + ": not an s3:// URL");
  std::string_view rest = url.substr(5);
  const size_t slash = rest.find('/');
  S3Url out;
  out.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) out.key = std::string(rest.substr(slash + 1));
  const auto bucket_char = [](unsigned char c) {
    return std::islower(c) || std::isdigit(c) || c == '-' || c == '.';
  };
  if (out.bucket.size() < 3 || out.bucket.size() > 63 ||
      !std::all_of(out.bucket.begin(), out.bucket.end(), bucket_char))
    return Status::InvalidArgument(std::string(url) + ": '" + out.bucket +
                                   "' is not a valid bucket name (3-63 characters of a-z, 0-9, "
                                   "'-', '.'); write s3://BUCKET/PREFIX");
  return out;
}

Result<S3Config> LoadS3Config() {
  S3Config c;
  const std::string profile = Env("AWS_PROFILE").empty() ? "default" : Env("AWS_PROFILE");
  const std::string cred_path = HomeFile("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  const std::string conf_path = HomeFile("AWS_CONFIG_FILE", "config");
  IniFile creds = cred_path.empty() ? IniFile{} : ReadIni(cred_path);
  IniFile conf = conf_path.empty() ? IniFile{} : ReadIni(conf_path);
  // In the config file a profile is "[profile NAME]", except "[default]".
  std::map<std::string, std::string> prof = conf["profile " + profile];
  for (const auto& [k, v] : conf[profile]) prof.emplace(k, v);

  if (!Env("AWS_ACCESS_KEY_ID").empty()) {
    c.access_key = Env("AWS_ACCESS_KEY_ID");
    c.secret_key = Env("AWS_SECRET_ACCESS_KEY");
    c.session_token = Env("AWS_SESSION_TOKEN");
    c.source = "the environment (AWS_ACCESS_KEY_ID)";
    if (c.secret_key.empty())
      return Status::InvalidArgument("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
  } else {
    for (auto* file : {&creds, &conf}) {
      auto& section = (file == &creds) ? (*file)[profile] : prof;
      if (section.count("aws_access_key_id")) {
        c.access_key = section["aws_access_key_id"];
        c.secret_key = section["aws_secret_access_key"];
        c.session_token = section["aws_session_token"];
        c.source = "profile '" + profile + "' of " + (file == &creds ? cred_path : conf_path);
        break;
      }
    }
    if (!Env("AWS_PROFILE").empty() && c.access_key.empty())
      return Status::NotFound("AWS_PROFILE=" + profile + ": no such profile with credentials in " +
                              cred_path + " or " + conf_path);
    if (c.source.empty()) c.source = "none (anonymous requests)";
  }
  for (std::string r : {Env("AWS_REGION"), Env("AWS_DEFAULT_REGION"), prof["region"]})
    if (!r.empty()) {
      c.region = r;
      break;
    }
  std::string endpoint;
  for (std::string e : {Env("AWS_ENDPOINT_URL_S3"), Env("AWS_ENDPOINT_URL"),
                        prof["s3.endpoint_url"], prof["endpoint_url"]})
    if (!e.empty()) {
      endpoint = e;
      break;
    }
  const bool custom = !endpoint.empty();
  if (!custom) endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (endpoint.find("://") == std::string::npos)
    return Status::InvalidArgument("S3 endpoint '" + endpoint +
                                   "' needs a scheme (http:// or https://)");
  c.endpoint = endpoint;
  std::string style = Lower(Env("LIBSHARD_S3_ADDRESSING"));
  if (style.empty()) style = Lower(prof["s3.addressing_style"]);
  if (style.empty()) style = Lower(prof["s3_addressing_style"]);
  if (style == "path") {
    c.path_style = true;
  } else if (style == "virtual") {
    c.path_style = false;
  } else if (style.empty() || style == "auto") {
    c.path_style = custom;
  } else {
    return Status::InvalidArgument("LIBSHARD_S3_ADDRESSING=" + style +
                                   ": use path, virtual or auto");
  }
  c.max_attempts = EnvUint("LIBSHARD_S3_MAX_ATTEMPTS", 8, 1, 100);
  c.stall_seconds = EnvUint("LIBSHARD_S3_STALL_SECONDS", 30, 1, 3600);
  c.request_timeout_seconds = EnvUint("LIBSHARD_S3_TIMEOUT_SECONDS", 300, 1, 86400);
  c.backoff_ms = EnvUint("LIBSHARD_S3_BACKOFF_MS", 100, 1, 60000);
  return c;
}

struct S3Client::Handle {
  CURL* curl = nullptr;
  ~Handle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

struct S3Client::Response {
  long code = 0;
  // Body sink: `dst` (capacity `cap`) for a GET into a buffer, else `text` up to `cap`.
  char* dst = nullptr;
  uint64_t cap = 0;
  uint64_t received = 0;
  bool overflow = false;
  std::string text;
  std::string error_body;  // a non-2xx body, truncated
  std::string etag;
  std::string content_range;
  int64_t content_length = -1;
  CURL* curl = nullptr;

  static size_t OnBody(char* p, size_t, size_t n, void* user) {
    auto* r = static_cast<Response*>(user);
    long code = 0;
    curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300) {
      r->error_body.append(p, std::min(n, kMaxErrorBody - std::min(kMaxErrorBody,
                                                                   r->error_body.size())));
      return n;
    }
    if (r->received + n > r->cap) {
      r->overflow = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    if (r->dst != nullptr) {
      std::memcpy(r->dst + r->received, p, n);
    } else {
      r->text.append(p, n);
    }
    r->received += n;
    return n;
  }
  static size_t OnHeader(char* p, size_t, size_t n, void* user) {
    auto* r = static_cast<Response*>(user);
    std::string line(p, n);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect or 100)
        r->etag.clear();
        r->content_range.clear();
        r->content_length = -1;
      }
      return n;
    }
    const std::string name = Lower(Trim(line.substr(0, colon)));
    const std::string value = Trim(line.substr(colon + 1));
    if (name == "etag") r->etag = value;
    if (name == "content-range") r->content_range = value;
    if (name == "content-length") r->content_length = std::strtoll(value.c_str(), nullptr, 10);
    return n;
  }
};

S3Client::S3Client(S3Config config) : config_(std::move(config)) {}
S3Client::~S3Client() = default;

Result<std::unique_ptr<S3Client>> S3Client::Create(S3Config config) {
  std::call_once(g_curl_once, [] { g_curl_init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (g_curl_init != CURLE_OK)
    return Status::Internal(std::string("curl_global_init: ") + curl_easy_strerror(g_curl_init));
  std::unique_ptr<S3Client> c(new S3Client(std::move(config)));
  c->handle_ = std::make_unique<Handle>();
  c->handle_->curl = curl_easy_init();
  if (c->handle_->curl == nullptr) return Status::ResourceExhausted("curl_easy_init failed");
  return c;
}

std::string S3Client::UrlOf(const S3Url& object) const {
  const std::string key = EncodeKey(object.key);
  if (config_.path_style || object.bucket.find('.') != std::string::npos)
    return config_.endpoint + "/" + object.bucket + "/" + key;
  const size_t scheme_end = config_.endpoint.find("://") + 3;
  return config_.endpoint.substr(0, scheme_end) + object.bucket + "." +
         config_.endpoint.substr(scheme_end) + "/" + key;
}

Status S3Client::Perform(const char* method, const S3Url& object, uint64_t offset,
                         uint64_t range_len, const std::string& if_match, std::string_view body,
                         Response* response, const std::string& query,
                         const std::vector<std::string>& extra_headers) {
  const std::string url = UrlOf(object) + (query.empty() ? "" : "?" + query);
  std::string where = std::string(method) + " " + url;
  if (range_len > 0)
    where += " bytes " + std::to_string(offset) + "-" + std::to_string(offset + range_len - 1);
  std::mt19937_64 rng(std::random_device{}());
  bool reloaded_credentials = false;
  std::string last;  // why the last try failed
  for (uint32_t attempt = 0; attempt < config_.max_attempts; ++attempt) {
    if (attempt > 0) {
      ++stats_.retries;
      const uint64_t cap = std::min<uint64_t>(uint64_t{config_.backoff_ms} << std::min(attempt, 16u),
                                              5000);
      std::uniform_int_distribution<uint64_t> jitter(cap / 2, cap);
      std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
    }
    ++stats_.requests;
    CURL* h = handle_->curl;
    curl_easy_reset(h);  // keeps the connection cache
    Response& r = *response;
    r.code = 0;
    r.received = 0;
    r.overflow = false;
    r.text.clear();
    r.error_body.clear();
    r.etag.clear();
    r.content_range.clear();
    r.content_length = -1;
    r.curl = h;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, static_cast<long>(config_.request_timeout_seconds));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(config_.stall_seconds));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Response::OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &Response::OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    if (const std::string ca = Env("CURL_CA_BUNDLE").empty() ? Env("SSL_CERT_FILE")
                                                             : Env("CURL_CA_BUNDLE");
        !ca.empty())
      curl_easy_setopt(h, CURLOPT_CAINFO, ca.c_str());
    std::string range;
    if (range_len > 0) {
      range = std::to_string(offset) + "-" + std::to_string(offset + range_len - 1);
      curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
    }
    const bool sends_body = std::strcmp(method, "PUT") == 0 || std::strcmp(method, "POST") == 0;
    if (std::strcmp(method, "HEAD") == 0) {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (sends_body) {
      // The body from memory with its Content-Length (no chunked encoding: S3 needs the length).
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
      // Never null: a null CURLOPT_POSTFIELDS makes curl read the body from its read callback.
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.empty() ? "" : body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      // curl asks "Expect: 100-continue" for large bodies; a server that never answers it must
      // not cost a second per part.
      curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 100L);
    } else if (std::strcmp(method, "DELETE") == 0) {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    struct curl_slist* headers = nullptr;
    // curl 7.88 signs with SigV4 but does not send x-amz-content-sha256, which S3 requires.
    // (No "Expect:" to turn off 100-continue: curl would sign it as an empty header it then does
    // not send, and the server would refuse the signature.)
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (sends_body)
      headers = curl_slist_append(headers, std::strcmp(method, "POST") == 0
                                               ? "Content-Type: application/xml"
                                               : "Content-Type: application/octet-stream");
    for (const std::string& extra : extra_headers) headers = curl_slist_append(headers, extra.c_str());
    std::string token_header, if_match_header;
    if (!config_.session_token.empty()) {
      token_header = "x-amz-security-token: " + config_.session_token;
      headers = curl_slist_append(headers, token_header.c_str());
    }
    if (!if_match.empty()) {
      if_match_header = "If-Match: " + if_match;
      headers = curl_slist_append(headers, if_match_header.c_str());
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    std::string userpwd, sigv4;
    if (!config_.access_key.empty()) {
      sigv4 = "aws:amz:" + config_.region + ":s3";
      userpwd = config_.access_key + ":" + config_.secret_key;
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
    }
    const CURLcode cc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.code);
    stats_.bytes += r.received;

    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && r.overflow)) {
      // Transport failures are retried: refused/reset connections, short bodies, stalls.
      last = std::string(curl_easy_strerror(cc)) +
             (cc == CURLE_OPERATION_TIMEDOUT
                  ? " (no progress for " + std::to_string(config_.stall_seconds) + " s or over " +
                        std::to_string(config_.request_timeout_seconds) + " s)"
                  : "");
      if (r.code != 0) last += ", HTTP " + std::to_string(r.code);
      continue;
    }
    const long code = r.code;
    const std::string s3code = S3ErrorCode(r.error_body);
    const std::string status_text =
        "HTTP " + std::to_string(code) + (s3code.empty() ? "" : " " + s3code);
    if (code >= 200 && code < 300) {
      if (r.overflow) {
        last = status_text + ", more body bytes than the " + std::to_string(r.cap) + " asked";
        continue;
      }
      if (sends_body) stats_.bytes_sent += body.size();
      return Status::OK();
    }
    if (code >= 500 || code == 429 || s3code == "SlowDown" || s3code == "RequestTimeout" ||
        s3code == "InternalError") {
      last = status_text;
      continue;
    }
    if (code == 403 || code == 401 || code == 400) {
      // Credentials may have been rotated in the files (or the environment of a child): re-read
      // them once and retry when they changed.
      if (!reloaded_credentials) {
        reloaded_credentials = true;
        Result<S3Config> fresh = LoadS3Config();
        if (fresh.ok() && (fresh->access_key != config_.access_key ||
                           fresh->secret_key != config_.secret_key ||
                           fresh->session_token != config_.session_token)) {
          config_.access_key = fresh->access_key;
          config_.secret_key = fresh->secret_key;
          config_.session_token = fresh->session_token;
          config_.source = fresh->source;
          --attempt;  // not a failure of the server
          continue;
        }
      }
      if (code == 400 && s3code != "ExpiredToken" && s3code != "InvalidToken" &&
          s3code != "AuthorizationHeaderMalformed")
        return Status::InvalidArgument(where + ": " + status_text);
      return Status::IoError(where + ": " + status_text +
                                 ": access denied with credentials from " + config_.source +
                                 "; check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / "
                                 "AWS_SESSION_TOKEN / AWS_PROFILE and AWS_REGION",
                             EACCES);
    }
    if (code == 404)
      return Status::NotFound(where + ": " + status_text +
                                  (s3code == "NoSuchUpload"
                                       ? std::string(" (no such upload: completed or aborted)")
                                       : " (no such object" +
                                             std::string(s3code == "NoSuchBucket" ? " or bucket"
                                                                                  : "") +
                                             ")"),
                              ENOENT);
    if (code == 412 || code == 416)
      return Status::IoError(where + ": " + status_text + ": the object was replaced since the "
                                 "dataset was opened (its ETag " + if_match +
                                 " no longer matches); reopen the dataset to read the new version",
                             ESTALE);
    return Status::IoError(where + ": " + status_text, EIO);
  }
  return Status::IoError(where + ": failed after " + std::to_string(config_.max_attempts) +
                             " attempts (LIBSHARD_S3_MAX_ATTEMPTS); last: " + last,
                         EIO);
}

Result<ObjectInfo> S3Client::Head(const S3Url& object) {
  Response r;
  LIBSHARD_RETURN_IF_ERROR(Perform("HEAD", object, 0, 0, {}, {}, &r));
  if (r.content_length < 0)
    return Status::IoError("HEAD " + UrlOf(object) + ": HTTP " + std::to_string(r.code) +
                               " without Content-Length",
                           EIO);
  return ObjectInfo{static_cast<uint64_t>(r.content_length), r.etag};
}

Status S3Client::GetRange(const S3Url& object, uint64_t offset, uint64_t length,
                          const std::string& if_match, void* dst) {
  if (length == 0) return Status::OK();
  Response r;
  r.dst = static_cast<char*>(dst);
  r.cap = length;
  const std::string where = "GET " + UrlOf(object) + " bytes " + std::to_string(offset) + "-" +
                            std::to_string(offset + length - 1);
  // A short body (a connection cut mid-transfer that curl did not see as one) is retried here.
  Status last;
  for (uint32_t attempt = 0; attempt < config_.max_attempts; ++attempt) {
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", object, offset, length, if_match, {}, &r));
    const std::string want_range = "bytes " + std::to_string(offset) + "-" +
                                   std::to_string(offset + length - 1) + "/";
    const bool whole = r.code == 200 && offset == 0;
    if (r.received == length && (whole || r.content_range.rfind(want_range, 0) == 0)) {
      if (!if_match.empty() && !r.etag.empty() && r.etag != if_match)
        return Status::IoError(where + ": HTTP " + std::to_string(r.code) + " with ETag " +
                                   r.etag + " but " + if_match + " was asked: the object was "
                                   "replaced; reopen the dataset",
                               ESTALE);
      return Status::OK();
    }
    last = Status::IoError(where + ": HTTP " + std::to_string(r.code) + " delivered " +
                               std::to_string(r.received) + " of " + std::to_string(length) +
                               " bytes (Content-Range '" + r.content_range + "')",
                           EIO);
    ++stats_.retries;
  }
  return last;
}

Result<S3Client::Body> S3Client::GetObject(const S3Url& object, uint64_t max_bytes,
                                           const std::string& if_match) {
  Response r;
  r.cap = max_bytes;
  Status st = Perform("GET", object, 0, 0, if_match, {}, &r);
  if (r.overflow)
    return Status::Corruption("GET " + UrlOf(object) + ": larger than " +
                              std::to_string(max_bytes) + " bytes");
  LIBSHARD_RETURN_IF_ERROR(st);
  if (r.content_length >= 0 && static_cast<uint64_t>(r.content_length) != r.received)
    return Status::IoError("GET " + UrlOf(object) + ": received " + std::to_string(r.received) +
                               " of " + std::to_string(r.content_length) + " bytes",
                           EIO);
  return Body{std::move(r.text), std::move(r.etag)};
}

namespace {

// A query-string value as SigV4 canonicalises it (RFC 3986 unreserved characters pass).
std::string EncodeQueryValue(std::string_view v) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string XmlUnescape(std::string s) {
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&quot;", "\""}, {"&apos;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&#34;", "\""},
      {"&amp;", "&"}};
  for (const auto& [from, to] : kEntities) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + std::strlen(to)))
      s.replace(p, std::strlen(from), to);
  }
  return s;
}

// The text of the first <tag>...</tag> at or after `from` (end of it in *next), or nullopt.
std::optional<std::string> XmlTag(const std::string& xml, const std::string& tag, size_t from = 0,
                                  size_t* next = nullptr) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t b = xml.find(open, from);
  if (b == std::string::npos) return std::nullopt;
  const size_t e = xml.find(close, b + open.size());
  if (e == std::string::npos) return std::nullopt;
  if (next != nullptr) *next = e + close.size();
  return XmlUnescape(xml.substr(b + open.size(), e - b - open.size()));
}

std::string XmlEscape(std::string_view v) {
  std::string out;
  for (char c : v) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace

Result<std::string> S3Client::Put(const S3Url& object, std::string_view data,
                                  const std::string& content_md5) {
  Response r;
  r.cap = 1 << 20;
  std::vector<std::string> headers;
  if (!content_md5.empty()) headers.push_back("Content-MD5: " + content_md5);
  LIBSHARD_RETURN_IF_ERROR(Perform("PUT", object, 0, 0, {}, data, &r, {}, headers));
  return r.etag;
}

Status S3Client::Delete(const S3Url& object) {
  Response r;
  r.cap = 1 << 20;
  return Perform("DELETE", object, 0, 0, {}, {}, &r);
}

Result<std::string> S3Client::CreateMultipartUpload(const S3Url& object) {
  Response r;
  r.cap = 1 << 20;
  LIBSHARD_RETURN_IF_ERROR(Perform("POST", object, 0, 0, {}, {}, &r, "uploads="));
  std::optional<std::string> id = XmlTag(r.text, "UploadId");
  if (!id || id->empty())
    return Status::IoError("POST " + UrlOf(object) + "?uploads: HTTP " + std::to_string(r.code) +
                               " without an UploadId",
                           EIO);
  return *id;
}

Result<std::string> S3Client::UploadPart(const S3Url& object, const std::string& upload_id,
                                         uint32_t number, std::string_view data,
                                         const std::string& content_md5) {
  Response r;
  r.cap = 1 << 20;
  std::vector<std::string> headers;
  if (!content_md5.empty()) headers.push_back("Content-MD5: " + content_md5);
  const std::string query =
      "partNumber=" + std::to_string(number) + "&uploadId=" + EncodeQueryValue(upload_id);
  LIBSHARD_RETURN_IF_ERROR(Perform("PUT", object, 0, 0, {}, data, &r, query, headers));
  if (r.etag.empty())
    return Status::IoError("PUT " + UrlOf(object) + "?" + query + ": HTTP " +
                               std::to_string(r.code) + " without an ETag",
                           EIO);
  return r.etag;
}

Result<std::vector<S3Client::Part>> S3Client::ListParts(const S3Url& object,
                                                        const std::string& upload_id) {
  std::vector<Part> parts;
  uint64_t marker = 0;
  for (int page = 0; page < 100; ++page) {  // 10000 parts at most, 1000 a page
    Response r;
    r.cap = 16 << 20;
    const std::string query = (marker ? "part-number-marker=" + std::to_string(marker) + "&"
                                      : std::string()) +
                              "uploadId=" + EncodeQueryValue(upload_id);
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", object, 0, 0, {}, {}, &r, query));
    size_t pos = 0;
    for (size_t next = 0; XmlTag(r.text, "Part", pos, &next); pos = next) {
      const size_t b = r.text.find("<Part>", pos);
      const std::string part = r.text.substr(b, next - b);
      Part p;
      p.number = static_cast<uint32_t>(std::strtoul(XmlTag(part, "PartNumber").value_or("0").c_str(),
                                                    nullptr, 10));
      p.size = std::strtoull(XmlTag(part, "Size").value_or("0").c_str(), nullptr, 10);
      p.etag = XmlTag(part, "ETag").value_or("");
      if (p.number > 0) parts.push_back(std::move(p));
    }
    if (XmlTag(r.text, "IsTruncated").value_or("false") != "true") break;
    const uint64_t m = std::strtoull(XmlTag(r.text, "NextPartNumberMarker").value_or("0").c_str(),
                                     nullptr, 10);
    if (m <= marker) break;
    marker = m;
  }
  std::sort(parts.begin(), parts.end(),
            [](const Part& a, const Part& b) { return a.number < b.number; });
  return parts;
}

Result<std::string> S3Client::CompleteMultipartUpload(const S3Url& object,
                                                      const std::string& upload_id,
                                                      const std::vector<Part>& parts) {
  std::string xml = "<CompleteMultipartUpload>";
  for (const Part& p : parts)
    xml += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" +
           XmlEscape(p.etag) + "</ETag></Part>";
  xml += "</CompleteMultipartUpload>";
  Response r;
  r.cap = 1 << 20;
  const std::string query = "uploadId=" + EncodeQueryValue(upload_id);
  LIBSHARD_RETURN_IF_ERROR(Perform("POST", object, 0, 0, {}, xml, &r, query));
  // S3 may answer 200 and report the failure in the body.
  if (r.text.find("<Error>") != std::string::npos)
    return Status::IoError("POST " + UrlOf(object) + "?" + query + ": HTTP " +
                               std::to_string(r.code) + " " +
                               XmlTag(r.text, "Code").value_or("") + ": " +
                               XmlTag(r.text, "Message").value_or(""),
                           EIO);
  std::optional<std::string> etag = XmlTag(r.text, "ETag");
  return etag ? *etag : r.etag;
}

Result<std::vector<S3Client::Upload>> S3Client::ListMultipartUploads(
    const std::string& bucket, const std::string& key_prefix) {
  std::vector<Upload> out;
  std::string key_marker, id_marker;
  const S3Url where{bucket, ""};
  for (int page = 0; page < 10; ++page) {
    Response r;
    r.cap = 16 << 20;
    // Canonical order: key-marker, prefix, upload-id-marker, uploads.
    std::string query;
    if (!key_marker.empty()) query += "key-marker=" + EncodeQueryValue(key_marker) + "&";
    query += "prefix=" + EncodeQueryValue(key_prefix) + "&";
    if (!id_marker.empty()) query += "upload-id-marker=" + EncodeQueryValue(id_marker) + "&";
    query += "uploads=";
    LIBSHARD_RETURN_IF_ERROR(Perform("GET", where, 0, 0, {}, {}, &r, query));
    size_t pos = 0;
    for (size_t next = 0; XmlTag(r.text, "Upload", pos, &next); pos = next) {
      const size_t b = r.text.find("<Upload>", pos);
      const std::string u = r.text.substr(b, next - b);
      Upload up{XmlTag(u, "Key").value_or(""), XmlTag(u, "UploadId").value_or("")};
      if (!up.key.empty() && !up.upload_id.empty()) out.push_back(std::move(up));
    }
    if (XmlTag(r.text, "IsTruncated").value_or("false") != "true") break;
    key_marker = XmlTag(r.text, "NextKeyMarker").value_or("");
    id_marker = XmlTag(r.text, "NextUploadIdMarker").value_or("");
    if (key_marker.empty()) break;
  }
  return out;
}

Status S3Client::AbortMultipartUpload(const S3Url& object, const std::string& upload_id) {
  Response r;
  r.cap = 1 << 20;
  return Perform("DELETE", object, 0, 0, {}, {}, &r, "uploadId=" + EncodeQueryValue(upload_id));
}

}  // namespace libshard::io
