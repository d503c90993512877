// Reads of an object's metadata, written once for the controller, the executor, the
// expectations and the node agent. Objects come from the API server, and through it from
// tenants: a missing or mistyped field reads as absent, never throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tj::kube {

// object[key] when it is a string; "" when it is absent, null or of another type, or when
// `object` is not an object.
std::string TextOf(const nlohmann::json& object, const std::string& key);

// metadata, or an empty object when there is none or it is not an object.
const nlohmann::json& MetadataOf(const nlohmann::json& object);

// metadata.deletionTimestamp is set: the object is being deleted (graceful deletion or
// finalizers hold it until it goes).
bool IsBeingDeleted(const nlohmann::json& object);

// metadata.labels[key], "" when absent or not a string.
std::string LabelOf(const nlohmann::json& object, const std::string& key);

}  // namespace tj::kube
