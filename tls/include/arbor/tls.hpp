// arbor::tls: TLS (OpenSSL 3) over arbor's byte streams, in one include.
#pragma once

#include "arbor/tls/context.hpp"
#include "arbor/tls/error.hpp"
#include "arbor/tls/stream.hpp"
