#include "kube/server_version.h"

#include <cctype>
#include <charconv>

namespace tj::kube {
namespace {

// Reads the decimal number at text[*pos]; false when there is none or it does not fit.
bool ReadNumber(const std::string& text, size_t* pos, int* out) {
  const char* begin = text.data() + *pos;
  const char* end = text.data() + text.size();
  if (begin == end || std::isdigit(static_cast<unsigned char>(*begin)) == 0) return false;
  auto [ptr, ec] = std::from_chars(begin, end, *out);
  if (ec != std::errc()) return false;
  *pos += static_cast<size_t>(ptr - begin);
  return true;
}

Status NotAVersion(const std::string& text) {
  return Status::Error("\"" + text.substr(0, 80) +
                       "\" is not a Kubernetes version (expected major.minor[.patch], "
                       "such as v1.37.2)");
}

}  // namespace

ServerVersion MinimumServerVersion() {
  return {kMinimumMajor, kMinimumMinor, 0,
          "v" + std::to_string(kMinimumMajor) + "." + std::to_string(kMinimumMinor) + ".0"};
}

StatusOr<ServerVersion> ParseVersion(const std::string& text) {
  ServerVersion v;
  v.text = text;
  size_t pos = !text.empty() && text[0] == 'v' ? 1 : 0;
  if (!ReadNumber(text, &pos, &v.major)) return NotAVersion(text);
  if (pos >= text.size() || text[pos] != '.') return NotAVersion(text);
  ++pos;
  if (!ReadNumber(text, &pos, &v.minor)) return NotAVersion(text);
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    if (!ReadNumber(text, &pos, &v.patch)) return NotAVersion(text);
  }
  // What may follow: a pre-release or a vendor's build ("-gke.1", "+k3s1", "-rc.0").
  if (pos < text.size() && text[pos] != '-' && text[pos] != '+') return NotAVersion(text);
  return v;
}

StatusOr<ServerVersion> ParseVersionInfo(const nlohmann::json& info) {
  if (!info.is_object()) return Status::Error("the answer of GET /version is not an object");
  if (auto g = info.find("gitVersion"); g != info.end() && g->is_string()) {
    auto v = ParseVersion(g->get<std::string>());
    if (v.ok()) return v;
  }
  // A server without a usable gitVersion: major and minor, digits first ("31+" is 31).
  auto number = [&info](const char* key, int* out) {
    auto it = info.find(key);
    if (it == info.end() || !it->is_string()) return false;
    const std::string s = it->get<std::string>();
    size_t pos = 0;
    return ReadNumber(s, &pos, out);
  };
  ServerVersion v;
  if (!number("major", &v.major) || !number("minor", &v.minor)) {
    return Status::Error("the answer of GET /version names no version (gitVersion " +
                         info.value("gitVersion", nlohmann::json()).dump() + ", major " +
                         info.value("major", nlohmann::json()).dump() + ", minor " +
                         info.value("minor", nlohmann::json()).dump() + ")");
  }
  v.text = v.Minor();
  return v;
}

Status CheckServerVersion(const ServerVersion& server, const ServerVersion& minimum) {
  if (server >= minimum) return Status::Ok();
  return Status::Error(
      "the API server runs Kubernetes " + server.text + "; this operator needs Kubernetes " +
      minimum.Minor() +
      " or newer (CRD validation rules, spec.managedBy as batch/v1 Job's, pods' "
      "DisruptionTarget condition): upgrade the cluster, or run an operator release that "
      "supports " +
      server.Minor() + " (docs/deploy.md lists the supported versions)");
}

StatusOr<ServerVersion> ReadServerVersion(Client* client) {
  auto answer = client->Raw("GET", "/version");
  if (!answer.ok())
    return answer.error().ToStatus().WithContext("reading the API server's version");
  auto v = ParseVersionInfo(*answer);
  if (!v.ok()) return v.status().WithContext("reading the API server's version");
  return v;
}

StatusOr<bool> Serves(Client& client, const Resource& r) {
  const std::string path = r.api_version.find('/') == std::string::npos ? "/api/" + r.api_version
                                                                        : "/apis/" + r.api_version;
  auto got = client.Raw("GET", path);
  if (!got.ok()) {
    if (IsNotFound(got.error())) return false;
    return got.error().ToStatus().WithContext("discovering " + r.api_version);
  }
  for (const nlohmann::json& res : got->value("resources", nlohmann::json::array())) {
    if (res.is_object() && res.value("name", "") == r.plural) return true;
  }
  return false;
}

}  // namespace tj::kube
