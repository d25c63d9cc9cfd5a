// FakeS3 (fake_s3.h).
#include "testutil/fake_s3.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "remote/md5.h"

namespace libshard::testing {
namespace {

std::string Hex(const std::array<uint8_t, 16>& d) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string XmlEscape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '"')
      out += "&quot;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out.push_back(c);
  }
  return out;
}

std::string Unquote(std::string s) {
  for (const char* q : {"&quot;", "&#34;"})
    for (size_t p = s.find(q); p != std::string::npos; p = s.find(q)) s.replace(p, strlen(q), "\"");
  return s;
}

std::string Header(const io::S3Request& q, const std::string& name) {
  for (const std::string& h : q.headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    std::string n = h.substr(0, colon);
    std::transform(n.begin(), n.end(), n.begin(), ::tolower);
    if (n == name) {
      size_t v = colon + 1;
      while (v < h.size() && h[v] == ' ') ++v;
      return h.substr(v);
    }
  }
  return {};
}

struct Reply {
  long code = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  void Error(long c, const std::string& s3code) {
    code = c;
    body = "<?xml version=\"1.0\"?><Error><Code>" + s3code + "</Code><Message>" + s3code +
           "</Message></Error>";
  }
  void Drop(const std::string& name) {
    headers.erase(std::remove_if(headers.begin(), headers.end(),
                                 [&](const auto& h) { return h.first == name; }),
                  headers.end());
  }
};

}  // namespace

std::shared_ptr<FakeS3> FakeS3::Make() { return std::shared_ptr<FakeS3>(new FakeS3()); }

FakeS3::Installed::~Installed() { io::SetS3TransportFactory(std::move(previous_)); }

std::unique_ptr<FakeS3::Installed> FakeS3::Install() {
  struct Transport final : io::S3Transport {
    std::shared_ptr<FakeS3> server;
    Status Exchange(const io::S3Request& q, io::S3Response* r) override {
      return server->Exchange(q, r);
    }
  };
  std::weak_ptr<FakeS3> weak = weak_from_this();
  io::S3TransportFactory previous =
      io::SetS3TransportFactory([weak]() -> Result<std::unique_ptr<io::S3Transport>> {
        auto t = std::make_unique<Transport>();
        t->server = weak.lock();
        if (t->server == nullptr) return Status::Internal("the FakeS3 server is gone");
        return std::unique_ptr<io::S3Transport>(std::move(t));
      });
  return std::make_unique<Installed>(std::move(previous));
}

void FakeS3::Put(const std::string& bucket, const std::string& key, std::string data) {
  std::lock_guard<std::mutex> lock(mu_);
  Object& o = objects_[bucket + "/" + key];
  o.etag = "\"" + Hex(remote::Md5(data)) + "\"";
  o.data = std::move(data);
}

bool FakeS3::Has(const std::string& bucket, const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return objects_.count(bucket + "/" + key) > 0;
}

std::string FakeS3::Get(const std::string& bucket, const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(bucket + "/" + key);
  return it == objects_.end() ? std::string() : it->second.data;
}

std::string FakeS3::Etag(const std::string& bucket, const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(bucket + "/" + key);
  return it == objects_.end() ? std::string() : it->second.etag;
}

void FakeS3::Remove(const std::string& bucket, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_.erase(bucket + "/" + key);
}

void FakeS3::Damage(const std::string& bucket, const std::string& key, uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  Object& o = objects_.at(bucket + "/" + key);
  o.data.at(offset) = static_cast<char>(o.data.at(offset) ^ 0x5a);
}

void FakeS3::PutDirectory(const std::string& bucket, const std::string& prefix,
                          const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    Put(bucket, prefix + "/" + e.path().filename().string(), ss.str());
  }
}

std::vector<std::string> FakeS3::Keys(const std::string& bucket) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, o] : objects_)
    if (k.rfind(bucket + "/", 0) == 0) out.push_back(k.substr(bucket.size() + 1));
  return out;
}

void FakeS3::AddFault(S3FaultRule rule) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.push_back(std::move(rule));
}

void FakeS3::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.clear();
}

uint64_t FakeS3::Requests(const std::string& method, const std::string& key_contains) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(log_.begin(), log_.end(), [&](const Logged& l) {
    return (method.empty() || l.method == method) && l.key.find(key_contains) != std::string::npos;
  });
}

uint64_t FakeS3::RangedGets(const std::string& key_contains, uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(log_.begin(), log_.end(), [&](const Logged& l) {
    return l.method == "GET" && l.ranged && l.delivered &&
           l.key.find(key_contains) != std::string::npos &&
           (offset == UINT64_MAX || l.offset == offset);
  });
}

uint64_t FakeS3::FaultsApplied() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_applied_;
}

void FakeS3::ResetCounts() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
  faults_applied_ = 0;
}

bool FakeS3::TakeFault(const std::string& method, const std::string& key, const std::string& query,
                       bool ranged, uint64_t offset, S3FaultRule* out) {
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (!it->method.empty() && it->method != method) continue;
    if (key.find(it->key_contains) == std::string::npos) continue;
    if (query.find(it->query_contains) == std::string::npos) continue;
    if (it->ranged_only && !ranged) continue;
    if (it->range_offset != UINT64_MAX && (!ranged || it->range_offset != offset)) continue;
    *out = *it;
    if (it->times > 0 && --it->times == 0) faults_.erase(it);
    ++faults_applied_;
    return true;
  }
  return false;
}

Status FakeS3::Exchange(const io::S3Request& q, io::S3Response* r) {
  // http://fake-s3/BUCKET/KEY?QUERY
  const std::string prefix = std::string(kEndpoint) + "/";
  if (q.url.rfind(prefix, 0) != 0) return Status::IoError("Could not resolve host: " + q.url, EIO);
  std::string path = q.url.substr(prefix.size()), query;
  if (const size_t qm = path.find('?'); qm != std::string::npos) {
    query = path.substr(qm + 1);
    path.resize(qm);
  }
  std::map<std::string, std::string> args;
  for (size_t p = 0; p <= query.size() && !query.empty();) {
    size_t amp = query.find('&', p);
    if (amp == std::string::npos) amp = query.size();
    const std::string kv = query.substr(p, amp - p);
    const size_t eq = kv.find('=');
    args[kv.substr(0, eq)] = eq == std::string::npos ? "" : Decode(kv.substr(eq + 1));
    p = amp + 1;
  }
  const size_t slash = path.find('/');
  const std::string bucket = path.substr(0, slash);
  const std::string key = slash == std::string::npos ? "" : Decode(path.substr(slash + 1));
  const bool ranged = q.range_length > 0;

  Reply reply;
  S3FaultRule fault;
  bool faulty = false;
  size_t logged = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back({q.method, key, ranged, q.range_offset, false});
    logged = log_.size() - 1;
    faulty = TakeFault(q.method, key, query, ranged, q.range_offset, &fault);
    const auto is = [&](S3Fault f) {
      return faulty && std::find(fault.faults.begin(), fault.faults.end(), f) != fault.faults.end();
    };
    if (is(S3Fault::kReset)) return Status::IoError("Connection reset by peer (injected)", EIO);
    if (is(S3Fault::kStall)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return Status::IoError(
          "Timeout was reached (no progress for " + std::to_string(q.stall_seconds) + " s)", EIO);
    }
    if (is(S3Fault::kStatus503)) {
      reply.Error(503, "SlowDown");
    } else if (q.method == "POST" && args.count("uploads")) {
      const std::string id = "upload-" + std::to_string(next_upload_++);
      uploads_[id] = Upload{bucket, key, {}};
      reply.body = "<InitiateMultipartUploadResult><Bucket>" + bucket + "</Bucket><Key>" +
                   XmlEscape(key) + "</Key><UploadId>" + id +
                   "</UploadId></InitiateMultipartUploadResult>";
    } else if (q.method == "GET" && args.count("uploads")) {
      reply.body = "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>";
      for (const auto& [id, u] : uploads_)
        if (u.bucket == bucket && u.key.rfind(args["prefix"], 0) == 0)
          reply.body +=
              "<Upload><Key>" + XmlEscape(u.key) + "</Key><UploadId>" + id + "</UploadId></Upload>";
      reply.body += "</ListMultipartUploadsResult>";
    } else if (args.count("uploadId")) {
      auto up = uploads_.find(args["uploadId"]);
      if (up == uploads_.end() || up->second.bucket != bucket || up->second.key != key) {
        reply.Error(404, "NoSuchUpload");
      } else if (q.method == "PUT") {
        const std::string data(q.body);
        const std::string md5 = Header(q, "content-md5");
        if (!md5.empty() && md5 != remote::Md5Base64(data)) {
          reply.Error(400, "BadDigest");
        } else {
          const uint32_t n = static_cast<uint32_t>(std::stoul(args["partNumber"]));
          Object& part = up->second.parts[n];
          part.data = data;
          part.etag = "\"" + Hex(remote::Md5(data)) + "\"";
          reply.headers.push_back({"ETag", part.etag});
        }
      } else if (q.method == "GET") {
        reply.body = "<ListPartsResult><IsTruncated>false</IsTruncated>";
        for (const auto& [n, p] : up->second.parts)
          reply.body += "<Part><PartNumber>" + std::to_string(n) + "</PartNumber><ETag>" +
                        XmlEscape(p.etag) + "</ETag><Size>" + std::to_string(p.data.size()) +
                        "</Size></Part>";
        reply.body += "</ListPartsResult>";
      } else if (q.method == "POST") {
        // <Part><PartNumber>N</PartNumber><ETag>E</ETag></Part>...
        std::string body(q.body), data, digests;
        size_t pos = 0, count = 0;
        bool bad = false;
        while ((pos = body.find("<PartNumber>", pos)) != std::string::npos) {
          const size_t e = body.find("</PartNumber>", pos);
          const uint32_t n = static_cast<uint32_t>(std::stoul(body.substr(pos + 12, e - pos - 12)));
          const size_t t0 = body.find("<ETag>", e), t1 = body.find("</ETag>", t0);
          const std::string etag = Unquote(body.substr(t0 + 6, t1 - t0 - 6));
          auto part = up->second.parts.find(n);
          if (part == up->second.parts.end() || part->second.etag != etag) bad = true;
          if (!bad) {
            data += part->second.data;
            const auto d = remote::Md5(part->second.data);
            digests.append(reinterpret_cast<const char*>(d.data()), d.size());
          }
          ++count;
          pos = t1;
        }
        if (bad || count == 0) {
          reply.Error(400, "InvalidPart");
        } else {
          Object& o = objects_[bucket + "/" + key];
          o.data = std::move(data);
          o.etag = "\"" + Hex(remote::Md5(digests)) + "-" + std::to_string(count) + "\"";
          reply.body = "<CompleteMultipartUploadResult><ETag>" + XmlEscape(o.etag) +
                       "</ETag></CompleteMultipartUploadResult>";
          uploads_.erase(up);
        }
      } else if (q.method == "DELETE") {
        uploads_.erase(up);
        reply.code = 204;
      }
    } else if (q.method == "PUT") {
      const std::string data(q.body);
      const std::string md5 = Header(q, "content-md5");
      if (!md5.empty() && md5 != remote::Md5Base64(data)) {
        reply.Error(400, "BadDigest");
      } else {
        Object& o = objects_[bucket + "/" + key];
        o.etag = "\"" + Hex(remote::Md5(data)) + "\"";
        o.data = data;
        reply.headers.push_back({"ETag", o.etag});
      }
    } else if (q.method == "DELETE") {
      objects_.erase(bucket + "/" + key);
      reply.code = 204;
    } else if (q.method == "GET" || q.method == "HEAD") {
      auto it = objects_.find(bucket + "/" + key);
      const std::string if_match = Header(q, "if-match");
      if (it == objects_.end()) {
        reply.Error(404, "NoSuchKey");
      } else if (!if_match.empty() && if_match != it->second.etag && !is(S3Fault::kIgnoreIfMatch)) {
        reply.Error(412, "PreconditionFailed");
      } else {
        const Object& o = it->second;
        reply.headers.push_back({"ETag", o.etag});
        const uint64_t size = o.data.size();
        if (ranged && !is(S3Fault::kIgnoreRange)) {
          if (q.range_offset >= size) {
            reply.Error(416, "InvalidRange");
          } else {
            const uint64_t end = std::min(size, q.range_offset + q.range_length);
            reply.code = 206;
            reply.headers.push_back({"Content-Range", "bytes " + std::to_string(q.range_offset) +
                                                          "-" + std::to_string(end - 1) + "/" +
                                                          std::to_string(size)});
            reply.body = o.data.substr(q.range_offset, end - q.range_offset);
          }
        } else {
          reply.body = o.data;
        }
        if (q.method == "HEAD") {
          reply.headers.push_back({"Content-Length", std::to_string(size)});
          reply.body.clear();
        }
      }
    } else {
      reply.Error(405, "MethodNotAllowed");
    }
  }
  if (q.method != "HEAD" && (reply.code < 200 || reply.code >= 300 || !reply.body.empty()))
    reply.headers.push_back({"Content-Length", std::to_string(reply.body.size())});
  const auto is = [&](S3Fault f) {
    return faulty && std::find(fault.faults.begin(), fault.faults.end(), f) != fault.faults.end();
  };
  bool cut = false;
  if (reply.code >= 200 && reply.code < 300) {
    if (is(S3Fault::kNoEtag)) reply.Drop("ETag");
    if (is(S3Fault::kNoContentLength)) reply.Drop("Content-Length");
    if (is(S3Fault::kNoContentRange)) reply.Drop("Content-Range");
    if (is(S3Fault::kFlipByte) && !reply.body.empty()) {
      const uint64_t at = fault.arg == UINT64_MAX
                              ? reply.body.size() / 2
                              : std::min<uint64_t>(fault.arg, reply.body.size() - 1);
      reply.body[at] = static_cast<char>(reply.body[at] ^ 0x5a);
    }
    if (is(S3Fault::kShortNoLength)) {
      reply.Drop("Content-Length");
      reply.body.resize(reply.body.size() / 2);
    }
    if (is(S3Fault::kShortBody)) cut = true;
  }
  r->OnStatus(reply.code);
  for (const auto& [n, v] : reply.headers) r->OnHeader(n + ": " + v + "\r\n");
  const uint64_t deliver = cut ? reply.body.size() / 2 : reply.body.size();
  constexpr uint64_t kChunk = 16384;
  for (uint64_t p = 0; p < deliver; p += kChunk)
    if (!r->OnBody(reply.body.data() + p, std::min(kChunk, deliver - p))) return Status::OK();
  if (cut)
    return Status::IoError("transfer closed with " + std::to_string(reply.body.size() - deliver) +
                               " bytes remaining to read (injected)",
                           EIO);
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_[logged].delivered = true;
  }
  return Status::OK();
}

}  // namespace libshard::testing
