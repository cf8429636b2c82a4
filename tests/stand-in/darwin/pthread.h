// musl's <pthread.h> plus macOS's pthread_threadid_np(), which spdlog calls for a thread's id,
// for scripts/darwin-check only. The SDK's pthread_t is a pointer (musl's is an integer), so
// the declaration takes the pointer type, as spdlog's nullptr needs.
#pragma once

#include_next <pthread.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
struct _opaque_pthread_t;
int pthread_threadid_np(struct _opaque_pthread_t* thread, uint64_t* thread_id);
#ifdef __cplusplus
}
#endif
