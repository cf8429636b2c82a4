// arbor::asio: Boost.Asio code on arbor's runtime (docs/guide.md, "Bringing Asio code along").
// Context and its executor, the use_task / cancel_with tokens, and Stream over TcpStream.
#pragma once

#include "arbor/asio/context.hpp"
#include "arbor/asio/error.hpp"
#include "arbor/asio/executor.hpp"
#include "arbor/asio/stream.hpp"
#include "arbor/asio/use_task.hpp"
