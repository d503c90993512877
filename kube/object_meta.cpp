#include "kube/object_meta.h"

namespace tj::kube {

std::string TextOf(const nlohmann::json& object, const std::string& key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

const nlohmann::json& MetadataOf(const nlohmann::json& object) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!object.is_object()) return kEmpty;
  auto it = object.find("metadata");
  return it != object.end() && it->is_object() ? *it : kEmpty;
}

bool IsBeingDeleted(const nlohmann::json& object) {
  const nlohmann::json& md = MetadataOf(object);
  auto it = md.find("deletionTimestamp");
  return it != md.end() && !it->is_null();
}

std::string LabelOf(const nlohmann::json& object, const std::string& key) {
  const nlohmann::json& md = MetadataOf(object);
  auto labels = md.find("labels");
  return labels != md.end() ? TextOf(*labels, key) : "";
}

}  // namespace tj::kube
