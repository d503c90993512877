#include "trainer/cluster/rendezvous/key_value_store.h"

#include "common/duration_text.h"

namespace tj::cluster {

Status KeysTimedOut(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "\"" : ", \"") + k + "\"";
  return Status::Error("timed out after " + FormatSeconds(timeout) +
                       " waiting for rendezvous keys " + names);
}

Status KeyNotSet(const std::string& key) {
  return Status::Error("rendezvous key \"" + key + "\" is not set");
}

}  // namespace tj::cluster
