// Lock annotations that clang checks (-Wthread-safety; CI runs them through clang-tidy's
// clang-diagnostic-thread-safety checks) and other compilers ignore, as LevelDB and Abseil
// use them: a member written TJ_GUARDED_BY(mu_) may only be touched while mu_ is held, a
// function marked TJ_REQUIRES(mu_) only called with it held. tj::Mutex is a std::mutex the
// analysis knows as a capability; tj::MutexLock holds one for a scope.
#pragma once

#include <mutex>

#if defined(__clang__)
#define TJ_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TJ_THREAD_ANNOTATION(x)
#endif

#define TJ_CAPABILITY(name) TJ_THREAD_ANNOTATION(capability(name))
#define TJ_SCOPED_CAPABILITY TJ_THREAD_ANNOTATION(scoped_lockable)
#define TJ_GUARDED_BY(mu) TJ_THREAD_ANNOTATION(guarded_by(mu))
#define TJ_REQUIRES(...) TJ_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TJ_EXCLUDES(...) TJ_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TJ_ACQUIRE(...) TJ_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TJ_RELEASE(...) TJ_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TJ_ASSERT_CAPABILITY(mu) TJ_THREAD_ANNOTATION(assert_capability(mu))

namespace tj {

class TJ_CAPABILITY("mutex") Mutex {
 public:
  void lock() TJ_ACQUIRE() { mu_.lock(); }
  void unlock() TJ_RELEASE() { mu_.unlock(); }
  // For code the analysis cannot follow (a condition variable's predicate): states that the
  // caller holds the mutex.
  void AssertHeld() const TJ_ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mu_;
};

// Holds `mu` from construction to destruction. Also a Lockable (lock/unlock), so that a
// std::condition_variable_any can release and retake it while waiting.
class TJ_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TJ_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() TJ_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void lock() TJ_ACQUIRE() { mu_.lock(); }
  void unlock() TJ_RELEASE() { mu_.unlock(); }

 private:
  Mutex& mu_;
};

}  // namespace tj
