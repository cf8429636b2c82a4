// The example server's HTTPS end to end: started as a child process with --tls-cert and
// --tls-key (certificates made at test time), asked by curl verifying against the test CA; and
// its TLS flag errors, each exit status 2 with a message naming the problem.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../child_process.hpp"
#include "../tls/certificates.hpp"

namespace arbor::http {
namespace {

// ---- the example server, end to end -------------------------------------------------------

std::vector<std::string> server_argv(std::vector<std::string> flags) {
  std::vector<std::string> argv{HTTP_SERVER, "--listen", "127.0.0.1:0", "--workers", "2"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

// curl, verifying against the test CA, gets /plaintext and /json over HTTPS with ALPN
// http/1.1 on one connection; plain HTTP to the same port gets no answer.
TEST(HttpsExample, CurlGetsPlaintextAndJsonOverHttps) {
  if (std::system("curl --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no curl";
  const auto& certs = test::certificates();
  ASSERT_EQ(certs.error, "");
  test::ChildProcess server(server_argv(
      {"--tls-cert", certs.file("localhost.pem"), "--tls-key", certs.file("localhost.key")}));
  ASSERT_NE(server.port(), 0);
  const std::string base = "https://localhost:" + std::to_string(server.port());
  // Per URL: the body, then the HTTP version ALPN gave (curl offers h2 first) and the new
  // connections it took (0 for the second: keep-alive).
  const std::string out =
      test::output_of("curl -sS --max-time 20 --cacert '" + certs.file("ca.pem") +
                      "' --resolve localhost:" + std::to_string(server.port()) +
                      ":127.0.0.1 -w ' [%{http_version} %{num_connects}]' " + base + "/plaintext " +
                      base + "/json 2>&1");
  EXPECT_EQ(out, "Hello, World! [1.1 1]{\"message\":\"Hello, World!\"} [1.1 0]");
  const std::string plain =
      test::output_of("curl -sS --max-time 20 http://127.0.0.1:" + std::to_string(server.port()) +
                      "/plaintext 2>&1");
  EXPECT_EQ(plain.find("Hello"), std::string::npos) << plain;
  // The failed handshake is counted, and the server still answers.
  const std::string metrics =
      test::output_of("curl -sS --max-time 20 --cacert '" + certs.file("ca.pem") +
                      "' --resolve localhost:" + std::to_string(server.port()) + ":127.0.0.1 " +
                      base + "/metrics 2>&1");
  EXPECT_NE(metrics.find("arbor_http_tls_handshakes_failed_total 1\n"), std::string::npos)
      << metrics;
  EXPECT_EQ(server.stop(SIGTERM), 0);
}

// Each bad TLS flag exits 2 with a message that names the problem.
TEST(HttpsExample, BadTlsFlagsExitTwoWithAClearMessage) {
  const auto& certs = test::certificates();
  ASSERT_EQ(certs.error, "");
  const std::string server = HTTP_SERVER;
  const struct {
    std::string flags;
    std::string message;
  } cases[] = {
      {"--tls-cert " + certs.file("localhost.pem"), "--tls-cert and --tls-key go together"},
      {"--tls-key " + certs.file("localhost.key"), "--tls-cert and --tls-key go together"},
      {"--tls-cert " + certs.file("localhost.pem") + " --tls-key /nonexistent/key.pem",
       "cannot read --tls-key '/nonexistent/key.pem'"},
      {"--tls-cert " + certs.file("localhost.pem") + " --tls-key " + certs.file("other.key"),
       "key values mismatch"},
      {"--tls-cert " + certs.file("localhost.key") + " --tls-key " + certs.file("localhost.key"),
       "invalid --tls-cert"},
  };
  for (const auto& c : cases) {
    const std::string out =
        test::output_of(server + " --listen 127.0.0.1:0 " + c.flags + " 2>&1; echo \"exit=$?\"");
    EXPECT_NE(out.find(c.message), std::string::npos) << c.flags << ": " << out;
    EXPECT_NE(out.find("exit=2"), std::string::npos) << c.flags << ": " << out;
  }
}

}  // namespace
}  // namespace arbor::http
