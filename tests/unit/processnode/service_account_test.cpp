#include "processnode/service_account.h"

#include <gtest/gtest.h>

namespace tj::processnode {
namespace {

json Pod(const std::string& sa) {
  json p = {{"metadata", {{"name", "op-0"}, {"namespace", "tj-system"}, {"uid", "u-7"}}},
            {"spec", json::object()}};
  if (!sa.empty()) p["spec"]["serviceAccountName"] = sa;
  return p;
}

TEST(ServiceAccount, TokenRequestPathNamesTheServiceAccount) {
  EXPECT_EQ(TokenRequestPath(Pod("tj-operator")),
            "/api/v1/namespaces/tj-system/serviceaccounts/tj-operator/token");
  EXPECT_EQ(TokenRequestPath(Pod("")),
            "/api/v1/namespaces/tj-system/serviceaccounts/default/token");
}

TEST(ServiceAccount, TokenRequestIsBoundToThePod) {
  json body = TokenRequestBody(Pod("x"), {{"expirationSeconds", 3607}, {"path", "token"}});
  EXPECT_EQ(body["kind"], "TokenRequest");
  EXPECT_EQ(body["apiVersion"], "authentication.k8s.io/v1");
  EXPECT_EQ(body["spec"]["expirationSeconds"], 3607);
  EXPECT_EQ(body["spec"]["boundObjectRef"]["kind"], "Pod");
  EXPECT_EQ(body["spec"]["boundObjectRef"]["name"], "op-0");
  EXPECT_EQ(body["spec"]["boundObjectRef"]["uid"], "u-7");
  EXPECT_TRUE(body["spec"]["audiences"].empty());  // the API server's own audience
}

TEST(ServiceAccount, TokenRequestHonoursAudienceAndMinimumLifetime) {
  json body = TokenRequestBody(Pod("x"), {{"audience", "vault"}, {"expirationSeconds", 60}});
  EXPECT_EQ(body["spec"]["audiences"], json::array({"vault"}));
  EXPECT_EQ(body["spec"]["expirationSeconds"], kMinTokenSeconds);
  EXPECT_EQ(TokenRequestBody(Pod("x"), json::object())["spec"]["expirationSeconds"],
            kDefaultTokenSeconds);
}

TEST(ServiceAccount, TokensAreRenewedAtEightyPercent) {
  EXPECT_EQ(TokenRefreshAfter(std::chrono::seconds(3600)), std::chrono::seconds(2880));
}

TEST(ServiceAccount, ServiceEnvFromServerUrl) {
  auto env = KubernetesServiceEnv("https://127.0.0.1:36443");
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ((*env)[0], "KUBERNETES_SERVICE_HOST=127.0.0.1");
  EXPECT_EQ((*env)[1], "KUBERNETES_SERVICE_PORT=36443");
  EXPECT_EQ((*env)[3], "KUBERNETES_PORT=tcp://127.0.0.1:36443");
  auto v6 = KubernetesServiceEnv("https://[::1]:6443/");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ((*v6)[0], "KUBERNETES_SERVICE_HOST=::1");
  EXPECT_EQ((*v6)[3], "KUBERNETES_PORT=tcp://[::1]:6443");
  auto no_port = KubernetesServiceEnv("https://api.example.com");
  ASSERT_TRUE(no_port.ok());
  EXPECT_EQ((*no_port)[1], "KUBERNETES_SERVICE_PORT=443");
  EXPECT_FALSE(KubernetesServiceEnv("https://[::1").ok());
  EXPECT_FALSE(KubernetesServiceEnv("https://host:port").ok());
}

TEST(ServiceAccount, KubeconfigPointsAtTokenAndCaFiles) {
  json kc = json::parse(
      ServiceAccountKubeconfig("https://127.0.0.1:1", "/p/ca.crt", "/p/token", "tj-system"));
  EXPECT_EQ(kc["clusters"][0]["cluster"]["server"], "https://127.0.0.1:1");
  EXPECT_EQ(kc["clusters"][0]["cluster"]["certificate-authority"], "/p/ca.crt");
  EXPECT_EQ(kc["users"][0]["user"]["tokenFile"], "/p/token");
  EXPECT_EQ(kc["contexts"][0]["context"]["namespace"], "tj-system");
  EXPECT_EQ(kc["current-context"], "in-cluster");
}

TEST(ServiceAccount, MountsServiceAccount) {
  EXPECT_TRUE(MountsServiceAccount(
      {{"volumeMounts",
        {{{"name", "kube-api-access-x"},
          {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount/"}}}}}));
  EXPECT_FALSE(MountsServiceAccount({{"volumeMounts", {{{"name", "d"}, {"mountPath", "/data"}}}}}));
  EXPECT_FALSE(MountsServiceAccount(json::object()));
}

}  // namespace
}  // namespace tj::processnode
