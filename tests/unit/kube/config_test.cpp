#include "kube/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

namespace fs = std::filesystem;

const char* kPem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

Environment Env(const std::map<std::string, std::string>& vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

using tj::testing::TempDir;

std::string TwoContexts(const std::string& ca_line) {
  return R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://127.0.0.1:6443/
)" + ca_line +
         R"(
- name: prod-cluster
  cluster:
    server: https://[fd00::1]:443
    insecure-skip-tls-verify: true
users:
- name: dev-user
  user:
    token: abc123
- name: prod-user
  user:
    client-certificate: certs/client.crt
    client-key-data: )" +
         Base64Encode("KEY") + R"(
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: team-a}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
)";
}

TEST(Kubeconfig, CurrentContextWithInlineCaAndToken) {
  auto c = ParseKubeconfig(TwoContexts("    certificate-authority-data: " + Base64Encode(kPem)),
                           "/nowhere");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://127.0.0.1:6443");  // trailing slash dropped
  EXPECT_EQ(c->ca_pem, kPem);
  EXPECT_EQ(c->bearer_token, "abc123");
  EXPECT_EQ(c->default_namespace, "team-a");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
}

TEST(Kubeconfig, ATokenIsNeverSentOverPlainHttp) {
  std::string text = TwoContexts("");
  const std::string https = "server: https://127.0.0.1:6443";
  ASSERT_NE(text.find(https), std::string::npos);
  text.replace(text.find(https), https.size(), "server: http://127.0.0.1:8080");
  auto c = ParseKubeconfig(text, "/nowhere");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("a bearer token is sent only over https"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("user \"dev-user\""), std::string::npos);
}

TEST(Kubeconfig, NamedContextWithFilesRelativeToTheKubeconfig) {
  TempDir dir;
  dir.Write("certs/client.crt", "CERT");
  std::string path = dir.Write("kubeconfig", TwoContexts(""));
  auto c = LoadKubeconfigFile(path, "prod");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->client_cert_pem, "CERT");
  EXPECT_EQ(c->client_key_pem, "KEY");
  EXPECT_EQ(c->default_namespace, "default");
}

TEST(Kubeconfig, CaFileAndTokenFile) {
  TempDir dir;
  dir.Write("ca.pem", kPem);
  std::string yaml = R"(current-context: c
clusters: [{name: k, cluster: {server: "https://h:1", certificate-authority: ca.pem}}]
users: [{name: u, user: {tokenFile: tok}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
)";
  auto c = ParseKubeconfig(yaml, dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->ca_pem, kPem);
  EXPECT_EQ(c->token_file, dir.path() + "/tok");
}

TEST(Kubeconfig, ErrorsNameWhatIsWrong) {
  auto missing_ctx = ParseKubeconfig(TwoContexts(""), "", "staging");
  ASSERT_FALSE(missing_ctx.ok());
  EXPECT_NE(missing_ctx.status().message().find("context \"staging\" not found"),
            std::string::npos);

  auto bad_yaml = ParseKubeconfig("clusters: [unclosed", "");
  ASSERT_FALSE(bad_yaml.ok());
  EXPECT_NE(bad_yaml.status().message().find("not valid YAML"), std::string::npos);

  auto missing_file = ParseKubeconfig(TwoContexts(""), "/nonexistent-dir", "prod");
  ASSERT_FALSE(missing_file.ok());
  EXPECT_NE(missing_file.status().message().find("client-certificate"), std::string::npos);

  auto bad_b64 = ParseKubeconfig(TwoContexts("    certificate-authority-data: '!!!'"), "");
  ASSERT_FALSE(bad_b64.ok());
  EXPECT_NE(bad_b64.status().message().find("base64"), std::string::npos);

  auto no_scheme = ParseKubeconfig(R"(current-context: c
clusters: [{name: k, cluster: {server: "h:1"}}]
contexts: [{name: c, context: {cluster: k}}]
)",
                                   "");
  ASSERT_FALSE(no_scheme.ok());
  EXPECT_NE(no_scheme.status().message().find("https://"), std::string::npos);
}

TEST(InCluster, ReadsTheServiceAccountAndBracketsIpv6) {
  TempDir dir;
  dir.Write("token", "tok\n");
  dir.Write("ca.crt", kPem);
  dir.Write("namespace", "jobs\n");
  auto v4 = InClusterConfig(
      Env({{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}}),
      dir.path());
  ASSERT_TRUE(v4.ok()) << v4.status().message();
  EXPECT_EQ(v4->server, "https://10.0.0.1:443");
  EXPECT_EQ(v4->token_file, dir.path() + "/token");
  EXPECT_EQ(v4->ca_pem, kPem);
  EXPECT_EQ(v4->default_namespace, "jobs");
  auto v6 = InClusterConfig(
      Env({{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "6443"}}),
      dir.path());
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->server, "https://[fd00::1]:6443");
}

TEST(InCluster, OutsideAPodSaysSo) {
  auto c = InClusterConfig(Env({}), "/nonexistent");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
}

TEST(LoadConfig, FlagThenKubeconfigEnvThenHome) {
  TempDir dir;
  auto cfg = [](const std::string& server) {
    return "current-context: c\nclusters: [{name: k, cluster: {server: \"" + server +
           "\"}}]\ncontexts: [{name: c, context: {cluster: k}}]\n";
  };
  std::string flag = dir.Write("flag", cfg("https://flag:1"));
  std::string env = dir.Write("env", cfg("https://env:1"));
  dir.Write("home/.kube/config", cfg("https://home:1"));
  auto e = Env({{"KUBECONFIG", dir.path() + "/missing:" + env}, {"HOME", dir.path() + "/home"}});
  EXPECT_EQ(LoadConfig(flag, e)->server, "https://flag:1");
  EXPECT_EQ(LoadConfig("", e)->server, "https://env:1");
  EXPECT_EQ(LoadConfig("", Env({{"HOME", dir.path() + "/home"}}))->server, "https://home:1");
  auto none = LoadConfig("", Env({{"HOME", dir.path()}}));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--kubeconfig"), std::string::npos);
}

TEST(Base64, RoundTripWithAndWithoutPadding) {
  for (std::string s : {"", "a", "ab", "abc", "abcd", "hello world\n"}) {
    auto enc = Base64Encode(s);
    EXPECT_EQ(Base64Decode(enc), s);
    std::string unpadded = enc;
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
    EXPECT_EQ(Base64Decode(unpadded), s);
  }
  EXPECT_FALSE(Base64Decode("@@@@").has_value());
}

}  // namespace
}  // namespace tj::kube
