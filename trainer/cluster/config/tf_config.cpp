#include "trainer/cluster/config/tf_config.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

namespace tj::cluster {
namespace {

constexpr std::string_view kExample =
    R"({"cluster":{"worker":["host0:2222","host1:2222"]},"task":{"type":"worker","index":0}})";

std::string Quote(std::string_view s) {
  std::string q(1, '"');
  q.append(s);
  q.push_back('"');
  return q;
}

bool ParseTaskType(std::string_view name, TaskType* type) {
  static constexpr std::pair<std::string_view, TaskType> kTypes[] = {
      {"chief", TaskType::kChief},
      {"worker", TaskType::kWorker},
      {"ps", TaskType::kPs},
      {"evaluator", TaskType::kEvaluator}};
  for (const auto& [n, t] : kTypes) {
    if (n == name) {
      *type = t;
      return true;
    }
  }
  return false;
}

const std::vector<std::string>& TasksOf(const TfConfig& c, TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return c.chief;
    case TaskType::kWorker:
      return c.worker;
    case TaskType::kPs:
      return c.ps;
    case TaskType::kEvaluator:
      return c.evaluator;
  }
  return c.worker;
}

std::vector<std::string>& TasksOf(TfConfig& c, TaskType type) {
  return const_cast<std::vector<std::string>&>(TasksOf(static_cast<const TfConfig&>(c), type));
}

// A cluster job's tasks as a list: ClusterSpec takes a list, or an object of task index ->
// address ({"0":"a:1","1":"b:1"}, JSON's keys being strings that ClusterSpec reads with int()).
// The collective's ranks need indices 0..n-1, so a gap is an error naming the missing index.
StatusOr<nlohmann::json> TaskList(const nlohmann::json& job, const std::string& field) {
  if (job.is_array()) return job;
  if (!job.is_object()) {
    return Status::Error(field +
                         " must be a list of \"host:port\" strings (or an object of "
                         "task index -> \"host:port\")");
  }
  std::map<int64_t, nlohmann::json> by_index;
  for (auto it = job.begin(); it != job.end(); ++it) {
    int64_t index = -1;
    const std::string& key = it.key();
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), index);
    if (ec != std::errc() || end != key.data() + key.size() || index < 0 || index > 1000000) {
      return Status::Error(field + ": task index " + Quote(key) + " is not a non-negative integer");
    }
    by_index[index] = *it;
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [index, address] : by_index) {
    if (index != static_cast<int64_t>(list.size())) {
      return Status::Error(field + " has no task " + std::to_string(list.size()) +
                           ": MultiWorkerMirroredStrategy numbers its tasks 0..n-1 without gaps");
    }
    list.push_back(address);
  }
  return list;
}

// What to say of a task type TensorFlow does not know: the usual mistakes get their fix.
std::string UnknownTypeHint(const std::string& type) {
  std::string lower = type;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "master") {
    return "; TensorFlow 2 calls the master \"chief\": use chief, worker or evaluator";
  }
  if (lower != type &&
      (lower == "chief" || lower == "worker" || lower == "evaluator" || lower == "ps")) {
    return "; task types are lower case: use \"" + lower + "\" (Kubeflow's replica type " + type +
           " becomes " + lower + " in TF_CONFIG)";
  }
  return "; use chief, worker or evaluator";
}

// task.index as TensorFlow reads it: int(task["index"]) in Python. Sets *index, or says why not.
Status ReadTaskIndex(const nlohmann::json& value, int64_t* index) {
  const std::string bad =
      "TF_CONFIG.task.index must be a non-negative integer, not " + value.dump();
  if (value.is_number_integer()) {
    *index = value.get<int64_t>();
  } else if (value.is_number_float()) {  // int(2.0) == 2; int(1.5) == 1 (truncates)
    const double d = value.get<double>();
    if (!(d > -1.0 && d < 1e7)) return Status::Error(bad);
    *index = static_cast<int64_t>(d);
  } else if (value.is_boolean()) {  // int(True) == 1
    *index = value.get<bool>() ? 1 : 0;
  } else if (value.is_string()) {  // int(" 2 "), int("+2"): a decimal integer, blanks around
    std::string s = value.get<std::string>();
    const size_t first = s.find_first_not_of(" \t\n\r");
    const size_t last = s.find_last_not_of(" \t\n\r");
    s = first == std::string::npos ? "" : s.substr(first, last - first + 1);
    if (!s.empty() && s[0] == '+') s.erase(0, 1);
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *index);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return Status::Error(bad);
  } else {
    return Status::Error(bad);
  }
  if (*index < 0) return Status::Error(bad);
  return Status::Ok();
}

Status ParseCluster(const nlohmann::json& cluster, TfConfig* config) {
  if (!cluster.is_object()) {
    return Status::Error("TF_CONFIG.cluster must be an object of task type -> list of host:port");
  }
  // Every address once: address -> where it was first seen.
  std::map<std::string, std::string> seen;
  for (auto it = cluster.begin(); it != cluster.end(); ++it) {
    const std::string field = "TF_CONFIG.cluster." + it.key();
    TaskType type;
    if (!ParseTaskType(it.key(), &type)) {
      std::string hint = UnknownTypeHint(it.key());
      if (hint == "; use chief, worker or evaluator") hint = "; use chief, worker, ps or evaluator";
      return Status::Error(field + ": unknown task type " + Quote(it.key()) + hint);
    }
    StatusOr<nlohmann::json> list = TaskList(*it, field);
    if (!list.ok()) return list.status();
    std::vector<std::string>& tasks = TasksOf(*config, type);
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string where = field + "[" + std::to_string(i) + "]";
      const nlohmann::json& entry = (*list)[i];
      if (!entry.is_string()) {
        return Status::Error(where + " must be a \"host:port\" string, not " + entry.dump());
      }
      const std::string address = entry.get<std::string>();
      StatusOr<HostPort> hp = ParseHostPort(address, where);
      if (!hp.ok()) return hp.status();
      auto [prev, inserted] = seen.emplace(address, where);
      if (!inserted) {
        return Status::Error(where + " " + Quote(address) + " duplicates " + prev->second +
                             "; every task needs its own host:port");
      }
      tasks.push_back(address);
    }
  }
  if (config->chief.size() > 1) {
    return Status::Error("TF_CONFIG.cluster.chief has " + std::to_string(config->chief.size()) +
                         " entries; at most one chief is allowed");
  }
  if (config->evaluator.size() > 1) {
    return Status::Error("TF_CONFIG.cluster.evaluator has " +
                         std::to_string(config->evaluator.size()) +
                         " entries; at most one evaluator is allowed");
  }
  if (config->chief.empty() && config->worker.empty()) {
    return Status::Error("TF_CONFIG.cluster has no chief and no worker; list at least one worker");
  }
  return Status::Ok();
}

Status ParseTask(const nlohmann::json& root, TfConfig* config) {
  auto task_it = root.find("task");
  if (task_it == root.end()) {
    return Status::Error(
        std::string("TF_CONFIG has no task; add \"task\":{\"type\":\"worker\","
                    "\"index\":N} naming this process's entry in the cluster"));
  }
  const nlohmann::json& task = *task_it;
  if (!task.is_object()) {
    return Status::Error("TF_CONFIG.task must be an object like {\"type\":\"worker\",\"index\":0}");
  }
  auto type_it = task.find("type");
  if (type_it == task.end() || !type_it->is_string()) {
    return Status::Error(
        "TF_CONFIG.task.type is missing or not a string; use chief, worker or evaluator");
  }
  const std::string type_name = type_it->get<std::string>();
  if (!ParseTaskType(type_name, &config->task_type)) {
    return Status::Error("TF_CONFIG.task.type " + Quote(type_name) + " is unknown" +
                         UnknownTypeHint(type_name));
  }
  if (config->task_type == TaskType::kPs) {
    return Status::Error(
        "TF_CONFIG.task.type \"ps\": parameter servers are not supported (tj-trainer trains "
        "with synchronous all-reduce, like MultiWorkerMirroredStrategy); run chief/worker "
        "tasks only");
  }
  // A missing index is 0, as TensorFlow's RunConfig reads it.
  config->task_index = 0;
  auto index_it = task.find("index");
  if (index_it != task.end()) {
    int64_t index = 0;
    TJ_RETURN_IF_ERROR(ReadTaskIndex(*index_it, &index));
    config->task_index = index > 1000000 ? 1000000 : static_cast<int>(index);
  }
  const size_t count = TasksOf(*config, config->task_type).size();
  // An evaluator takes no part in the cluster: TensorFlow accepts it without a cluster entry,
  // and Kubeflow's TFJob writes none.
  if (config->task_type == TaskType::kEvaluator && count == 0) return Status::Ok();
  if (static_cast<size_t>(config->task_index) >= count) {
    if (count == 0) {
      return Status::Error("TF_CONFIG.task is " + type_name + " " +
                           std::to_string(config->task_index) + " but cluster." + type_name +
                           " is missing or empty; add this task's host:port there");
    }
    return Status::Error("TF_CONFIG.task.index " + std::to_string(config->task_index) +
                         " is out of range: cluster." + type_name + " has " +
                         std::to_string(count) + " entries (0.." + std::to_string(count - 1) + ")");
  }
  return Status::Ok();
}

}  // namespace

std::string_view TaskTypeName(TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return "chief";
    case TaskType::kWorker:
      return "worker";
    case TaskType::kPs:
      return "ps";
    case TaskType::kEvaluator:
      return "evaluator";
  }
  return "unknown";
}

bool TfConfig::is_chief() const {
  if (!chief.empty()) return task_type == TaskType::kChief;
  return task_type == TaskType::kWorker && task_index == 0;
}

int TfConfig::collective_size() const { return static_cast<int>(chief.size() + worker.size()); }

int TfConfig::rank() const {
  switch (task_type) {
    case TaskType::kChief:
      return 0;
    case TaskType::kWorker:
      return static_cast<int>(chief.size()) + task_index;
    default:
      return -1;
  }
}

const std::string& TfConfig::chief_address() const {
  return chief.empty() ? worker.front() : chief.front();
}

const std::string& TfConfig::own_address() const {
  static const std::string kNone;
  const auto& tasks = TasksOf(*this, task_type);
  return static_cast<size_t>(task_index) < tasks.size() ? tasks[task_index] : kNone;
}

std::string TfConfig::task_name() const {
  return std::string(TaskTypeName(task_type)) + " " + std::to_string(task_index);
}

std::string TfConfig::TaskNameOfRank(int r) const {
  if (!chief.empty()) return r == 0 ? "chief 0" : "worker " + std::to_string(r - 1);
  return "worker " + std::to_string(r);
}

const std::string& TfConfig::AddressOfRank(int r) const {
  if (!chief.empty()) return r == 0 ? chief.front() : worker[r - 1];
  return worker[r];
}

StatusOr<TfConfig> ParseTfConfig(std::string_view json_text) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    return Status::Error("TF_CONFIG is not valid JSON (" + std::string(e.what()) +
                         "); set it to an object like " + std::string(kExample));
  }
  if (!root.is_object()) {
    return Status::Error("TF_CONFIG must be a JSON object like " + std::string(kExample));
  }
  TfConfig config;
  auto cluster_it = root.find("cluster");
  if (cluster_it == root.end()) {
    return Status::Error(
        "TF_CONFIG has no cluster; add \"cluster\":{\"worker\":[\"host:port\","
        "...]}");
  }
  TJ_RETURN_IF_ERROR(ParseCluster(*cluster_it, &config));
  TJ_RETURN_IF_ERROR(ParseTask(root, &config));
  return config;
}

bool DescribesLocalRun(std::string_view json_text) {
  if (json_text.find_first_not_of(" \t\n\r") == std::string_view::npos) return true;
  const nlohmann::json root = nlohmann::json::parse(json_text, nullptr, false);
  if (!root.is_object()) return false;  // ParseTfConfig says what is wrong
  const auto cluster = root.find("cluster");
  return cluster == root.end() || (cluster->is_object() && cluster->empty());
}

std::string PodListenAddress() {
  const char* pod_ip = std::getenv("TJ_POD_IP");
  return pod_ip != nullptr ? pod_ip : "";
}

}  // namespace tj::cluster
