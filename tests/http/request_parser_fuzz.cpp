// libFuzzer target for RequestParser: arbitrary bytes, fed whole and split in two, as a
// pipelined stream. Checks the parser's own promises on every input: no crash or sanitizer
// report, a head never larger than what it was given or than the limit, views inside the
// buffer, an error always with a status, and the same outcome however the bytes were split.
// A chunked request's body is then run through ChunkedDecoder the same two ways: the same
// outcome, body and bytes consumed, a body within its room, never more consumed than given.
//
//   make fuzz            (clang; runs for FUZZ_SECONDS, default 60)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "arbor/http/request_parser.hpp"

namespace {

using arbor::http::ChunkedDecoder;
using arbor::http::RequestParser;

void check(bool ok) {
  if (!ok) std::abort();
}

bool inside(std::string_view view, const char* data, std::size_t size) {
  return view.empty() || (view.data() >= data && view.data() + view.size() <= data + size);
}

struct Outcome {
  RequestParser::Status status;
  std::size_t head;
  int error;
};

Outcome parse_one(RequestParser& p, const char* data, std::size_t size, std::size_t split) {
  RequestParser::Status s = RequestParser::Status::incomplete;
  if (split > 0 && split < size) s = p.parse({data, split});
  if (s == RequestParser::Status::incomplete) s = p.parse({data, size});
  return {s, p.head_size(), p.error_status()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  if (size == 0) return 0;
  const auto* data = reinterpret_cast<const char*>(bytes);
  arbor::http::Limits limits;
  limits.max_request_line = 256;
  limits.max_head = 1024;
  limits.max_fields = 8;
  limits.max_body = 1000;
  const std::size_t split = bytes[0] % size;
  std::size_t at = 0;
  for (int requests = 0; at < size && requests < 64; ++requests) {
    RequestParser whole(limits), halves(limits);
    const Outcome a = parse_one(whole, data + at, size - at, 0);
    const Outcome b = parse_one(halves, data + at, size - at, split);
    check(a.status == b.status && a.error == b.error);
    if (a.status == RequestParser::Status::error) {
      check(a.error >= 400 && a.error <= 505);
      break;
    }
    if (a.status == RequestParser::Status::incomplete) break;
    check(a.head == b.head && a.head > 0 && a.head <= size - at && a.head <= limits.max_head);
    const auto& r = whole.request();
    check(inside(r.method, data + at, a.head) && inside(r.target, data + at, a.head));
    check(inside(r.path, data + at, a.head) || r.path == "/");
    check(inside(r.query, data + at, a.head) && inside(r.host, data + at, a.head));
    check(r.fields.size() <= limits.max_fields);
    for (const auto& f : r.fields)
      check(inside(f.name, data + at, a.head) && inside(f.value, data + at, a.head));
    check(r.content_length <= limits.max_body);
    at += a.head;
    if (r.chunked) {
      char whole_out[1000], halves_out[1000];
      ChunkedDecoder one, two;
      one.reset(whole_out, 64);
      two.reset(halves_out, 64);
      const std::size_t rest = size - at, cut = split % (rest + 1);
      std::size_t used = 0, used2 = 0, more = 0;
      const auto s = one.decode({data + at, rest}, used);
      auto s2 = two.decode({data + at, cut}, used2);
      if (s2 == ChunkedDecoder::Status::incomplete) {
        check(used2 == cut);
        s2 = two.decode({data + at + cut, rest - cut}, more);
        used2 += more;
      }
      check(s == s2 && one.error_status() == two.error_status());
      if (s == ChunkedDecoder::Status::complete) check(used == used2);  // else: all, or moot
      check(used <= rest && one.size() <= sizeof whole_out && one.size() == two.size());
      check(std::memcmp(whole_out, halves_out, one.size()) == 0);
      if (s != ChunkedDecoder::Status::complete) break;
      at += used;
    }
  }
  return 0;
}
