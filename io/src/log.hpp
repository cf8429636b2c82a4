#pragma once
#include "arbor/io/log.hpp"
