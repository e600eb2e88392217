// The HTTP layer fed raw bytes: the request parser with the server's limits, the checks of a
// request's head, and the Request a handler would see, with the bytes cut into reads at arbitrary
// places, as the network may cut them.
#include "fuzz/fuzz_util.h"
#include "server/http_parse.h"

using namespace pagoda;
using namespace pagoda::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Limits limits{.max_body_bytes = 4096, .max_header_bytes = 2048};
  const size_t step = 1 + data[0] % 64;  // the first byte picks the size of the reads
  std::string_view input = fuzz::as_text(data + 1, size - 1);
  std::string buffer;  // received and not yet parsed
  // Requests follow each other on one connection until one is refused or the bytes run out.
  for (int requests = 0; requests < 64; ++requests) {
    RequestParser parser;
    limit_parser(parser, limits);
    boost::system::error_code error;
    while (!parser.is_done()) {
      if (!buffer.empty()) {
        const size_t used = parser.put(boost::asio::buffer(buffer), error);
        buffer.erase(0, used);
        if (!error && used > 0) continue;
        if (error && error != boost::beast::http::error::need_more) break;
        error = {};
      }
      if (input.empty()) return 0;  // the client stopped sending
      if (buffer.size() >= unparsed_limit(limits))
        return 0;  // refused, as the server's buffer is full
      const size_t take = std::min(step, input.size());
      buffer.append(input.substr(0, take));
      input.remove_prefix(take);
    }
    if (error) {
      fuzz::expect_clean_errors([&] { (void)refuse_read_error(error, limits); });
      return 0;
    }
    if (refuse_head(parser.get())) return 0;
    const Request request = take_request(parser);
    if (request.body.size() > limits.max_body_bytes) __builtin_trap();
    (void)request.header("Content-Type");
  }
  return 0;
}
