// idle_connections: memory per idle keep-alive connection, arbor's example server against nginx,
// in one run. For each server in turn (started here, stopped here, on 127.0.0.1 only):
//   1. warm it up (a few requests), and read its resident memory (VmRSS): "before";
//   2. open CONNECTIONS connections, send one request on each and read the reply, so each is
//      an idle keep-alive connection that has served a request: "with", and
//      KB/connection = (with - before) / CONNECTIONS;
//   3. close them all, wait until the server has closed its ends (its descriptor count is back),
//      and read it again: "after", which a server that gives memory back has near "before".
// The soft descriptor limit is raised to the hard one (the servers inherit it); each server's
// clients come from their own source address (127.0.0.2, .3, ...), so the TIME_WAIT ports the
// previous one left do not run the ephemeral range out.
//
//   idle_connections [CONNECTIONS]        (default 10000)
//   environment: SERVERS (default "uring epoll nginx"; an arbor engine may name its io mode:
//   "uring-workers", "epoll-pollers"), HTTP_SERVER (the example server binary;
//   default: the one built beside this program)
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;

pid_t g_running = -1;  // the server being measured: die() stops it rather than orphan it

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "idle_connections: %s\n", what.c_str());
  if (g_running > 0) {
    ::kill(g_running, SIGTERM);
    ::waitpid(g_running, nullptr, 0);
  }
  std::exit(1);
}

long rss_kb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  return -1;
}

long open_fds(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  long n = 0;
  while (::readdir(d) != nullptr)
    ++n;
  ::closedir(d);
  return n - 2;
}

int connect_from(const char* source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{10, 0};  // a bound, so a server that stops answering fails the run, not hangs it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One request, and its whole reply (the body "Hello, World!" ends it).
bool request(int fd) {
  static const std::string req = "GET /plaintext HTTP/1.1\r\nHost: bench\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    return false;
  std::string got;
  char buf[512];
  while (!got.ends_with("Hello, World!")) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

struct Server {
  pid_t pid = -1;
  int port = 0;
  std::string dir;  // nginx's prefix, removed at the end
};

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

pid_t spawn(const std::vector<std::string>& args, int stdout_fd) {
  std::vector<char*> argv;
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
  pid_t pid = -1;
  if (posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0)
    die("cannot start " + args[0]);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

Server start_arbor(const std::string& binary, const std::string& engine, int connections) {
  int out[2];
  if (::pipe(out) != 0) die("pipe");
  Server s;
  ::setenv("ARBOR_LOG", "warn", 1);
  // "uring-workers" is --engine uring --io-mode workers; "uring" the engine's default mode.
  const auto dash = engine.find('-');
  std::vector<std::string> args = {binary,
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--engine",
                                   engine.substr(0, dash),
                                   "--max-connections",
                                   std::to_string(connections + 100)};
  if (dash != std::string::npos) args.insert(args.end(), {"--io-mode", engine.substr(dash + 1)});
  s.pid = spawn(args, out[1]);
  ::close(out[1]);
  std::string line;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n')
    line += c;
  ::close(out[0]);  // the server writes nothing more to it
  const auto colon = line.rfind(':');
  if (!line.starts_with("listening on") || colon == std::string::npos)
    die("the server said: " + line);
  s.port = std::stoi(line.substr(colon + 1));
  return s;
}

Server start_nginx(int connections) {
  Server s;
  char templ[] = "/tmp/idle-nginx-XXXXXX";
  if (::mkdtemp(templ) == nullptr) die("mkdtemp");
  s.dir = templ;
  s.port = free_port();
  std::ofstream conf(s.dir + "/nginx.conf");
  // One process, as arbor's server is one: no master. Logging off, keep-alive as long as the
  // run, descriptors for every connection.
  conf << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
       << "worker_rlimit_nofile " << connections + 1000 << ";\n"
       << "pid " << s.dir << "/nginx.pid;\nerror_log " << s.dir << "/error.log warn;\n"
       << "events { worker_connections " << connections + 1000 << "; }\n"
       << "http {\n  access_log off;\n  keepalive_requests 100000000;\n"
       << "  keepalive_timeout 600s;\n"
       << "  client_body_temp_path " << s.dir << "/body;\n  proxy_temp_path " << s.dir
       << "/proxy;\n  fastcgi_temp_path " << s.dir << "/fastcgi;\n  uwsgi_temp_path " << s.dir
       << "/uwsgi;\n  scgi_temp_path " << s.dir << "/scgi;\n"
       << "  server {\n    listen 127.0.0.1:" << s.port << " backlog=4096;\n"
       << "    location = /plaintext { default_type text/plain; return 200 \"Hello, World!\"; }\n"
       << "  }\n}\n";
  conf.close();
  s.pid =
      spawn({"nginx", "-p", s.dir, "-e", s.dir + "/error.log", "-c", s.dir + "/nginx.conf"}, -1);
  return s;
}

struct Figures {
  long before = 0, with = 0, after = 0;
};

Figures measure(const Server& s, const char* source, int connections) {
  for (int i = 0; i < 200; ++i) {  // until it listens
    const int fd = connect_from(source, s.port);
    if (fd >= 0) {
      ::close(fd);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  for (int i = 0; i < 4; ++i) {  // warm-up: a few connections, a few requests each
    const int fd = connect_from(source, s.port);
    if (fd < 0) die("warm-up connect failed");
    for (int j = 0; j < 5; ++j)
      if (!request(fd)) die("warm-up request failed");
    ::close(fd);
  }
  const long fds_idle = [&] {  // the warm-up connections' ends closed
    long n = open_fds(s.pid);
    for (int i = 0; i < 500 && n > 0; ++i) {
      std::this_thread::sleep_for(10ms);
      const long m = open_fds(s.pid);
      if (m == n) break;
      n = m;
    }
    return n;
  }();
  std::this_thread::sleep_for(300ms);
  Figures f;
  f.before = rss_kb(s.pid);
  std::vector<int> fds;
  fds.reserve(static_cast<std::size_t>(connections));
  for (int i = 0; i < connections; ++i) {
    const int fd = connect_from(source, s.port);
    if (fd < 0)  // EADDRINUSE: the source's ports are still in TIME_WAIT from a run < 60 s ago
      die("connection " + std::to_string(i) + " failed: " + std::strerror(errno));
    if (!request(fd)) die("request on connection " + std::to_string(i) + " failed");
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(500ms);  // a benchmark's settling time, not synchronisation
  f.with = rss_kb(s.pid);
  for (int fd : fds)
    ::close(fd);
  for (int i = 0; i < 3000 && open_fds(s.pid) > fds_idle; ++i)
    std::this_thread::sleep_for(10ms);
  // Then until its memory stops falling (a server may give it back a little later: arbor's
  // sweeper does, within a second), up to 10 s.
  f.after = rss_kb(s.pid);
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(1s);
    const long now = rss_kb(s.pid);
    if (now >= f.after) break;
    f.after = now;
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const int connections = argc > 1 ? std::atoi(argv[1]) : 10'000;
  if (connections <= 0) die("CONNECTIONS must be a positive number");
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < static_cast<rlim_t>(connections) + 100)
    die("the descriptor limit (" + std::to_string(limit.rlim_cur) + ") is below CONNECTIONS");
  ::signal(SIGPIPE, SIG_IGN);

  std::string binary = std::getenv("HTTP_SERVER") ? std::getenv("HTTP_SERVER") : "";
  if (binary.empty()) {
    std::string self = argv[0];
    binary = self.substr(0, self.rfind('/') + 1) + "../examples/http_server";
  }
  std::istringstream names(std::getenv("SERVERS") ? std::getenv("SERVERS") : "uring epoll nginx");
  std::printf("%-14s %12s %10s %10s %10s %8s %12s\n", "server", "connections", "before_kb",
              "with_kb", "after_kb", "kb_conn", "after/before");
  std::string name;
  int source = 2;
  while (names >> name) {
    const Server s =
        name == "nginx" ? start_nginx(connections) : start_arbor(binary, name, connections);
    g_running = s.pid;
    const std::string from = "127.0.0." + std::to_string(source++);
    const Figures f = measure(s, from.c_str(), connections);
    ::kill(s.pid, SIGTERM);
    ::waitpid(s.pid, nullptr, 0);
    g_running = -1;
    if (!s.dir.empty()) std::system(("rm -rf " + s.dir).c_str());
    std::printf("%-14s %12d %10ld %10ld %10ld %8.2f %12.2f\n", name.c_str(), connections, f.before,
                f.with, f.after, static_cast<double>(f.with - f.before) / connections,
                static_cast<double>(f.after) / static_cast<double>(f.before));
    std::fflush(stdout);
  }
}
