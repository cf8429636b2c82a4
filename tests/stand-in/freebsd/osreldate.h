// FreeBSD's <osreldate.h>, which libc++'s <__config> includes on FreeBSD, for
// scripts/darwin-check only: the version of 14.0-RELEASE.
#pragma once

#define __FreeBSD_version 1400097
