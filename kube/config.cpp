#include "kube/config.h"

#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tj::kube {
namespace {

namespace fs = std::filesystem;

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute() || base_dir.empty()) return p;
  return (fs::path(base_dir) / p).string();
}

// Finds the entry named `name` in a kubeconfig list (clusters, users, contexts).
YAML::Node FindNamed(const YAML::Node& list, const std::string& name) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const auto& item : list) {
    if (item["name"] && item["name"].as<std::string>() == name) return item;
  }
  return YAML::Node();
}

std::string Str(const YAML::Node& n, const char* key) {
  return n && n[key] && n[key].IsScalar() ? n[key].as<std::string>() : std::string();
}

// Reads `<key>-data` (base64) or `<key>` (a file) into `out`.
Status DataOrFile(const YAML::Node& n, const std::string& key, const std::string& base_dir,
                  std::string* out) {
  std::string data = Str(n, (key + "-data").c_str());
  if (!data.empty()) {
    auto decoded = Base64Decode(data);
    if (!decoded) return Status::Error(key + "-data is not valid base64");
    *out = *decoded;
    return Status::Ok();
  }
  std::string file = Str(n, key.c_str());
  if (file.empty()) return Status::Ok();
  auto content = ReadFile(Resolve(base_dir, file));
  if (!content.ok()) return content.status().WithContext(key);
  *out = *content;
  return Status::Ok();
}

StatusOr<RestConfig> ParseKubeconfigOrThrow(std::string_view yaml, const std::string& base_dir,
                                            const std::string& context_name) {
  YAML::Node root = YAML::Load(std::string(yaml));
  if (!root.IsMap()) return Status::Error("not a kubeconfig (expected a YAML mapping)");
  std::string ctx_name = context_name.empty() ? Str(root, "current-context") : context_name;
  if (ctx_name.empty()) return Status::Error("no current-context set and no context given");
  YAML::Node ctx = FindNamed(root["contexts"], ctx_name)["context"];
  if (!ctx) return Status::Error("context \"" + ctx_name + "\" not found");
  std::string cluster_name = Str(ctx, "cluster");
  YAML::Node cluster = FindNamed(root["clusters"], cluster_name)["cluster"];
  if (!cluster) {
    return Status::Error("cluster \"" + cluster_name + "\" of context \"" + ctx_name +
                         "\" not found");
  }
  RestConfig c;
  c.server = Str(cluster, "server");
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (c.server.empty()) return Status::Error("cluster \"" + cluster_name + "\" has no server");
  if (c.server.rfind("https://", 0) != 0 && c.server.rfind("http://", 0) != 0) {
    return Status::Error("cluster \"" + cluster_name + "\": server \"" + c.server +
                         "\" must start with https:// or http://");
  }
  c.insecure_skip_tls_verify = Str(cluster, "insecure-skip-tls-verify") == "true";
  TJ_RETURN_IF_ERROR(DataOrFile(cluster, "certificate-authority", base_dir, &c.ca_pem)
                         .WithContext("cluster \"" + cluster_name + "\""));
  std::string ns = Str(ctx, "namespace");
  if (!ns.empty()) c.default_namespace = ns;

  std::string user_name = Str(ctx, "user");
  if (!user_name.empty()) {
    YAML::Node user = FindNamed(root["users"], user_name)["user"];
    if (!user) {
      return Status::Error("user \"" + user_name + "\" of context \"" + ctx_name + "\" not found");
    }
    std::string where = "user \"" + user_name + "\"";
    c.bearer_token = Str(user, "token");
    c.token_file = Resolve(base_dir, Str(user, "tokenFile"));
    TJ_RETURN_IF_ERROR(
        DataOrFile(user, "client-certificate", base_dir, &c.client_cert_pem).WithContext(where));
    TJ_RETURN_IF_ERROR(
        DataOrFile(user, "client-key", base_dir, &c.client_key_pem).WithContext(where));
    if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
      return Status::Error(where + ": a client certificate needs a client key and vice versa");
    }
    // client-go sends a token over plain http; we do not: anyone on the path could replay it.
    if ((!c.bearer_token.empty() || !c.token_file.empty()) && c.server.rfind("http://", 0) == 0) {
      return Status::Error(where + ": a bearer token is sent only over https, and the server " +
                           c.server + " is http://; use the https address of the API server");
    }
    if (user["exec"] || user["auth-provider"]) {
      if (c.bearer_token.empty() && c.token_file.empty() && c.client_cert_pem.empty()) {
        return Status::Error(where +
                             ": exec and auth-provider credentials are not supported; use a "
                             "token, tokenFile or client certificate");
      }
    }
  }
  return c;
}

}  // namespace

Environment ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): read-only use
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::optional<std::string> Base64Decode(std::string_view in) {
  std::string s;
  for (char ch : in) {
    if (ch != '\n' && ch != '\r' && ch != ' ') s.push_back(ch);
  }
  while (s.size() % 4 != 0) s.push_back('=');
  std::string out(s.size() / 4 * 3, '\0');
  int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return std::nullopt;
  size_t pad = 0;
  for (size_t i = s.size(); i > 0 && s[i - 1] == '='; --i) ++pad;
  out.resize(static_cast<size_t>(n) - std::min<size_t>(pad, 2));
  return out;
}

std::string Base64Encode(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

StatusOr<RestConfig> ParseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                     const std::string& context) {
  try {
    return ParseKubeconfigOrThrow(yaml, base_dir, context);
  } catch (const YAML::Exception& e) {
    return Status::Error(std::string("kubeconfig is not valid YAML: ") + e.what());
  }
}

StatusOr<RestConfig> LoadKubeconfigFile(const std::string& path, const std::string& context) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status().WithContext("loading kubeconfig");
  auto c = ParseKubeconfig(*text, fs::path(path).parent_path().string(), context);
  if (!c.ok()) return c.status().WithContext("kubeconfig " + path);
  return c;
}

StatusOr<RestConfig> InClusterConfig(const Environment& env, const std::string& sa_dir) {
  auto host = env("KUBERNETES_SERVICE_HOST");
  auto port = env("KUBERNETES_SERVICE_PORT");
  if (!host || !port || host->empty() || port->empty()) {
    return Status::Error(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are "
        "not set");
  }
  RestConfig c;
  bool ipv6 = host->find(':') != std::string::npos && host->front() != '[';
  c.server = "https://" + (ipv6 ? "[" + *host + "]" : *host) + ":" + *port;
  c.token_file = sa_dir + "/token";
  auto token = ReadFile(c.token_file);
  if (!token.ok()) return token.status().WithContext("in-cluster service-account token");
  auto ca = ReadFile(sa_dir + "/ca.crt");
  if (!ca.ok()) return ca.status().WithContext("in-cluster CA bundle");
  c.ca_pem = *ca;
  auto ns = ReadFile(sa_dir + "/namespace");
  if (ns.ok() && !ns->empty()) {
    std::string n = *ns;
    while (!n.empty() && (n.back() == '\n' || n.back() == ' ')) n.pop_back();
    c.default_namespace = n;
  }
  return c;
}

StatusOr<RestConfig> LoadConfig(const std::string& kubeconfig_flag, const Environment& env) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfigFile(kubeconfig_flag);
  std::string tried;
  if (auto list = env("KUBECONFIG"); list && !list->empty()) {
    std::stringstream ss(*list);
    std::string path;
    while (std::getline(ss, path, ':')) {
      if (path.empty()) continue;
      std::error_code ec;
      if (fs::exists(path, ec)) return LoadKubeconfigFile(path);
    }
    tried += "$KUBECONFIG=" + *list + " (no such file); ";
  }
  if (auto home = env("HOME"); home && !home->empty()) {
    std::string path = *home + "/.kube/config";
    std::error_code ec;
    if (fs::exists(path, ec)) return LoadKubeconfigFile(path);
    tried += path + " (no such file); ";
  }
  auto in_cluster = InClusterConfig(env);
  if (in_cluster.ok()) return in_cluster;
  return Status::Error("no Kubernetes configuration found: tried " + tried +
                       in_cluster.status().message() +
                       ". Pass --kubeconfig or set KUBECONFIG (hack/local-cluster.sh up writes "
                       ".local-cluster/kubeconfig)");
}

}  // namespace tj::kube
