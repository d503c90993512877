#!/usr/bin/env bash
# Secrets and nonces (a job's rendezvous key, the handshakes' nonces) come from getrandom(2)
# through common/secure_random.h, never from std::random_device, whose source the C++
# standard leaves to the library (it may be a deterministic engine). Fails naming each use in
# the sources, comments aside.
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$ROOT"
uses=$(grep -rnE --include='*.cpp' --include='*.h' --include='*.cu' --include='*.cuh' \
  'std::random_device' common kube operator trainer processnode 2>/dev/null |
  grep -vE '^[^:]+:[0-9]+:\s*//' || true)
if [ -n "$uses" ]; then
  echo "$uses"
  echo "FAIL std::random_device above: use tj::SecureRandomBytes / tj::SecureRandomHex" \
    "(common/secure_random.h) for anything secret, a seeded engine for anything else"
  exit 1
fi
echo "ok   no std::random_device in common/, kube/, operator/, trainer/, processnode/"
