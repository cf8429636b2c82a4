#include "routes.hpp"

#include <rapidjson/allocators.h>
#include <rapidjson/writer.h>

#include <cstdio>
#include <string_view>

#include "arbor/sched/event_pool.hpp"  // the engine's pool, for /metrics

namespace arbor::example {
namespace {

constexpr std::string_view kAllow = "GET, HEAD";
constexpr std::string_view kAllowEcho = "POST";

// A rapidjson output stream over a fixed span: no allocation; overflow truncates (and is
// reported by size() == capacity, which the callers' spans make impossible for these bodies).
class SpanStream {
 public:
  using Ch = char;
  explicit SpanStream(std::span<char> out) noexcept : out_(out) {}
  void Put(char c) noexcept {
    if (size_ < out_.size()) out_[size_++] = c;
  }
  void Flush() noexcept {}
  std::string_view view() const noexcept { return {out_.data(), size_}; }

 private:
  std::span<char> out_;
  std::size_t size_ = 0;
};

std::string_view json_body(std::span<char> scratch) {
  // The writer's nesting stack lives in this stack buffer, not on the heap.
  char stack[1024];
  rapidjson::MemoryPoolAllocator<> allocator(stack, sizeof stack);
  SpanStream out(scratch);
  rapidjson::Writer<SpanStream, rapidjson::UTF8<>, rapidjson::UTF8<>,
                    rapidjson::MemoryPoolAllocator<>>
      writer(out, &allocator, 4);
  writer.StartObject();
  writer.Key("message");
  writer.String("Hello, World!");
  writer.EndObject();
  return out.view();
}

}  // namespace

http::Reply Routes::operator()(const http::Request& request, std::span<char> scratch) const {
  const std::string_view path = request.path;  // absolute-form targets too (RFC 9112 §3.2.2)
  enum {
    plaintext,
    json,
    metrics_page,
    echo,
    unknown
  } route = path == "/plaintext" ? plaintext
            : path == "/json"    ? json
            : path == "/metrics" ? metrics_page
            : path == "/echo"    ? echo
                                 : unknown;
  if (route == unknown)
    return {.status = 404, .content_type = "text/plain", .body = "Not Found", .allow = {}};
  if (route == echo) {
    // The request body, as it came: the server keeps it alive until this reply is sent.
    if (request.method != "POST")
      return {.status = 405,
              .content_type = "text/plain",
              .body = "Method Not Allowed",
              .allow = kAllowEcho};
    return {.status = 200,
            .content_type = "application/octet-stream",
            .body = request.body,
            .allow = {}};
  }
  if (request.method != "GET" && request.method != "HEAD")
    return {
        .status = 405, .content_type = "text/plain", .body = "Method Not Allowed", .allow = kAllow};
  switch (route) {
    case plaintext:
      return {.status = 200, .content_type = "text/plain", .body = "Hello, World!", .allow = {}};
    case json:
      return {.status = 200,
              .content_type = "application/json",
              .body = json_body(scratch),
              .allow = {}};
    default:
      return {.status = 200,
              .content_type = "text/plain; version=0.0.4",
              .body = {scratch.data(), metrics(scratch)},
              .allow = {}};
  }
}

std::size_t Routes::metrics(std::span<char> out) const {
  std::size_t size = 0;
  auto put = [&](const char* name, const char* type, const char* help, unsigned long long v) {
    if (size >= out.size()) return;
    const int n =
        std::snprintf(out.data() + size, out.size() - size, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n",
                      name, help, name, type, name, v);
    if (n > 0) size = std::min(out.size(), size + static_cast<std::size_t>(n));
  };
  const auto s = runtime_.scheduler().counters();
  put("arbor_scheduler_workers", "gauge", "Scheduler worker threads.",
      static_cast<unsigned long long>(runtime_.scheduler().workers()));
  put("arbor_scheduler_queued", "gauge",
      "Work items queued (global and local queues, including events packed in trees).", s.queued());
  put("arbor_scheduler_submitted_total", "counter", "Work items submitted.", s.submitted);
  put("arbor_scheduler_run_total", "counter", "Work items run.", s.run);
  put("arbor_scheduler_parks_total", "counter", "Times a worker parked.", s.parks);
  put("arbor_scheduler_wakes_total", "counter", "Times a parked worker was woken.", s.wakes);
  put("arbor_scheduler_steals_total", "counter", "Items stolen from another worker.", s.steals);
  put("arbor_scheduler_spins_total", "counter", "Spin phases before parking.", s.spins);
  put("arbor_scheduler_driver_waits_total", "counter",
      "Times an idle worker waited in the IO engine instead of parking.", s.driver_waits);
  put("arbor_scheduler_driver_polls_total", "counter",
      "Looks into the IO engine without waiting, by workers with work.", s.driver_polls);
  put("arbor_task_exceptions_unobserved_total", "counter",
      "Exceptions that ended a detached task (each also logged).", unobserved_task_exceptions());
  const auto& pool = runtime_.engine().event_pool();
  put("arbor_event_pool_idle", "gauge", "Pooled event items idle now.", pool.idle());
  put("arbor_event_pool_allocated_total", "counter", "Event items ever allocated.",
      pool.allocated());
  put("arbor_frame_pool_heap_allocations_total", "counter",
      "Coroutine frames taken from the heap (not from the pool).", frame_pool::heap_allocations());
  const auto e = runtime_.engine().counters();
  put("arbor_engine_waits_total", "counter", "Poller waits.", e.waits);
  put("arbor_engine_events_total", "counter", "Completions and timers delivered.", e.events);
  put("arbor_engine_trees_total", "counter", "Event trees submitted.", e.trees);
  put("arbor_engine_wakes_total", "counter", "Poller wake-ups from other threads.", e.wakes);
  put("arbor_engine_descriptors", "gauge", "Sockets attached.", e.descriptors);
  put("arbor_engine_timers", "gauge", "Timers pending.", e.timers);
  for (std::size_t i = 0; i < e.named_count; ++i) {  // what only this engine counts
    char name[96];
    std::snprintf(name, sizeof name, "arbor_engine_%s_total", e.named[i].name);
    put(name, "counter", e.named[i].help, e.named[i].value);
  }
  if (const http::Server* server = server_.load()) {
    const auto c = server->counters();
    put("arbor_http_connections", "gauge", "Open connections.", c.connections_active);
    put("arbor_http_connections_idle", "gauge",
        "Open connections waiting for a request, with nothing of one received.",
        c.connections_idle);
    put("arbor_http_connections_total", "counter", "Connections accepted.", c.connections_total);
    put("arbor_http_connections_rejected_total", "counter",
        "Connections closed at once: over --max-connections with none idle.",
        c.connections_rejected);
    put("arbor_http_connections_evicted_total", "counter",
        "Idle connections closed to admit a new one at --max-connections.", c.connections_evicted);
    put("arbor_http_requests_total", "counter", "Requests answered.", c.requests);
    put("arbor_http_parse_errors_total", "counter", "Requests refused by the parser.",
        c.parse_errors);
    put("arbor_http_timeouts_total", "counter", "Connections cut off by a timeout.", c.timeouts);
    put("arbor_http_tls_handshakes_failed_total", "counter",
        "HTTPS handshakes that failed (0 without --tls-cert).", c.tls_handshakes_failed);
    put("arbor_http_buffers_lent", "gauge",
        "Connection buffers lent out now: connections with a request in hand.", c.buffers_lent);
    put("arbor_http_buffers_kept", "gauge", "Connection buffers kept free for reuse.",
        c.buffers_kept);
  }
  return size;
}

}  // namespace arbor::example
