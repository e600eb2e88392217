// The request side of the HTTP layer apart from sockets: the parser with its limits, the refusals
// of a request's head or of a read that failed, and the Request a handler sees. The server and the
// HTTP fuzzer share it.
#pragma once

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <optional>
#include <string>

#include "server/http.h"

namespace pagoda::http {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

struct Refusal {
  int status;
  std::string message;
};

// The most bytes received and not yet parsed a connection holds: the header limit and room for
// the reads in flight. A line that never ends (a chunk header's endless extension) cannot pass it.
inline size_t unparsed_limit(const Limits& limits) {
  return limits.max_header_bytes + (64 << 10);
}
// Bounds the parser's header and body (chunked bodies included) by `limits`.
void limit_parser(RequestParser& parser, const Limits& limits);
// Why a request whose head has been read is refused: a content encoding other than identity
// (415). Framing that is ambiguous (Content-Length with chunked) the parser itself refuses.
std::optional<Refusal> refuse_head(const RequestParser::value_type& head);
// The answer to a read that failed: none when the client simply closed, else the refusal.
std::optional<Refusal> refuse_read_error(const boost::system::error_code& error,
                                         const Limits& limits);
// The parsed request, its body moved out of the parser.
Request take_request(RequestParser& parser);
bool iequals(std::string_view a, std::string_view b);

}  // namespace pagoda::http
