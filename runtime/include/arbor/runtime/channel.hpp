// Every arbor channel, in one include: mpsc (bounded and unbounded), oneshot, broadcast,
// watch. Each header says what it keeps and who owns a message when.
#pragma once

#include "arbor/runtime/broadcast.hpp"
#include "arbor/runtime/mpsc.hpp"
#include "arbor/runtime/oneshot.hpp"
#include "arbor/runtime/send_result.hpp"
#include "arbor/runtime/watch.hpp"
