// Test certificates, made once per test process with the openssl command-line tool in a
// temporary directory that is removed at exit: a CA; "localhost" (also 127.0.0.1) and
// "other.test" signed by it; an expired "localhost"; a self-signed "localhost" nobody trusts.
// Invariant: made before the first test that asks and never changed; a failure to make them
// fails that test with openssl's own output.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace arbor::test {

struct Certificates {
  std::filesystem::path dir;
  std::string error;  // empty when all were made
  std::string file(const std::string& name) const { return (dir / name).string(); }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  Certificates() {
    dir = std::filesystem::temp_directory_path() / ("arbor-tls-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    const std::string script =
        "set -e; cd '" + dir.string() + "'\n" + "openssl req -x509" + ec +
        " -keyout ca.key -out ca.pem -subj /CN=arbor-test-ca -days 2\n" + "sign() { openssl req" +
        ec +
        " -keyout $1.key -out $1.csr -subj /CN=$2 "
        "-addext subjectAltName=$3\n"
        "  openssl x509 -req -in $1.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-copy_extensions copy -out $1.pem; }\n"
        "sign localhost localhost DNS:localhost,IP:127.0.0.1\n"
        "sign other other.test DNS:other.test\n"
        // Expired: `openssl ca` is the tool that sets dates in the past.
        "openssl req" +
        ec +
        " -keyout expired.key -out expired.csr -subj /CN=localhost "
        "-addext subjectAltName=DNS:localhost\n"
        "printf "
        "'[ca]\\ndefault_ca=t\\n[t]\\ndatabase=index.txt\\nnew_certs_dir=.\\nserial=serial\\n"
        "default_md=sha256\\npolicy=p\\nunique_subject=no\\ncopy_extensions=copy\\n"
        "[p]\\ncommonName=supplied\\n' > ca.cnf\n"
        ": > index.txt; echo 01 > serial\n"
        "openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr "
        "-out expired.pem -startdate 20200101000000Z -enddate 20200102000000Z -notext\n"
        "openssl req -x509" +
        ec +
        " -keyout rogue.key -out rogue.pem -subj /CN=localhost "
        "-addext subjectAltName=DNS:localhost -days 2\n";
    std::ofstream(dir / "make.sh") << script;
    const std::string command =
        "sh '" + (dir / "make.sh").string() + "' > '" + (dir / "make.log").string() + "' 2>&1";
    if (std::system(command.c_str()) != 0) error = read(file("make.log"));
  }
  ~Certificates() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

inline const Certificates& certificates() {
  static const Certificates made;
  return made;
}

}  // namespace arbor::test
