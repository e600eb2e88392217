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

#if defined(__CUDACC__)
// nvcc's front end cannot run fmt's compile-time format-string checks: CUDA sources format at run
// time.
template <typename... Args>
std::string format_message(std::string_view format, const Args&... args) {
  return fmt::vformat(format, fmt::make_format_args(args...));
}
template <typename... Args>
[[noreturn]] void fail(std::string_view format, const Args&... args) {
  throw Error(format_message(format, args...));
}
#else
template <typename... Args>
std::string format_message(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}
// Throws Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}
#endif

[[noreturn]] void fail_check(const char* file, int line, const char* condition,
                             const std::string& message);

}  // namespace pagoda

// Checks an internal invariant; throws InternalError naming the file, line and condition.
#define PAGODA_CHECK(cond, ...)                                                                  \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      ::pagoda::fail_check(__FILE__, __LINE__, #cond, ::pagoda::format_message("" __VA_ARGS__)); \
    }                                                                                            \
  } while (0)
