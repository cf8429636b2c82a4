// arbor: everything a program needs, in one include.
#pragma once

#include "arbor/address.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/cancel.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/join_handle.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/runtime/task_group.hpp"
#include "arbor/runtime/tcp_listener.hpp"
#include "arbor/runtime/tcp_stream.hpp"
#include "arbor/runtime/timer.hpp"
#include "arbor/runtime/udp_socket.hpp"
#include "arbor/runtime/when_all.hpp"
#include "arbor/runtime/when_any.hpp"
