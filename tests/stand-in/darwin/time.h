// musl's <time.h> without Linux's clocks, which macOS's <time.h> lacks, for scripts/darwin-check
// only. The SDK's clocks (macOS 11) are CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW
// and its own CLOCK_*_RAW_APPROX and CLOCK_UPTIME_RAW ones, besides the CPU-time clocks.
#pragma once

#include_next <time.h>

#undef CLOCK_REALTIME_COARSE
#undef CLOCK_MONOTONIC_COARSE
#undef CLOCK_BOOTTIME
#undef CLOCK_REALTIME_ALARM
#undef CLOCK_BOOTTIME_ALARM
#undef CLOCK_SGI_CYCLE
#undef CLOCK_TAI
