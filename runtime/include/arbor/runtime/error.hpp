// arbor's own error codes (everything else is a system error_code).
#pragma once

#include <system_error>

namespace arbor {

enum class Errc {
  end_of_stream = 1,  // read_exact: the peer closed before the buffer was full
  not_in_runtime,     // an operation that needs a runtime was awaited outside its tasks
  channel_closed,     // the other side of a channel is gone (or closed it): nothing more comes
  channel_full,       // try_send: a bounded channel has no room now
  channel_empty,      // try_recv: no message now (the channel is still open)
  channel_lagged,     // broadcast: this receiver fell behind and missed messages
  frame_too_long,     // buffered reads: no delimiter (or a length prefix over the maximum)
                      // within the maximum; nothing was consumed
  incomplete_frame,   // buffered reads: the peer closed in the middle of a line or frame
};

const std::error_category& error_category() noexcept;
inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

}  // namespace arbor

template <>
struct std::is_error_code_enum<arbor::Errc> : std::true_type {};
