#include "kube/resource.h"

#include <cstdio>

namespace tj::kube {

std::string Resource::Path(const std::string& ns, const std::string& name,
                           const std::string& subresource) const {
  std::string p =
      api_version.find('/') == std::string::npos ? "/api/" + api_version : "/apis/" + api_version;
  if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
  p += "/" + plural;
  if (!name.empty()) p += "/" + name;
  if (!subresource.empty()) p += "/" + subresource;
  return p;
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string ObjectKey(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

std::pair<std::string, std::string> SplitObjectKey(const std::string& key) {
  const auto slash = key.find('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

std::string ObjectKey(const nlohmann::json& object) {
  const auto& md = object.contains("metadata") ? object["metadata"] : nlohmann::json::object();
  return ObjectKey(md.value("namespace", ""), md.value("name", ""));
}

}  // namespace tj::kube
