// TF_CONFIG parsing and roles: table-driven good and bad inputs, exact error texts; the pod's
// listen address (TJ_POD_IP). Each row says what TensorFlow does with the same TF_CONFIG:
// TFConfigClusterResolver (tensorflow/python/distribute/cluster_resolver/
// tfconfig_cluster_resolver.py: task_type = str(task["type"]), task_id = int(task["index"]),
// cluster_spec = ClusterSpec(tf_config["cluster"]) or ClusterSpec({}) without one, rpc_layer and
// session_master read, everything else ignored), ClusterSpec (tensorflow/python/training/
// server_lib.py: a job is a list of addresses or a dict of int(index) -> address) and
// MultiWorkerMirroredStrategy's checks (tensorflow/python/distribute/multi_worker_util.py,
// _validate_cluster_spec: task type chief/worker/evaluator/ps, the task's type in the cluster,
// at most one chief and one evaluator, task_id below the job's task count).
#include "trainer/cluster/config/tf_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace tj::cluster {
namespace {

struct Good {
  const char* name;
  const char* json;
  bool is_chief, is_evaluator;
  int rank, size;
  const char* chief_address;
  const char* own_address;
  const char* task_name;
};

class GoodTfConfig : public ::testing::TestWithParam<Good> {};

TEST_P(GoodTfConfig, DerivesRolesLikeTensorFlow) {
  const Good& g = GetParam();
  StatusOr<TfConfig> c = ParseTfConfig(g.json);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->is_chief(), g.is_chief);
  EXPECT_EQ(c->is_evaluator(), g.is_evaluator);
  EXPECT_EQ(c->in_collective(), !g.is_evaluator);
  EXPECT_EQ(c->rank(), g.rank);
  EXPECT_EQ(c->collective_size(), g.size);
  EXPECT_EQ(c->chief_address(), g.chief_address);
  EXPECT_EQ(c->own_address(), g.own_address);
  EXPECT_EQ(c->task_name(), g.task_name);
}

INSTANTIATE_TEST_SUITE_P(
    Table, GoodTfConfig,
    ::testing::Values(
        Good{"tutorial_worker0",
             R"({"cluster":{"worker":["localhost:12345","localhost:23456"]},
                 "task":{"type":"worker","index":0}})",
             true, false, 0, 2, "localhost:12345", "localhost:12345", "worker 0"},
        Good{"tutorial_worker1",
             R"({"cluster":{"worker":["localhost:12345","localhost:23456"]},
                 "task":{"type":"worker","index":1}})",
             false, false, 1, 2, "localhost:12345", "localhost:23456", "worker 1"},
        Good{"chief_is_rank0",
             R"({"cluster":{"chief":["c:2222"],"worker":["w0:2222","w1:2222"],
                 "evaluator":["e:2222"]},"task":{"type":"chief","index":0},
                 "environment":"cloud"})",
             true, false, 0, 3, "c:2222", "c:2222", "chief 0"},
        Good{"worker0_with_chief_is_rank1_not_chief",
             R"({"cluster":{"chief":["c:2222"],"worker":["w0:2222","w1:2222"]},
                 "task":{"type":"worker","index":0}})",
             false, false, 1, 3, "c:2222", "w0:2222", "worker 0"},
        Good{"worker1_with_chief_is_rank2",
             R"({"cluster":{"chief":["c:2222"],"worker":["w0:2222","w1:2222"]},
                 "task":{"type":"worker","index":1}})",
             false, false, 2, 3, "c:2222", "w1:2222", "worker 1"},
        Good{"evaluator_outside_collective",
             R"({"cluster":{"worker":["w0:2222"],"evaluator":["e:2222"]},
                 "task":{"type":"evaluator","index":0}})",
             false, true, -1, 1, "w0:2222", "e:2222", "evaluator 0"},
        // As Kubeflow's TFJob writes an evaluator's TF_CONFIG: the cluster lists no evaluator.
        Good{"evaluator_not_in_cluster",
             R"({"cluster":{"chief":["c:2222"],"worker":["w0:2222"]},
                 "task":{"type":"evaluator","index":0}})",
             false, true, -1, 2, "c:2222", "", "evaluator 0"},
        Good{"missing_index_defaults_to_0",
             R"({"cluster":{"worker":["w0:1"]},"task":{"type":"worker"}})", true, false, 0, 1,
             "w0:1", "w0:1", "worker 0"},
        Good{"ps_listed_but_not_this_task",
             R"({"cluster":{"worker":["w0:1"],"ps":["p:2"]},"task":{"type":"worker","index":0}})",
             true, false, 0, 1, "w0:1", "w0:1", "worker 0"},
        Good{"ipv6",
             R"({"cluster":{"worker":["[::1]:2222","[::1]:2223"]},"task":{"type":"worker",
                 "index":1}})",
             false, false, 1, 2, "[::1]:2222", "[::1]:2223", "worker 1"},
        // TF: int(task["index"]) accepts a decimal string, an integral float, a bool.
        Good{"index_as_string_like_int",
             R"({"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":" 1 "}})",
             false, false, 1, 2, "a:1", "b:1", "worker 1"},
        Good{"index_as_float_like_int",
             R"({"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":1.0}})", false,
             false, 1, 2, "a:1", "b:1", "worker 1"},
        Good{"index_as_bool_like_int",
             R"({"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":true}})", false,
             false, 1, 2, "a:1", "b:1", "worker 1"},
        // TF: ClusterSpec takes a job as a dict of index -> address (keys read with int()).
        Good{"job_as_index_map",
             R"({"cluster":{"chief":{"0":"c:1"},"worker":{"1":"w1:1","0":"w0:1"}},
                 "task":{"type":"worker","index":1}})",
             false, false, 2, 3, "c:1", "w1:1", "worker 1"},
        // TF: rpc_layer and session_master are read by the resolver, not by the strategy's
        // collectives; environment ("cloud", "google") only by Estimator.
        Good{"rpc_layer_session_master_environment_ignored",
             R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0},
                 "rpc_layer":"grpc","session_master":"grpc://a:1","environment":"google"})",
             true, false, 0, 1, "a:1", "a:1", "worker 0"},
        Good{"same_host_other_port_is_no_duplicate",
             R"({"cluster":{"worker":["h:1","h:2"]},"task":{"type":"worker","index":0},
                 "unknown_top_level":1})",
             true, false, 0, 2, "h:1", "h:1", "worker 0"}),
    [](const auto& info) { return std::string(info.param.name); });

struct Bad {
  const char* name;
  const char* json;
  const char* error;  // the exact message, or its prefix when it ends with "..."
};

class BadTfConfig : public ::testing::TestWithParam<Bad> {};

TEST_P(BadTfConfig, IsRejectedWithAClearMessage) {
  const Bad& b = GetParam();
  StatusOr<TfConfig> c = ParseTfConfig(b.json);
  ASSERT_FALSE(c.ok());
  std::string want = b.error;
  if (want.size() > 3 && want.substr(want.size() - 3) == "...") {
    want.resize(want.size() - 3);
    EXPECT_EQ(c.status().message().substr(0, want.size()), want) << c.status().message();
  } else {
    EXPECT_EQ(c.status().message(), want);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadTfConfig,
    ::testing::Values(
        Bad{"malformed_json", R"({"cluster":)", "TF_CONFIG is not valid JSON (..."},
        Bad{"not_an_object", R"([1,2])",
            R"(TF_CONFIG must be a JSON object like {"cluster":{"worker":["host0:2222",)"
            R"("host1:2222"]},"task":{"type":"worker","index":0}})"},
        // Only reached by a caller that skipped DescribesLocalRun (below).
        Bad{"no_cluster", R"({"task":{"type":"worker","index":0}})",
            R"(TF_CONFIG has no cluster; add "cluster":{"worker":["host:port",...]})"},
        Bad{"no_task", R"({"cluster":{"worker":["a:1"]}})",
            R"(TF_CONFIG has no task; add "task":{"type":"worker","index":N} naming this )"
            R"(process's entry in the cluster)"},
        Bad{"unknown_task_type", R"({"cluster":{"worker":["a:1"]},"task":{"type":"boss"}})",
            R"(TF_CONFIG.task.type "boss" is unknown; use chief, worker or evaluator)"},
        Bad{"master_task_type", R"({"cluster":{"worker":["a:1"]},"task":{"type":"master"}})",
            R"(TF_CONFIG.task.type "master" is unknown; TensorFlow 2 calls the master )"
            R"("chief": use chief, worker or evaluator)"},
        Bad{"capitalised_task_type", R"({"cluster":{"worker":["a:1"]},"task":{"type":"Worker"}})",
            R"(TF_CONFIG.task.type "Worker" is unknown; task types are lower case: use )"
            R"("worker" (Kubeflow's replica type Worker becomes worker in TF_CONFIG))"},
        Bad{"unknown_cluster_type", R"({"cluster":{"worker":["a:1"],"master":["b:1"]},
            "task":{"type":"worker"}})",
            R"(TF_CONFIG.cluster.master: unknown task type "master"; TensorFlow 2 calls the )"
            R"(master "chief": use chief, worker or evaluator)"},
        Bad{"index_out_of_range",
            R"({"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":2}})",
            "TF_CONFIG.task.index 2 is out of range: cluster.worker has 2 entries (0..1)"},
        Bad{"negative_index",
            R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":-1}})",
            "TF_CONFIG.task.index must be a non-negative integer, not -1"},
        // TF: int("x") raises ValueError.
        Bad{"non_numeric_string_index",
            R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":"one"}})",
            R"(TF_CONFIG.task.index must be a non-negative integer, not "one")"},
        Bad{"null_index", R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":null}})",
            "TF_CONFIG.task.index must be a non-negative integer, not null"},
        // TF: the strategy's ranks need tasks 0..n-1; task 2 of {0, 2} "exceeds the maximum id".
        Bad{"sparse_index_map",
            R"({"cluster":{"worker":{"0":"a:1","2":"b:1"}},"task":{"type":"worker","index":0}})",
            "TF_CONFIG.cluster.worker has no task 1: MultiWorkerMirroredStrategy numbers its "
            "tasks 0..n-1 without gaps"},
        Bad{"index_map_bad_key",
            R"({"cluster":{"worker":{"zero":"a:1"}},"task":{"type":"worker","index":0}})",
            R"(TF_CONFIG.cluster.worker: task index "zero" is not a non-negative integer)"},
        Bad{"task_type_not_in_cluster",
            R"({"cluster":{"worker":["a:1"]},"task":{"type":"chief","index":0}})",
            "TF_CONFIG.task is chief 0 but cluster.chief is missing or empty; add this task's "
            "host:port there"},
        Bad{"host_without_port",
            R"({"cluster":{"worker":["a:1","hostb"]},"task":{"type":"worker","index":0}})",
            R"(TF_CONFIG.cluster.worker[1] "hostb": missing port; write host:port (e.g. )"
            R"(hostb:2222))"},
        Bad{"empty_port", R"({"cluster":{"worker":["a:"]},"task":{"type":"worker"}})",
            R"(TF_CONFIG.cluster.worker[0] "a:": missing port; write host:port)"},
        Bad{"bad_port", R"({"cluster":{"worker":["a:http"]},"task":{"type":"worker"}})",
            R"(TF_CONFIG.cluster.worker[0] "a:http": bad port "http"; use a number from 1 )"
            R"(to 65535)"},
        Bad{"port_too_big", R"({"cluster":{"worker":["a:70000"]},"task":{"type":"worker"}})",
            R"(TF_CONFIG.cluster.worker[0] "a:70000": bad port "70000"; use a number from 1 )"
            R"(to 65535)"},
        Bad{"missing_host", R"({"cluster":{"worker":[":1"]},"task":{"type":"worker"}})",
            R"(TF_CONFIG.cluster.worker[0] ":1": missing host; write host:port)"},
        Bad{"unbracketed_ipv6", R"({"cluster":{"worker":["::1:5"]},"task":{"type":"worker"}})",
            R"(TF_CONFIG.cluster.worker[0] "::1:5": IPv6 addresses need brackets; write )"
            R"([addr]:port)"},
        Bad{"duplicate_address",
            R"({"cluster":{"chief":["a:1"],"worker":["b:1","a:1"]},"task":{"type":"chief"}})",
            R"(TF_CONFIG.cluster.worker[1] "a:1" duplicates TF_CONFIG.cluster.chief[0]; )"
            R"(every task needs its own host:port)"},
        Bad{"two_chiefs",
            R"({"cluster":{"chief":["a:1","b:1"],"worker":["c:1"]},"task":{"type":"chief"}})",
            "TF_CONFIG.cluster.chief has 2 entries; at most one chief is allowed"},
        Bad{"two_evaluators",
            R"({"cluster":{"worker":["c:1"],"evaluator":["a:1","b:1"]},
                "task":{"type":"worker"}})",
            "TF_CONFIG.cluster.evaluator has 2 entries; at most one evaluator is allowed"},
        Bad{"no_chief_no_worker",
            R"({"cluster":{"evaluator":["a:1"]},"task":{"type":"evaluator"}})",
            "TF_CONFIG.cluster has no chief and no worker; list at least one worker"},
        Bad{"ps_task",
            R"({"cluster":{"worker":["a:1"],"ps":["p:1"]},"task":{"type":"ps","index":0}})",
            R"(TF_CONFIG.task.type "ps": parameter servers are not supported (tj-trainer )"
            R"(trains with synchronous all-reduce, like MultiWorkerMirroredStrategy); run )"
            R"(chief/worker tasks only)"},
        Bad{"address_not_string", R"({"cluster":{"worker":[2222]},"task":{"type":"worker"}})",
            R"(TF_CONFIG.cluster.worker[0] must be a "host:port" string, not 2222)"},
        // TF: ClusterSpec raises TypeError on a job that is neither a list nor a dict.
        Bad{"cluster_list_not_array", R"({"cluster":{"worker":"a:1"},"task":{"type":"worker"}})",
            R"(TF_CONFIG.cluster.worker must be a list of "host:port" strings (or an object of )"
            R"(task index -> "host:port"))"}),
    [](const auto& info) { return std::string(info.param.name); });

// TF: without a cluster (or with an empty one) the resolver's ClusterSpec is empty and the
// strategy trains in one local process; json.loads of the variable's text otherwise.
TEST(TfConfig, NoClusterDescribesALocalRun) {
  EXPECT_TRUE(DescribesLocalRun(""));
  EXPECT_TRUE(DescribesLocalRun("{}"));
  EXPECT_TRUE(DescribesLocalRun(R"({"task":{"type":"worker","index":0}})"));
  EXPECT_TRUE(DescribesLocalRun(R"({"cluster":{},"task":{"type":"worker","index":0}})"));
  EXPECT_FALSE(DescribesLocalRun(R"({"cluster":{"worker":["a:1"]}})"));
  EXPECT_FALSE(DescribesLocalRun("not json"));  // ParseTfConfig names the error
  EXPECT_FALSE(DescribesLocalRun(R"({"cluster":[]})"));
}

TEST(TfConfig, RanksMapBackToTasksAndAddresses) {
  StatusOr<TfConfig> c = ParseTfConfig(
      R"({"cluster":{"chief":["c:1"],"worker":["w0:1","w1:1"]},"task":{"type":"worker",
          "index":1}})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->TaskNameOfRank(0), "chief 0");
  EXPECT_EQ(c->AddressOfRank(0), "c:1");
  EXPECT_EQ(c->TaskNameOfRank(2), "worker 1");
  EXPECT_EQ(c->AddressOfRank(2), "w1:1");
}

TEST(HostPort, SplitsHostAndPort) {
  StatusOr<HostPort> hp = ParseHostPort("job-worker-1.job.ns.svc:2222", "x");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "job-worker-1.job.ns.svc");
  EXPECT_EQ(hp->port, 2222);
  hp = ParseHostPort("[fe80::1]:80", "x");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "fe80::1");
  EXPECT_EQ(hp->port, 80);
}

// TJ_POD_IP is the process's: set for the test, restored after it.
class PodListenAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("TJ_POD_IP")) saved_ = v;
  }
  void TearDown() override {
    if (saved_) {
      setenv("TJ_POD_IP", saved_->c_str(), 1);
    } else {
      unsetenv("TJ_POD_IP");
    }
  }
  std::optional<std::string> saved_;
};

TEST_F(PodListenAddressTest, IsThePodsOwnAddressOnTheProcessNode) {
  ASSERT_EQ(setenv("TJ_POD_IP", "127.3.0.2", 1), 0);
  EXPECT_EQ(PodListenAddress(), "127.3.0.2");
}

TEST_F(PodListenAddressTest, IsEveryInterfaceWithoutTjPodIp) {
  ASSERT_EQ(unsetenv("TJ_POD_IP"), 0);
  EXPECT_EQ(PodListenAddress(), "");
  ASSERT_EQ(setenv("TJ_POD_IP", "", 1), 0);
  EXPECT_EQ(PodListenAddress(), "");
}

}  // namespace
}  // namespace tj::cluster
