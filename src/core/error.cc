#include "core/error.h"

namespace pagoda {

void fail_check(const char* file, int line, const char* condition, const std::string& message) {
  std::string text =
      fmt::format("internal error at {}:{}: check '{}' failed", file, line, condition);
  if (!message.empty()) text += ": " + message;
  throw InternalError(text);
}

}  // namespace pagoda
