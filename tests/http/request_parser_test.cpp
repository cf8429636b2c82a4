// RequestParser: the grammar, the limits, and arrival split at every byte.
#include "arbor/http/request_parser.hpp"

#include <gtest/gtest.h>

#include <string>

#include "arbor/http/date.hpp"

namespace arbor::http {
namespace {

using Status = RequestParser::Status;

// Parses `text` as it would arrive split at `cut`: the buffer grows one byte at a time up to
// `cut`, then all at once.
Status parse_split_at(RequestParser& p, const std::string& text, std::size_t cut) {
  Status s = Status::incomplete;
  for (std::size_t n = 1; n <= cut && s == Status::incomplete; ++n)
    s = p.parse({text.data(), n});
  if (s == Status::incomplete) s = p.parse({text.data(), text.size()});
  return s;
}

// Parses `text` in one go; the error status, or 0 if complete, or -1 if incomplete.
int outcome(const std::string& text, Limits limits = {}) {
  RequestParser p(limits);
  switch (p.parse({text.data(), text.size()})) {
    case Status::complete:
      return 0;
    case Status::incomplete:
      return -1;
    case Status::error:
      return p.error_status();
  }
  return -2;
}

TEST(RequestParser, ParsesARequestAndItsFields) {
  const std::string text =
      "GET /plaintext?x=1 HTTP/1.1\r\nHost: example\r\nAccept:  text/plain \r\nX-Empty:\r\n\r\n";
  RequestParser p;
  ASSERT_EQ(p.parse({text.data(), text.size()}), Status::complete);
  const Request& r = p.request();
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/plaintext?x=1");
  EXPECT_EQ(r.version_minor, 1);
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(r.content_length, 0u);
  EXPECT_EQ(r.field("accept"), "text/plain");
  EXPECT_EQ(r.field("HOST"), "example");
  EXPECT_EQ(r.field("x-empty"), "");
  EXPECT_EQ(r.fields.size(), 3u);
  EXPECT_EQ(p.head_size(), text.size());
}

TEST(RequestParser, EverySplitPointGivesTheSameRequest) {
  const std::string text =
      "POST /json HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: close\r\n\r\n";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    RequestParser p;
    const Status s = parse_split_at(p, text, cut);
    ASSERT_EQ(s, Status::complete) << "cut at " << cut;
    EXPECT_EQ(p.request().method, "POST");
    EXPECT_EQ(p.request().content_length, 5u);
    EXPECT_FALSE(p.request().keep_alive);
    EXPECT_EQ(p.head_size(), text.size());
  }
}

TEST(RequestParser, PipelinedRequestsParseOneAfterAnother) {
  const std::string one = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string two = "GET /b HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string both = one + two + "GET /c";
  RequestParser p;
  ASSERT_EQ(p.parse({both.data(), both.size()}), Status::complete);
  EXPECT_EQ(p.request().target, "/a");
  std::size_t at = p.head_size();
  p.reset();
  ASSERT_EQ(p.parse({both.data() + at, both.size() - at}), Status::complete);
  EXPECT_EQ(p.request().target, "/b");
  at += p.head_size();
  p.reset();
  EXPECT_EQ(p.parse({both.data() + at, both.size() - at}), Status::incomplete);
}

TEST(RequestParser, ConnectionSemanticsPerVersion) {
  RequestParser p;
  std::string t = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(p.parse({t.data(), t.size()}), Status::complete);
  EXPECT_FALSE(p.request().keep_alive);
  EXPECT_EQ(p.request().version_minor, 0);
  p.reset();
  t = "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
  ASSERT_EQ(p.parse({t.data(), t.size()}), Status::complete);
  EXPECT_TRUE(p.request().keep_alive);
  p.reset();
  t = "GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade, close\r\n\r\n";
  ASSERT_EQ(p.parse({t.data(), t.size()}), Status::complete);
  EXPECT_FALSE(p.request().keep_alive);
}

TEST(RequestParser, MalformedRequestsAre400) {
  for (const char* bad : {
           "GET\r\n\r\n",                                   // no target
           "GET  / HTTP/1.1\r\nHost: h\r\n\r\n",            // empty target
           "G(T / HTTP/1.1\r\nHost: h\r\n\r\n",             // not a token
           "GET / HTTP/1.1 \r\nHost: h\r\n\r\n",            // trailing space
           "GET / HTTX/1.1\r\nHost: h\r\n\r\n",             // version
           "GET / HTTP/1.1\nHost: h\r\n\r\n",               // bare LF
           "GET / HTTP/1.1\r\nHost: h\n\r\n",               // bare LF in a field
           "GET / HTTP/1.1\r\n\r\n",                        // HTTP/1.1 without Host
           "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",  // two Hosts
           "GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n",  // obsolete folding
           "GET / HTTP/1.1\r\nHost : h\r\n\r\n",            // space before colon
           "GET / HTTP/1.1\r\nHost h\r\n\r\n",              // no colon
           "GET / HTTP/1.1\r\nHost: h\x01\r\n\r\n",         // control character
           "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n",
           "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n",
           "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
           "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
       }) {
    EXPECT_EQ(outcome(bad), 400) << bad;
  }
}

TEST(RequestParser, LimitsAndUnsupportedFeaturesHaveTheirStatus) {
  Limits small;
  small.max_request_line = 64;
  small.max_head = 256;
  small.max_fields = 4;
  small.max_body = 100;
  const std::string long_target(100, 'a');
  EXPECT_EQ(outcome("GET /" + long_target + " HTTP/1.1\r\nHost: h\r\n\r\n", small), 414);
  EXPECT_EQ(outcome("GET /" + long_target, small), 414);  // known before the line ends
  EXPECT_EQ(outcome("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(300, 'v'), small), 431);
  EXPECT_EQ(outcome("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", small),
            431);
  EXPECT_EQ(outcome("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n", small), 413);
  EXPECT_EQ(outcome("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n", small), 0);
  EXPECT_EQ(outcome("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
  EXPECT_EQ(outcome("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(outcome("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n"),
            501);
  // RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 is faulty framing.
  EXPECT_EQ(outcome("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(outcome("GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
  EXPECT_EQ(outcome("GET / HTTP/1.1\r\nHost: h\r\n"), -1);
}

TEST(RequestParser, AnErrorIsSticky) {
  RequestParser p;
  const std::string bad = "BAD\r\n";
  EXPECT_EQ(p.parse({bad.data(), bad.size()}), Status::error);
  EXPECT_EQ(p.parse({bad.data(), bad.size()}), Status::error);
  p.reset();
  const std::string good = "GET / HTTP/1.0\r\n\r\n";
  EXPECT_EQ(p.parse({good.data(), good.size()}), Status::complete);
}

// RFC 9112 §3.2.2: "A server MUST accept the absolute-form in requests"; the host comes from
// the target, not from the Host field.
TEST(RequestParser, Rfc9112_3_2_2_AbsoluteFormGivesPathQueryAndHost) {
  RequestParser p;
  std::string t = "GET http://example.org:8080/plaintext?x=1 HTTP/1.1\r\nHost: other\r\n\r\n";
  ASSERT_EQ(p.parse({t.data(), t.size()}), Status::complete);
  EXPECT_EQ(p.request().target, "http://example.org:8080/plaintext?x=1");
  EXPECT_EQ(p.request().path, "/plaintext");
  EXPECT_EQ(p.request().query, "x=1");
  EXPECT_EQ(p.request().host, "example.org:8080");
  p.reset();
  t = "GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n";  // the scheme is case-insensitive
  ASSERT_EQ(p.parse({t.data(), t.size()}), Status::complete);
  EXPECT_EQ(p.request().path, "/");  // an empty path is "/"
  EXPECT_EQ(p.request().host, "h");
  p.reset();
  t = "GET http://h?q HTTP/1.1\r\nHost: h\r\n\r\n";
  ASSERT_EQ(p.parse({t.data(), t.size()}), Status::complete);
  EXPECT_EQ(p.request().path, "/");
  EXPECT_EQ(p.request().query, "q");
  // Origin-form: the host is the Host field's.
  p.reset();
  t = "GET /a?b HTTP/1.1\r\nHost: origin\r\n\r\n";
  ASSERT_EQ(p.parse({t.data(), t.size()}), Status::complete);
  EXPECT_EQ(p.request().path, "/a");
  EXPECT_EQ(p.request().query, "b");
  EXPECT_EQ(p.request().host, "origin");
  // RFC 9110 §4.2.1 (no empty host) and §4.2.4 (no userinfo).
  EXPECT_EQ(outcome("GET http:///x HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(outcome("GET http://u@h/x HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  // RFC 9112 §3.2: Host is still required in HTTP/1.1.
  EXPECT_EQ(outcome("GET http://h/x HTTP/1.1\r\n\r\n"), 400);
}

// RFC 9112 §2.2: a server "SHOULD ignore at least one empty line (CRLF) received prior to the
// request-line". A few are ignored (CRLF or bare LF); one more than the bound is a 400.
// RFC 9112 §3.2: a Host that is not uri-host [ ":" port ] is 400, in the field or in an
// absolute-form target (it reached handlers unchanged: Host-header injection in apps that
// build URLs from it).
TEST(RequestParser, Rfc9112_3_2_AnInvalidHostIs400) {
  for (const char* host : {"a b", "a/b", "a\tb", "", "<script>", "h:8o", "[::1", "[]", "a%zz",
                           "a%2", "a\"b", ":80", "a@b", "a?b", "a#b", "[::1]x"}) {
    EXPECT_EQ(outcome(std::string("GET / HTTP/1.1\r\nHost: ") + host + "\r\n\r\n"), 400)
        << "Host: " << host;
    EXPECT_EQ(outcome(std::string("GET / HTTP/1.0\r\nHost: ") + host + "\r\n\r\n"), 400)
        << "HTTP/1.0 Host: " << host;
  }
  for (const char* host :
       {"example.com", "example.com:8080", "127.0.0.1:80", "[::1]", "[::1]:80",
        "xn--bcher-kva.example", "a%20b", "h:", "sub_domain.example", "~!$&'()*+,;="}) {
    EXPECT_EQ(outcome(std::string("GET / HTTP/1.1\r\nHost: ") + host + "\r\n\r\n"), 0)
        << "Host: " << host;
  }
  EXPECT_EQ(outcome("GET http://a<b/x HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(outcome("GET http://[::1]:8080/x HTTP/1.1\r\nHost: h\r\n\r\n"), 0);
}

// RFC 9110 §8.6: Content-Length is 1*DIGIT; leading zeros do not make it too long (a 20-digit
// zero-padded value was 400). Twenty significant digits still are.
TEST(RequestParser, Rfc9110_8_6_AZeroPaddedContentLengthIsItsValue) {
  RequestParser p;
  const std::string text =
      "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 00000000000000000005\r\n\r\n";
  ASSERT_EQ(p.parse({text.data(), text.size()}), Status::complete);
  EXPECT_EQ(p.request().content_length, 5u);
  EXPECT_EQ(
      outcome("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0000000000000000000000000\r\n\r\n"),
      0);
  EXPECT_EQ(outcome("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10000000000000000000\r\n\r\n"),
            400);
}

TEST(RequestParser, Rfc9112_2_2_LeadingEmptyLinesAreIgnoredUpToABound) {
  for (const std::string lead : {"\r\n", "\n", "\r\n\n\r\n"}) {
    const std::string text = lead + "GET /x HTTP/1.1\r\nHost: h\r\n\r\n";
    for (std::size_t cut = 0; cut <= text.size(); ++cut) {
      RequestParser p;
      const Status s = parse_split_at(p, text, cut);
      ASSERT_EQ(s, Status::complete) << "cut at " << cut;
      EXPECT_EQ(p.request().path, "/x");
      EXPECT_EQ(p.head_size(), text.size());  // the empty lines are consumed with the request
    }
  }
  std::string many;
  for (std::size_t i = 0; i < RequestParser::kMaxLeadingEmptyLines; ++i)
    many += "\r\n";
  EXPECT_EQ(outcome(many + "GET / HTTP/1.0\r\n\r\n"), 0);
  EXPECT_EQ(outcome(many + "\r\n"), 400);  // known at once, with no request line in sight
  EXPECT_EQ(outcome(many), -1);
  EXPECT_EQ(outcome("\r\rGET / HTTP/1.0\r\n\r\n"), 400);
}

// RFC 9110 §5.6.2 (tchar), RFC 9112 §3: the request line is refused at its first byte that
// cannot belong to it, without waiting for a line end.
TEST(RequestParser, Rfc9112_3_RequestLineGarbageIsRefusedAtItsFirstByte) {
  EXPECT_EQ(outcome("\x16\x03\x01\x02\x00"), 400);  // a TLS ClientHello
  EXPECT_EQ(outcome("GE(T"), 400);
  EXPECT_EQ(outcome(" GET"), 400);
  EXPECT_EQ(outcome("GET /a\x01"), 400);
  EXPECT_EQ(outcome("GET /\xc3\xa9"), 400);  // obs-text is not allowed in a target
  EXPECT_EQ(outcome("GET  /"), 400);
  EXPECT_EQ(outcome("GET / HTTQ"), 400);
  EXPECT_EQ(outcome("GET / HTTP/1.1 "), 400);
  EXPECT_EQ(outcome("GET / HTTP/1.1\rX"), 400);
  // Every prefix of a good request line is still only incomplete.
  const std::string good = "GET /a?b=c HTTP/1.1\r\n";
  for (std::size_t n = 1; n <= good.size(); ++n)
    EXPECT_EQ(outcome(good.substr(0, n)), -1) << n;
}

TEST(RequestParser, FieldCountLimitDefaultsTo100) {
  std::string head = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 1; i < 100; ++i)
    head += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(outcome(head + "\r\n"), 0);  // 100 fields
  EXPECT_EQ(outcome(head + "X-100: v\r\n\r\n"), 431);
  // Caller-owned storage bounds the count too.
  Field storage[3];
  Limits limits;
  limits.max_fields = 50;
  RequestParser p(limits, storage);
  EXPECT_EQ(p.limits().max_fields, 3u);
  const std::string four = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
  EXPECT_EQ(p.parse({four.data(), four.size()}), Status::error);
  EXPECT_EQ(p.error_status(), 431);
}

TEST(HttpDate, FormatsImfFixdate) {
  char out[kDateSize];
  format_http_date(784111777, out);  // RFC 9110's example
  EXPECT_EQ(std::string(out, kDateSize), "Sun, 06 Nov 1994 08:49:37 GMT");
  format_http_date(0, out);
  EXPECT_EQ(std::string(out, kDateSize), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(http_date().size(), kDateSize);
}

}  // namespace
TEST(RequestParser, ChunkedTransferEncodingIsAccepted) {
  RequestParser p;
  const std::string text = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n";
  ASSERT_EQ(p.parse({text.data(), text.size()}), Status::complete);
  EXPECT_TRUE(p.request().chunked);
  EXPECT_EQ(p.request().content_length, 0u);
}

// ---- ChunkedDecoder ------------------------------------------------------------------------

struct Decoded {
  ChunkedDecoder::Status status;
  std::string body;
  std::size_t consumed;
  int error;
};

// Decodes `text` as it would arrive in two reads split at `cut`, into `room` bytes.
Decoded decode_split_at(const std::string& text, std::size_t cut, std::size_t room = 100,
                        std::size_t max_trailers = 64) {
  std::string out(room, '\0');
  ChunkedDecoder d;
  d.reset({out.data(), out.size()}, max_trailers);
  std::size_t used = 0;
  auto s = d.decode({text.data(), cut}, used);
  std::size_t consumed = used;
  if (s == ChunkedDecoder::Status::incomplete) {
    EXPECT_EQ(used, cut) << "an incomplete decode consumes all it is given";
    s = d.decode({text.data() + cut, text.size() - cut}, used);
    consumed += used;
  }
  return {s, out.substr(0, d.size()), consumed, d.error_status()};
}

TEST(ChunkedDecoder, DecodesAtEverySplitAndStopsAtTheBodyEnd) {
  const std::string body = "5\r\nhello\r\n1a;name=value;flag\r\n" + std::string(26, 'z') +
                           "\r\n1 ;x\r\n!\r\n000\r\nTrailer-One: v\r\nT2:\r\n\r\n";
  const std::string text = body + "GET / HTTP/1.1\r\n";  // the next request: not consumed
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    const Decoded d = decode_split_at(text, cut);
    ASSERT_EQ(d.status, ChunkedDecoder::Status::complete) << "cut " << cut << ": " << d.error;
    EXPECT_EQ(d.body, "hello" + std::string(26, 'z') + "!") << "cut " << cut;
    EXPECT_EQ(d.consumed, body.size()) << "cut " << cut;
  }
  // Cut short anywhere: incomplete, never an error.
  for (std::size_t n = 0; n < body.size(); ++n)
    EXPECT_EQ(decode_split_at(body.substr(0, n), n / 2).status, ChunkedDecoder::Status::incomplete)
        << n;
  // An empty body.
  EXPECT_EQ(decode_split_at("0\r\n\r\n", 2).body, "");
}

TEST(ChunkedDecoder, MalformedOrOversizedBodiesHaveTheirStatusAtEverySplit) {
  const std::string long_extension = "1;" + std::string(ChunkedDecoder::kMaxExtension + 1, 'e');
  const struct {
    std::string text;
    int status;
  } cases[] = {
      {"\r\n", 400},                                           // no chunk size
      {"g\r\n", 400},                                          // not hex
      {"-1\r\n", 400},                                         // not hex
      {"0x5\r\nhello\r\n0\r\n\r\n", 400},                      // no prefix either
      {"5\n", 400},                                            // bare LF
      {"5 6\r\n", 400},                                        // more after whitespace, not ';'
      {"5\r\nhelloX\r\n", 400},                                // data longer than its size
      {"5\r\nhello\n0\r\n\r\n", 400},                          // bare LF after data
      {"1;a\x01\r\nx\r\n0\r\n\r\n", 400},                      // control character in an extension
      {long_extension + "\r\n", 400},                          // extension beyond its bound
      {"0\r\nBad Name: v\r\n\r\n", 400},                       // not a token
      {"0\r\n: v\r\n\r\n", 400},                               // empty name
      {"0\r\nX: a\x7f\r\n\r\n", 400},                          // control character in a value
      {"0\r\n\n", 400},                                        // bare LF ends the trailers
      {"65\r\n", 413},                                         // 101 > the 100 bytes of room
      {"60\r\n" + std::string(96, 'x') + "\r\n5\r\n", 413},    // in all
      {"FFFFFFFFFFFFFFFFFFFFFFFF\r\n", 413},                   // would overflow: refused first
      {"0\r\nX: " + std::string(100, 'v') + "\r\n\r\n", 431},  // trailers beyond 64
  };
  for (const auto& k : cases) {
    for (std::size_t cut = 0; cut <= k.text.size(); ++cut) {
      const Decoded d = decode_split_at(k.text, cut);
      ASSERT_EQ(d.status, ChunkedDecoder::Status::error) << k.text << " cut " << cut;
      EXPECT_EQ(d.error, k.status) << k.text << " cut " << cut;
    }
  }
}

}  // namespace arbor::http
