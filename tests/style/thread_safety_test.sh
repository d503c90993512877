#!/usr/bin/env bash
# The lock annotations of common/thread_annotations.h are checked by clang's thread-safety
# analysis (CI runs it through clang-tidy). This test proves the analysis is on and the
# annotations mean what they say: a guarded member touched without its mutex, or a TJ_REQUIRES
# function called without it, must fail to compile; the same code holding the mutex (also
# through a condition variable's wait) must compile. Skips (77) without clang++.
set -euo pipefail
ROOT=${1:?usage: thread_safety_test.sh REPO_ROOT}
command -v clang++ >/dev/null || { echo "SKIP: clang++ is missing (make deps)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

compile() {  # compile NAME BODY: 0 when the snippet passes the analysis
  cat > "$tmp/$1.cpp" <<CPP
#include <condition_variable>
#include "common/thread_annotations.h"
class Counter {
 public:
  $2
 private:
  void BumpLocked() TJ_REQUIRES(mu_) { ++n_; }
  tj::Mutex mu_;
  std::condition_variable_any cv_;
  int n_ TJ_GUARDED_BY(mu_) = 0;
};
int main() { Counter c; c.Run(); }
CPP
  clang++ -std=c++20 -fsyntax-only -Wthread-safety -Werror -I"$ROOT" "$tmp/$1.cpp" \
    > "$tmp/$1.log" 2>&1
}

fail=0
expect() {  # expect ok|error NAME BODY
  local want=$1 name=$2 got=ok
  compile "$name" "$3" || got=error
  if [ "$got" = "$want" ]; then
    echo "ok   $name: $want"
  else
    echo "FAIL $name: expected $want, got $got"
    cat "$tmp/$name.log"
    fail=1
  fi
}

expect error unguarded_write 'void Run() { ++n_; }'
expect error unguarded_read 'void Run() { int x = n_; (void)x; }'
expect error requires_without_lock 'void Run() { BumpLocked(); }'
expect ok locked 'void Run() { tj::MutexLock l(mu_); ++n_; BumpLocked(); }'
expect ok wait_with_predicate \
  'void Run() { tj::MutexLock l(mu_); cv_.wait(l, [this] { mu_.AssertHeld(); return n_ >= 0; }); }'
expect error predicate_without_assertion \
  'void Run() { tj::MutexLock l(mu_); cv_.wait(l, [this] { return n_ >= 0; }); }'
exit $fail
