#include "server/http_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

namespace pagoda::http {

namespace beast = boost::beast;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

void limit_parser(RequestParser& parser, const Limits& limits) {
  parser.header_limit(static_cast<uint32_t>(limits.max_header_bytes));
  parser.body_limit(limits.max_body_bytes);
}

std::optional<Refusal> refuse_head(const RequestParser::value_type& head) {
  const auto encoding = head[beast::http::field::content_encoding];
  const std::string_view value(encoding.data(), encoding.size());
  if (!value.empty() && !iequals(value, "identity")) {
    return Refusal{415,
                   fmt::format("Content-Encoding '{}' is not accepted; send the body unencoded",
                               value.substr(0, 40))};
  }
  return std::nullopt;
}

std::optional<Refusal> refuse_read_error(const boost::system::error_code& code,
                                         const Limits& limits) {
  using beast::http::error;
  namespace asio = boost::asio;
  if (code == error::end_of_stream || code == asio::error::eof ||
      code == asio::error::operation_aborted || code == asio::error::connection_reset ||
      code == asio::error::bad_descriptor) {
    return std::nullopt;
  }
  if (code == error::body_limit) {
    return Refusal{413, fmt::format("the request body is over {} bytes", limits.max_body_bytes)};
  }
  if (code == error::header_limit || code == error::buffer_overflow) {
    return Refusal{431,
                   fmt::format("the request headers are over {} bytes", limits.max_header_bytes)};
  }
  return Refusal{400, fmt::format("malformed HTTP request: {}", code.message())};
}

Request take_request(RequestParser& parser) {
  auto& message = parser.get();
  Request request;
  request.method = std::string(message.method_string());
  const std::string_view target(message.target().data(), message.target().size());
  request.path = std::string(target.substr(0, target.find('?')));
  for (const auto& field : message) {
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  request.body = std::move(message.body());
  return request;
}

}  // namespace pagoda::http
