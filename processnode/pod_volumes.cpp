// The pod worker's volumes: Secret, ConfigMap, projected (with service-account tokens it
// renews), downward API, hostPath, emptyDir and PersistentVolumeClaim directories.
#include <filesystem>
#include <fstream>
#include <thread>

#include "kube/config.h"
#include "processnode/node_agent.h"
#include "processnode/pod_worker.h"
#include "processnode/service_account.h"

namespace tj::processnode {

namespace fs = std::filesystem;
namespace res = kube::resources;

Status WriteVolumeFile(const std::string& path, const std::string& content) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << content;
    if (!out.good()) return Status::Error("writing " + tmp + ": check the node's state directory");
  }
  fs::rename(tmp, path, ec);
  if (ec) return Status::Error("renaming " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

StatusOr<std::string> PodWorker::Lookup(const std::string& kind, const std::string& name,
                                        const std::string& key) {
  const auto& r = kind == "Secret" ? res::kSecrets : res::kConfigMaps;
  auto obj = context_.client->Get(r, namespace_, name);
  if (!obj.ok()) return obj.error().ToStatus();
  const json data = obj->value("data", json::object());
  if (!data.contains(key)) return Status::Error(kind + " " + name + " has no key " + key);
  std::string v = data[key].get<std::string>();
  if (kind == "Secret") {
    auto d = kube::Base64Decode(v);
    if (!d) return Status::Error(kind + " " + name + " key " + key + " is not base64");
    v = *d;
  }
  return v;
}

StatusOr<std::string> PodWorker::PrepareVolume(const json& v) {
  const std::string name = v.value("name", "");
  std::error_code ec;
  if (v.contains("hostPath")) {
    std::string p = v["hostPath"].value("path", "");
    fs::create_directories(p, ec);
    return p;
  }
  if (v.contains("persistentVolumeClaim")) {
    std::string p = context_.options->state_dir + "/pvc/" + namespace_ + "/" +
                    v["persistentVolumeClaim"].value("claimName", "");
    fs::create_directories(p, ec);
    return p;
  }
  std::string dir = dir_ + "/volumes/" + name;
  fs::create_directories(dir, ec);
  if (v.contains("projected")) {
    for (const auto& source : v["projected"].value("sources", json::array())) {
      Status s = WriteProjection(dir, source);
      if (!s.ok()) return s.WithContext("projected volume " + name);
    }
    return dir;
  }
  for (const char* kind : {"secret", "configMap"}) {
    if (!v.contains(kind)) continue;
    std::string obj_name = v[kind].value(std::string(kind) == "secret" ? "secretName" : "name", "");
    const auto& r = std::string(kind) == "secret" ? res::kSecrets : res::kConfigMaps;
    auto obj = context_.client->Get(r, namespace_, obj_name);
    if (!obj.ok()) {
      if (v[kind].value("optional", false)) return dir;
      return obj.error().ToStatus().WithContext("volume " + name);
    }
    // Held here: ranging over items() of value()'s temporary would read it after its end.
    const json data = obj->value("data", json::object());
    for (const auto& [k, val] : data.items()) {
      if (!val.is_string()) {
        return Status::Error("volume " + name + ": " + kind + " " + obj_name + " key " + k +
                             " is not a string");
      }
      std::string content = val.get<std::string>();
      if (std::string(kind) == "secret") content = kube::Base64Decode(content).value_or("");
      std::ofstream(dir + "/" + k, std::ios::trunc) << content;
    }
  }
  return dir;
}

StatusOr<json> PodWorker::ObjectData(const std::string& kind, const std::string& obj_name) {
  const auto& r = kind == "secret" ? res::kSecrets : res::kConfigMaps;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto obj = context_.client->Get(r, namespace_, obj_name);
    if (obj.ok()) {
      json data = obj->value("data", json::object());
      if (kind == "secret") {
        for (auto& [k, val] : data.items()) {
          val = kube::Base64Decode(val.get<std::string>()).value_or("");
        }
      }
      return data;
    }
    if (!kube::IsNotFound(obj.error()) || obj_name != "kube-root-ca.crt" ||
        std::chrono::steady_clock::now() >= deadline) {
      return obj.error().ToStatus().WithContext(kind + " " + namespace_ + "/" + obj_name);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Status PodWorker::WriteProjection(const std::string& dir, const json& source) {
  for (const char* kind : {"secret", "configMap"}) {
    if (!source.contains(kind)) continue;
    const json& src = source[kind];
    auto data = ObjectData(kind, src.value("name", ""));
    if (!data.ok()) {
      if (src.value("optional", false)) return Status::Ok();
      return data.status();
    }
    if (src.contains("items")) {
      for (const auto& item : src["items"]) {
        const std::string key = item.value("key", "");
        if (!data->contains(key)) {
          if (src.value("optional", false)) continue;
          return Status::Error(std::string(kind) + " " + namespace_ + "/" + src.value("name", "") +
                               " has no key " + key);
        }
        TJ_RETURN_IF_ERROR(
            WriteVolumeFile(dir + "/" + item.value("path", key), (*data)[key].get<std::string>()));
      }
    } else {
      for (const auto& [k, val] : data->items()) {
        TJ_RETURN_IF_ERROR(WriteVolumeFile(dir + "/" + k, val.get<std::string>()));
      }
    }
  }
  if (source.contains("downwardAPI")) {
    for (const auto& item : source["downwardAPI"].value("items", json::array())) {
      if (!item.contains("fieldRef")) {
        return Status::Error("downwardAPI item " + item.value("path", "") +
                             ": only fieldRef is supported by the process node");
      }
      auto value = PodFieldValue(pod_, item["fieldRef"].value("fieldPath", ""), pod_ip_,
                                 context_.options->node_name);
      if (!value.ok()) return value.status();
      TJ_RETURN_IF_ERROR(WriteVolumeFile(dir + "/" + item.value("path", ""), *value));
    }
  }
  if (source.contains("serviceAccountToken")) {
    TokenFile t{dir + "/" + source["serviceAccountToken"].value("path", "token"),
                source["serviceAccountToken"],
                {}};
    TJ_RETURN_IF_ERROR(RequestToken(&t));
    tokens_.push_back(std::move(t));
  }
  return Status::Ok();
}

Status PodWorker::RequestToken(TokenFile* t) {
  json body = TokenRequestBody(pod_, t->projection);
  const std::string path = TokenRequestPath(pod_);
  auto r = context_.client->Raw("POST", path, body);
  if (!r.ok()) {
    return r.error().ToStatus().WithContext(
        "requesting a service-account token (POST " + path +
        "); does the ServiceAccount exist, and does the API server have "
        "--service-account-signing-key-file?");
  }
  const std::string token = r->value("status", json::object()).value("token", "");
  if (token.empty()) return Status::Error("TokenRequest " + path + " returned no token");
  TJ_RETURN_IF_ERROR(WriteVolumeFile(t->path, token));
  const auto lifetime = std::chrono::seconds(body["spec"].value("expirationSeconds", 3600));
  t->refresh_at = context_.clock->Now() + TokenRefreshAfter(lifetime);
  return Status::Ok();
}

void PodWorker::RefreshTokens() {
  const auto now = context_.clock->Now();
  for (auto& t : tokens_) {
    if (now < t.refresh_at) continue;
    Status s = RequestToken(&t);
    if (!s.ok()) {
      Warn("renewing the service-account token " + t.path + ": " + s.message());
      t.refresh_at = now + std::chrono::seconds(10);
    }
  }
}

}  // namespace tj::processnode
