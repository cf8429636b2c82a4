#include "arbor/http/date.hpp"

#include <time.h>

#include <cstring>

namespace arbor::http {

void format_http_date(long long unix_seconds, char* out) noexcept {
  static constexpr char kDays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr char kMonths[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const time_t t = static_cast<time_t>(unix_seconds);
  tm parts{};
#if defined(_WIN32)
  gmtime_s(&parts, &t);  // the CRT's thread-safe gmtime: Windows has no gmtime_r
#else
  gmtime_r(&t, &parts);
#endif
  auto two = [](char* p, int v) {
    p[0] = static_cast<char>('0' + v / 10 % 10);
    p[1] = static_cast<char>('0' + v % 10);
  };
  // "Sun, 06 Nov 1994 08:49:37 GMT"
  const int year = parts.tm_year + 1900;
  std::memcpy(out, kDays[parts.tm_wday], 3);
  out[3] = ',';
  out[4] = ' ';
  two(out + 5, parts.tm_mday);
  out[7] = ' ';
  std::memcpy(out + 8, kMonths[parts.tm_mon], 3);
  out[11] = ' ';
  two(out + 12, year / 100);
  two(out + 14, year % 100);
  out[16] = ' ';
  two(out + 17, parts.tm_hour);
  out[19] = ':';
  two(out + 20, parts.tm_min);
  out[22] = ':';
  two(out + 23, parts.tm_sec);
  std::memcpy(out + 25, " GMT", 4);
}

namespace {
// The wall clock at tick resolution, which is all a one-second date needs: Linux's coarse clock
// (vDSO, a few ns), FreeBSD's fast one (older releases lack the Linux name), macOS's own.
#if defined(CLOCK_REALTIME_COARSE)
constexpr clockid_t kDateClock = CLOCK_REALTIME_COARSE;
#elif defined(CLOCK_REALTIME_FAST)
constexpr clockid_t kDateClock = CLOCK_REALTIME_FAST;
#else
constexpr clockid_t kDateClock = CLOCK_REALTIME;
#endif
}  // namespace

std::string_view http_date() noexcept {
  thread_local long long second = -1;
  thread_local char text[kDateSize];
  timespec now{};
  clock_gettime(kDateClock, &now);
  if (now.tv_sec != second) {
    second = now.tv_sec;
    format_http_date(second, text);
  }
  return {text, kDateSize};
}

}  // namespace arbor::http
