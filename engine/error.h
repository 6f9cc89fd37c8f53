// Errors: every misuse becomes an rt::Error whose message names what was expected and
// what came. Library code never calls exit() or abort() on bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace rt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace rt

// RT_CHECK(cond, "message ", value, ...): throws rt::Error("message value...") when cond is
// false. The message is for the user: say what was expected, what came, and how to fix it.
#define RT_CHECK(cond, ...)                                      \
  do {                                                           \
    if (!(cond)) throw ::rt::Error(::rt::detail::cat(__VA_ARGS__)); \
  } while (0)

// RT_FAIL(...): unconditional rt::Error.
#define RT_FAIL(...) throw ::rt::Error(::rt::detail::cat(__VA_ARGS__))
