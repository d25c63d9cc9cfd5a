// The client's configuration (s3_client.h: LoadS3Config): the environment and the AWS shared
// config and credentials files.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "io/s3_internal.h"

namespace libshard::io {

namespace {

using s3_internal::Env;
using s3_internal::Lower;
using s3_internal::Trim;

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

}  // namespace

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

}  // namespace libshard::io
