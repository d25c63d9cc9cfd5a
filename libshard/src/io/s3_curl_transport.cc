// The libcurl transport of S3Client (s3_transport.h): one easy handle, kept between requests so
// its connection stays open, signing with CURLOPT_AWS_SIGV4.
#include <curl/curl.h>

#include <mutex>
#include <string>

#include "io/s3_internal.h"
#include "io/s3_transport.h"

namespace libshard::io {

namespace {

using s3_internal::Env;

std::once_flag g_curl_once;
CURLcode g_curl_init = CURLE_OK;

struct Sink {
  S3Response* response;
  CURL* curl;
};

size_t OnBody(char* p, size_t, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  long code = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
  s->response->code = code;
  return s->response->OnBody(p, n) ? n : 0;  // 0 aborts the transfer (CURLE_WRITE_ERROR)
}

size_t OnHeader(char* p, size_t, size_t n, void* user) {
  static_cast<Sink*>(user)->response->OnHeader(std::string_view(p, n));
  return n;
}

class CurlTransport final : public S3Transport {
 public:
  explicit CurlTransport(CURL* curl) : curl_(curl) {}
  ~CurlTransport() override { curl_easy_cleanup(curl_); }

  Status Exchange(const S3Request& q, S3Response* r) override {
    CURL* h = curl_;
    curl_easy_reset(h);  // keeps the connection cache
    Sink sink{r, h};
    curl_easy_setopt(h, CURLOPT_URL, q.url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, static_cast<long>(q.timeout_seconds));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(q.stall_seconds));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &sink);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    // The path as built (EncodeKey): never "/../" or "/./" collapsed into another key or bucket.
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (const std::string ca =
            Env("CURL_CA_BUNDLE").empty() ? Env("SSL_CERT_FILE") : Env("CURL_CA_BUNDLE");
        !ca.empty())
      curl_easy_setopt(h, CURLOPT_CAINFO, ca.c_str());
    std::string range;
    if (q.range_length > 0) {
      range = std::to_string(q.range_offset) + "-" +
              std::to_string(q.range_offset + q.range_length - 1);
      curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
    }
    const bool sends_body = q.method == "PUT" || q.method == "POST";
    if (q.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (sends_body) {
      // The body from memory with its Content-Length (no chunked encoding: S3 needs the length).
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q.method.c_str());
      // Never null: a null CURLOPT_POSTFIELDS makes curl read the body from its read callback.
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, q.body.empty() ? "" : q.body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(q.body.size()));
      // curl asks "Expect: 100-continue" for large bodies; a server that never answers it must
      // not cost a second per part.
      curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 100L);
    } else if (q.method == "DELETE") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    struct curl_slist* headers = nullptr;
    // curl 7.88 signs with SigV4 but does not send x-amz-content-sha256, which S3 requires.
    // (No "Expect:" to turn off 100-continue: curl would sign it as an empty header it then does
    // not send, and the server would refuse the signature.)
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (sends_body)
      headers =
          curl_slist_append(headers, q.method == "POST" ? "Content-Type: application/xml"
                                                        : "Content-Type: application/octet-stream");
    for (const std::string& extra : q.headers) headers = curl_slist_append(headers, extra.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    std::string userpwd, sigv4;
    if (!q.access_key.empty()) {
      sigv4 = "aws:amz:" + q.region + ":s3";
      userpwd = q.access_key + ":" + q.secret_key;
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
    }
    const CURLcode cc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->code);
    if (cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && r->overflow)) return Status::OK();
    std::string why = curl_easy_strerror(cc);
    if (cc == CURLE_OPERATION_TIMEDOUT)
      why += " (no progress for " + std::to_string(q.stall_seconds) + " s or over " +
             std::to_string(q.timeout_seconds) + " s)";
    return Status::IoError(why, EIO);
  }

 private:
  CURL* curl_;
};

}  // namespace

Result<std::unique_ptr<S3Transport>> MakeCurlTransport() {
  // curl_global_init is not thread-safe before 7.84: once per process.
  std::call_once(g_curl_once, [] { g_curl_init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (g_curl_init != CURLE_OK)
    return Status::Internal(std::string("curl_global_init: ") + curl_easy_strerror(g_curl_init));
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return Status::ResourceExhausted("curl_easy_init failed");
  return std::unique_ptr<S3Transport>(std::make_unique<CurlTransport>(curl));
}

}  // namespace libshard::io
