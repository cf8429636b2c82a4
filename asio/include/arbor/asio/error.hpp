// to_std: a Boost error code as the std::error_code arbor's Results carry.
//
// Invariant: errno-valued codes keep their std category (system or generic), so a result
// compares equal to std::errc values (operation_aborted == std::errc::operation_canceled);
// any other category (asio.misc's eof, Beast's, OpenSSL's) goes through Boost's bridge to
// std::error_category, which keeps its name and messages: compare with to_std(that_code).
#pragma once

#include <boost/system/error_code.hpp>
#include <system_error>

namespace arbor::asio {

inline std::error_code to_std(const boost::system::error_code& ec) noexcept {
  if (!ec) return {};
  if (ec.category() == boost::system::system_category())
    return {ec.value(), std::system_category()};
  if (ec.category() == boost::system::generic_category())
    return {ec.value(), std::generic_category()};
  return {ec.value(), static_cast<const std::error_category&>(ec.category())};
}

}  // namespace arbor::asio
