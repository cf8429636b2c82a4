// musl's <time.h> as FreeBSD's differs from it where arbor's code looks, for
// scripts/darwin-check only. From FreeBSD's sys/sys/_clock_id.h: FreeBSD's own tick-resolution
// clocks are CLOCK_*_FAST; the Linux names (CLOCK_REALTIME_COARSE, CLOCK_BOOTTIME...) are
// aliases in recent headers only, so they are left out here, as in the releases before them.
#pragma once

#include_next <time.h>

#undef CLOCK_MONOTONIC_RAW
#undef CLOCK_REALTIME_COARSE
#undef CLOCK_MONOTONIC_COARSE
#undef CLOCK_BOOTTIME
#undef CLOCK_REALTIME_ALARM
#undef CLOCK_BOOTTIME_ALARM
#undef CLOCK_SGI_CYCLE
#undef CLOCK_TAI

#define CLOCK_REALTIME_FAST 10
#define CLOCK_MONOTONIC_FAST 12
