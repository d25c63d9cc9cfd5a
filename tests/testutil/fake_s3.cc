// The S3 protocol front over a MemoryServer (fake_s3.h).
#include "testutil/fake_s3.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "objstore/md5.h"

namespace libshard::testing {
namespace {

using objstore::Fault;
using objstore::MemoryServer;

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

S3Front::S3Front(std::shared_ptr<MemoryServer> server) {
  struct Transport final : io::S3Transport {
    std::shared_ptr<MemoryServer> server;
    Status Exchange(const io::S3Request& q, io::S3Response* r) override {
      return S3Front::Exchange(*server, q, r);
    }
  };
  std::weak_ptr<MemoryServer> weak = server;
  previous_ = io::SetS3TransportFactory([weak]() -> Result<std::unique_ptr<io::S3Transport>> {
    auto t = std::make_unique<Transport>();
    t->server = weak.lock();
    if (t->server == nullptr) return Status::Internal("the in-memory S3 server is gone");
    return std::unique_ptr<io::S3Transport>(std::move(t));
  });
}

S3Front::~S3Front() { io::SetS3TransportFactory(std::move(previous_)); }

Status S3Front::Exchange(MemoryServer& server, const io::S3Request& q, io::S3Response* r) {
  // http://fake-s3/BUCKET/KEY?QUERY
  const std::string prefix = std::string(kS3Endpoint) + "/";
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
  const uint32_t part =
      args.count("partNumber") ? static_cast<uint32_t>(std::stoul(args["partNumber"])) : 0;

  const MemoryServer::Call call =
      server.Begin(q.method, bucket, args.count("prefix") ? args["prefix"] : key, part, ranged,
                   q.range_offset);
  const auto is = [&](Fault f) { return call.Has(f); };
  if (is(Fault::kSlow))
    std::this_thread::sleep_for(std::chrono::milliseconds(
        call.fault->arg == UINT64_MAX ? 5 : std::min<uint64_t>(call.fault->arg, 60000)));
  if (is(Fault::kDrop)) return Status::IoError("Connection reset by peer (injected)", EIO);
  if (is(Fault::kStall)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return Status::IoError(
        "Timeout was reached (no progress for " + std::to_string(q.stall_seconds) + " s)", EIO);
  }
  const std::string content_md5 = Header(q, "content-md5");
  const auto bad_digest = [&](const std::string& data) {
    return !content_md5.empty() && content_md5 != objstore::Md5Base64(data) &&
           !is(Fault::kIgnoreCondition);
  };
  // A body damaged on the way (before the server sees it).
  std::string sent(q.body);
  if (is(Fault::kCorrupt) && (q.method == "PUT") && !sent.empty())
    sent[sent.size() / 2] = static_cast<char>(sent[sent.size() / 2] ^ 0x5a);

  Reply reply;
  if (is(Fault::kError)) {
    const uint64_t code = call.fault->arg == UINT64_MAX ? 503 : call.fault->arg;
    reply.Error(static_cast<long>(code), code == 503 ? "SlowDown"
                                         : code == 404 ? "NoSuchKey"
                                         : code == 403 ? "AccessDenied"
                                                       : "InternalError");
  } else if (q.method == "POST" && args.count("uploads")) {
    const std::string id = server.BeginUpload(bucket, key);
    reply.body = "<InitiateMultipartUploadResult><Bucket>" + bucket + "</Bucket><Key>" +
                 XmlEscape(key) + "</Key><UploadId>" + id +
                 "</UploadId></InitiateMultipartUploadResult>";
  } else if (q.method == "GET" && args.count("uploads")) {
    reply.body = "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>";
    for (const objstore::PendingUpload& u : server.Uploads(bucket, args["prefix"]))
      reply.body += "<Upload><Key>" + XmlEscape(u.name) + "</Key><UploadId>" + u.upload_id +
                    "</UploadId></Upload>";
    reply.body += "</ListMultipartUploadsResult>";
  } else if (q.method == "GET" && args.count("list-type")) {
    reply.body = "<ListBucketResult><IsTruncated>false</IsTruncated>";
    for (const objstore::ListEntry& e : server.ListKeys(bucket, args["prefix"]))
      reply.body += "<Contents><Key>" + XmlEscape(e.name) + "</Key><Size>" +
                    std::to_string(e.size) + "</Size><ETag>" + XmlEscape(e.generation) +
                    "</ETag></Contents>";
    reply.body += "</ListBucketResult>";
  } else if (args.count("uploadId")) {
    const std::string& id = args["uploadId"];
    if (q.method == "PUT") {
      if (bad_digest(sent)) {
        reply.Error(400, "BadDigest");
      } else {
        Result<std::string> etag = server.StorePart(id, bucket, key, part, sent);
        if (etag.ok())
          reply.headers.push_back({"ETag", *etag});
        else
          reply.Error(404, "NoSuchUpload");
      }
    } else if (q.method == "GET") {
      Result<std::vector<objstore::UploadPart>> parts = server.Parts(id, bucket, key);
      if (!parts.ok()) {
        reply.Error(404, "NoSuchUpload");
      } else {
        reply.body = "<ListPartsResult><IsTruncated>false</IsTruncated>";
        for (const objstore::UploadPart& p : *parts)
          reply.body += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" +
                        XmlEscape(p.generation) + "</ETag><Size>" + std::to_string(p.size) +
                        "</Size></Part>";
        reply.body += "</ListPartsResult>";
      }
    } else if (q.method == "POST") {
      // <Part><PartNumber>N</PartNumber><ETag>E</ETag></Part>...
      std::string body(q.body);
      std::vector<objstore::UploadPart> parts;
      for (size_t pos = 0; (pos = body.find("<PartNumber>", pos)) != std::string::npos;) {
        const size_t e = body.find("</PartNumber>", pos);
        const uint32_t n = static_cast<uint32_t>(std::stoul(body.substr(pos + 12, e - pos - 12)));
        const size_t t0 = body.find("<ETag>", e), t1 = body.find("</ETag>", t0);
        parts.push_back({n, 0, Unquote(body.substr(t0 + 6, t1 - t0 - 6))});
        pos = t1;
      }
      Result<std::string> etag = server.Complete(id, bucket, key, parts);
      if (etag.ok()) {
        reply.body = "<CompleteMultipartUploadResult><ETag>" + XmlEscape(*etag) +
                     "</ETag></CompleteMultipartUploadResult>";
      } else if (etag.status().code() == StatusCode::kNotFound) {
        reply.Error(404, "NoSuchUpload");
      } else {
        reply.Error(400, "InvalidPart");
      }
    } else if (q.method == "DELETE") {
      server.Abort(id);
      reply.code = 204;
    }
  } else if (q.method == "PUT") {
    if (bad_digest(sent)) {
      reply.Error(400, "BadDigest");
    } else if (Header(q, "if-none-match") == "*" && !is(Fault::kIgnoreCondition) &&
               server.Has(bucket, key)) {
      reply.Error(412, "PreconditionFailed");
    } else {
      reply.headers.push_back({"ETag", server.Store(bucket, key, sent)});
    }
  } else if (q.method == "DELETE") {
    server.Remove(bucket, key);
    reply.code = 204;
  } else if (q.method == "GET" || q.method == "HEAD") {
    std::optional<MemoryServer::Object> o = server.Find(bucket, key);
    const std::string if_match = Header(q, "if-match");
    if (!o) {
      reply.Error(404, "NoSuchKey");
    } else if (!if_match.empty() && if_match != o->generation && !is(Fault::kIgnoreCondition)) {
      reply.Error(412, "PreconditionFailed");
    } else {
      const std::string& data = is(Fault::kStale) && !o->previous.empty() ? o->previous : o->data;
      reply.headers.push_back({"ETag", o->generation});
      const uint64_t size = data.size();
      if (ranged && !is(Fault::kIgnoreRange)) {
        if (q.range_offset >= size) {
          reply.Error(416, "InvalidRange");
        } else {
          const uint64_t end = std::min(size, q.range_offset + q.range_length);
          reply.code = 206;
          reply.headers.push_back({"Content-Range", "bytes " + std::to_string(q.range_offset) +
                                                        "-" + std::to_string(end - 1) + "/" +
                                                        std::to_string(size)});
          reply.body = data.substr(q.range_offset, end - q.range_offset);
        }
      } else {
        reply.body = data;
      }
      if (q.method == "HEAD") {
        reply.headers.push_back({"Content-Length", std::to_string(size)});
        reply.body.clear();
      }
    }
  } else {
    reply.Error(405, "MethodNotAllowed");
  }
  if (q.method != "HEAD" && (reply.code < 200 || reply.code >= 300 || !reply.body.empty()))
    reply.headers.push_back({"Content-Length", std::to_string(reply.body.size())});
  bool cut = false;
  if (reply.code >= 200 && reply.code < 300) {
    if (is(Fault::kNoGeneration)) reply.Drop("ETag");
    if (is(Fault::kNoContentLength)) reply.Drop("Content-Length");
    if (is(Fault::kNoContentRange)) reply.Drop("Content-Range");
    if (is(Fault::kCorrupt) && q.method != "PUT" && !reply.body.empty()) {
      const uint64_t at = call.fault->arg == UINT64_MAX
                              ? reply.body.size() / 2
                              : std::min<uint64_t>(call.fault->arg, reply.body.size() - 1);
      reply.body[at] = static_cast<char>(reply.body[at] ^ 0x5a);
    }
    if (is(Fault::kCutUnmarked)) {
      reply.Drop("Content-Length");
      reply.body.resize(reply.body.size() / 2);
    }
    if (is(Fault::kCut)) cut = true;
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
  server.Delivered(call);
  return Status::OK();
}

}  // namespace libshard::testing
