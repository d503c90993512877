#include "trainer/cluster/wire/authentication.h"

#include <openssl/crypto.h>

#include "common/secure_random.h"
#include "common/sha256.h"

namespace tj::cluster {

StatusOr<Mac> MacOf(std::string_view key, std::string_view message) {
  return HmacSha256(key, message.data(), message.size());
}

bool MacEquals(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

StatusOr<Nonce> NewNonce() {
  // From the kernel's CSPRNG (which seeds OpenSSL's too), not RAND_bytes: in a connection's
  // thread RAND_bytes makes per-thread generators that OpenSSL 3.0 sometimes fails to free at
  // thread exit (LeakSanitizer, about 1 in 30 runs of the rendezvous fuzz replay).
  Nonce c{};
  if (Status s = SecureRandomBytes(c.data(), c.size()); !s.ok()) {
    return s.WithContext("cannot make a handshake nonce");
  }
  return c;
}

}  // namespace tj::cluster
