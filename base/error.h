// Errors: every misuse becomes an rt::Error whose message names what was expected and
// what came. Library code never calls exit() or abort() on bad input.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Out of memory (host or device): `what()` is "<account>. <hint>", the allocator's account
// (no final period) and a hint for the usual cause (a batch too large). Callers that know
// the request came from elsewhere (a size a file declares) catch it and say so, with
// `without_hint()`.
class OutOfMemory : public Error {
 public:
  OutOfMemory(const std::string& account, const std::string& hint)
      : Error(hint.empty() ? account : account + ". " + hint), account_(account) {}
  const std::string& without_hint() const { return account_; }

 private:
  std::string account_;
};

// A string from a file or the user (a tensor name, a JSON key, a csv row) as it may appear
// in a message: up to `max` bytes, else its first `max` bytes (not cutting a UTF-8
// character) and "... (N bytes)". A hostile file must not turn one error into megabytes.
inline constexpr size_t kMessageClip = 100;
inline std::string clip_for_message(std::string_view s, size_t max = kMessageClip) {
  if (s.size() <= max) return std::string(s);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return std::string(s.substr(0, cut)) + "... (" + std::to_string(s.size()) + " bytes)";
}

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
