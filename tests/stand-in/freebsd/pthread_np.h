// FreeBSD's <pthread_np.h>, for scripts/darwin-check only: pthread_getthreadid_np(), which
// spdlog calls for a thread's id, and nothing else.
#pragma once

#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif
int pthread_getthreadid_np(void);
#ifdef __cplusplus
}
#endif
