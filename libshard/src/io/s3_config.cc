// The client's configuration (s3_client.h: LoadS3Config): the environment and the AWS shared
// config and credentials files.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "io/aws_ini.h"
#include "io/s3_internal.h"
#include "util/env_knobs.h"

namespace libshard::io {

namespace {

using s3_internal::Env;
using s3_internal::Lower;
using s3_internal::Trim;

// An AWS shared config/credentials file (aws_ini.h); a missing or unreadable one is empty.
using IniFile = AwsIni;
IniFile ReadIni(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string text(kMaxIniBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseAwsIni(text);
}

std::string HomeFile(const char* env, const char* name) {
  std::string p = Env(env);
  if (!p.empty()) return p;
  const std::string home = Env("HOME");
  return home.empty() ? std::string() : home + "/.aws/" + name;
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
  // Each setting's error names where its value was read from (the variable or the profile's
  // key that is actually set), not another place that could have set it.
  const std::string in_profile = " of profile '" + profile + "' in " + conf_path;
  std::string endpoint, endpoint_from;
  using Setting = std::pair<std::string, std::string>;  // (value, where it was read from)
  for (const auto& [e, from] : {Setting{Env("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"},
                                Setting{Env("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"},
                                Setting{prof["s3.endpoint_url"], "s3.endpoint_url" + in_profile},
                                Setting{prof["endpoint_url"], "endpoint_url" + in_profile}})
    if (!e.empty()) {
      endpoint = e;
      endpoint_from = from;
      break;
    }
  const bool custom = !endpoint.empty();
  if (!custom) endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (endpoint.find("://") == std::string::npos)
    return Status::InvalidArgument("S3 endpoint '" + endpoint + "' (" +
                                   (custom ? endpoint_from : "AWS_REGION / AWS_DEFAULT_REGION") +
                                   ") needs a scheme (http:// or https://)");
  c.endpoint = endpoint;
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  std::string style = knobs.s3_addressing;  // a word of the table's: checked there
  std::string style_from = "LIBSHARD_S3_ADDRESSING";
  if (style.empty()) {
    style = Lower(prof["s3.addressing_style"]);
    style_from = "s3.addressing_style" + in_profile;
  }
  if (style.empty()) {
    style = Lower(prof["s3_addressing_style"]);
    style_from = "s3_addressing_style" + in_profile;
  }
  if (style == "path") {
    c.path_style = true;
  } else if (style == "virtual") {
    c.path_style = false;
  } else if (style.empty() || style == "auto") {
    c.path_style = custom;
  } else {
    return Status::InvalidArgument(style_from + " = '" + style + "': use path, virtual or auto");
  }
  LIBSHARD_RETURN_IF_ERROR(ReadS3ClientBounds(&c));
  return c;
}

Status ReadS3ClientBounds(S3Config* config) {
  LIBSHARD_ASSIGN_OR_RETURN(const EnvKnobs knobs, ReadEnvKnobs());
  config->max_attempts = static_cast<uint32_t>(knobs.s3_max_attempts);
  config->stall_seconds = static_cast<uint32_t>(knobs.s3_stall_seconds);
  config->request_timeout_seconds = static_cast<uint32_t>(knobs.s3_timeout_seconds);
  config->backoff_ms = static_cast<uint32_t>(knobs.s3_backoff_ms);
  return Status::OK();
}

}  // namespace libshard::io
