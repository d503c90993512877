#include "operator/controller/slow_start.h"

#include <algorithm>
#include <thread>

namespace tj::controller {

Status RunSlowStart(const std::vector<std::function<Status()>>& tasks, size_t first_batch) {
  size_t batch = first_batch == 0 ? tasks.size() : first_batch;
  for (size_t begin = 0; begin < tasks.size(); begin += batch, batch *= 2) {
    const size_t end = std::min(tasks.size(), begin + batch);
    std::vector<Status> results(end - begin);
    {
      std::vector<std::jthread> others;
      others.reserve(end - begin - 1);
      for (size_t i = begin + 1; i < end; ++i) {
        others.emplace_back([&tasks, &results, begin, i] { results[i - begin] = tasks[i](); });
      }
      results[0] = tasks[begin]();
    }  // joins the others
    for (const Status& s : results) {
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace tj::controller
