// WSAStartup once per process: the one precondition of every Winsock socket call.
#include <winsock2.h>

#include <mutex>

#include "windows/winsock.hpp"

namespace arbor::io::windows {

std::error_code winsock_start() noexcept {
  static std::once_flag once;
  static int result = 0;
  std::call_once(once, [] {
    WSADATA data;
    result = ::WSAStartup(MAKEWORD(2, 2), &data);
  });
  return result == 0 ? std::error_code{} : from_wsa_error(result);
}

}  // namespace arbor::io::windows
