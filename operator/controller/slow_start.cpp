#include "operator/controller/slow_start.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace tj::controller {
namespace {

// Runs tasks[begin, end) on at most `parallel` threads (the caller's among them), each taking
// the next task not yet taken; after a failure no thread takes another. Returns the first
// failure in task order among those that ran, or Ok.
Status RunBatch(const std::vector<std::function<Status()>>& tasks, size_t begin, size_t end,
                size_t parallel) {
  std::vector<Status> results(end - begin);
  std::atomic<size_t> next{begin};
  std::atomic<bool> failed{false};
  auto work = [&] {
    for (size_t i = next++; i < end && !failed.load(); i = next++) {
      results[i - begin] = tasks[i]();
      if (!results[i - begin].ok()) failed = true;
    }
  };
  {
    std::vector<std::jthread> others;
    const size_t threads = std::min(end - begin, parallel);
    others.reserve(threads - 1);
    for (size_t t = 1; t < threads; ++t) others.emplace_back(work);
    work();
  }  // joins the others
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

Status RunSlowStart(const std::vector<std::function<Status()>>& tasks, size_t first_batch,
                    size_t max_parallel) {
  size_t batch = first_batch == 0 ? tasks.size() : first_batch;
  const size_t parallel = std::max<size_t>(1, max_parallel);
  for (size_t begin = 0; begin < tasks.size(); begin += batch, batch *= 2) {
    const size_t end = std::min(tasks.size(), begin + batch);
    TJ_RETURN_IF_ERROR(RunBatch(tasks, begin, end, parallel));
  }
  return Status::Ok();
}

}  // namespace tj::controller
