// Errors in three tiers (see CONVENTIONS.md): user-facing errors, broken invariants, device calls.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace pagoda {

// Bad input from a user, a file or a request. The message names the thing, the value and the limit.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A broken internal invariant; the message carries the source location.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

// Throws Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void fail_check(const char* file, int line, const char* condition,
                             const std::string& message);

}  // namespace pagoda

// Checks an internal invariant; throws InternalError naming the file, line and condition.
#define PAGODA_CHECK(cond, ...)                                                       \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      ::pagoda::fail_check(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                 \
  } while (0)
