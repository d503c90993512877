// Fuzz target: DecodeState (trainer/checkpoint/state_file.h), the reader of backups and
// per-epoch checkpoints. The first input byte picks a mode:
//   bit 0 clear: the remaining bytes are the file, as found on disk (the SHA-256 at the end
//                will almost never match, which exercises the "explain the mismatch" path);
//   bit 0 set:   the harness appends the correct SHA-256 of the remaining bytes and their HMAC
//                under kFuzzKey, so the fuzzer reaches the header and tensor checks behind
//                the trailers. A format-1 preamble (the regression inputs of before files
//                were authenticated) is read as the current format, whose header is the same.
// Any bytes must give a state or an error, never a crash; an accepted state must encode
// again and decode to the same state.
#include <cstdint>
#include <cstring>
#include <string>

#include "common/sha256.h"
#include "tests/fuzz/fuzz_check.h"
#include "trainer/checkpoint/state_file.h"

using tj::checkpoint::DecodeState;
using tj::checkpoint::EncodeState;
using tj::checkpoint::TrainingState;

namespace {

constexpr std::string_view kFuzzKey = "fuzz-key";

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool fix_digest = (data[0] & 1) != 0;
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if (fix_digest) {
    if (bytes.size() >= 12 && bytes[8] == 1 && bytes[9] == 0 && bytes[10] == 0 && bytes[11] == 0)
      bytes[8] = static_cast<char>(tj::checkpoint::kStateFileVersion);
    const tj::Digest digest = tj::Sha256Of(bytes.data(), bytes.size());
    bytes.append(reinterpret_cast<const char*>(digest.data()), digest.size());
    const tj::StatusOr<tj::Digest> mac = tj::HmacSha256(kFuzzKey, bytes.data(), bytes.size());
    TJ_FUZZ_CHECK(mac.ok());
    bytes.append(reinterpret_cast<const char*>(mac->data()), mac->size());
  }
  tj::StatusOr<TrainingState> state = DecodeState(bytes, "fuzz.ckpt", kFuzzKey);
  if (!state.ok()) {
    TJ_FUZZ_CHECK(state.status().message().rfind("fuzz.ckpt", 0) == 0);
    return 0;
  }
  // Whatever was accepted must round-trip (EncodeState refuses only duplicate tensor names).
  tj::StatusOr<std::string> again = EncodeState(*state, kFuzzKey);
  if (!again.ok()) return 0;
  tj::StatusOr<TrainingState> back = DecodeState(*again, "fuzz.ckpt (re-encoded)", kFuzzKey);
  TJ_FUZZ_CHECK(back.ok());
  TJ_FUZZ_CHECK(back->epoch == state->epoch && back->step == state->step);
  TJ_FUZZ_CHECK(back->optimizer_iterations == state->optimizer_iterations);
  TJ_FUZZ_CHECK(back->seed == state->seed);
  // Compared as text: a number beyond double's range parses as inf and is written as null.
  TJ_FUZZ_CHECK(back->fingerprint.dump() == state->fingerprint.dump());
  TJ_FUZZ_CHECK(back->extra.dump() == state->extra.dump());
  TJ_FUZZ_CHECK(back->tensors.size() == state->tensors.size());
  for (size_t i = 0; i < state->tensors.size(); ++i) {
    TJ_FUZZ_CHECK(back->tensors[i].first == state->tensors[i].first);
    TJ_FUZZ_CHECK(SameBits(back->tensors[i].second, state->tensors[i].second));
  }
  TJ_FUZZ_CHECK(!tj::checkpoint::DescribeMismatch(back->fingerprint, back->fingerprint));
  (void)tj::checkpoint::DescribeMismatch(state->fingerprint, state->extra);
  return 0;
}
