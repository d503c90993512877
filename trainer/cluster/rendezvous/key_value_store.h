// The store the rendezvous shares among the processes of one collective: a string -> bytes map
// that the chief serves (rendezvous_server.h) and the other tasks reach through a session
// (rendezvous_client.h). Gloo's bootstrap, the ring's and the health responders' addresses go
// through it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::cluster {

// Implementations are thread-safe.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // Sets (or overwrites) key.
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // The value of key; an error if the key is not set.
  virtual StatusOr<std::string> Get(const std::string& key) = 0;
  // Returns when every key is set, or an error naming the missing keys after `timeout`.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// Wait's error: `keys` were not all set within `timeout`.
Status KeysTimedOut(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
// Get's error: `key` is not set.
Status KeyNotSet(const std::string& key);

}  // namespace tj::cluster
