// The usage error: a command line, a flag's value or a file the user named that cannot be
// used. `ringtape` prints its message and exits with status 2 (a bad invocation), where an
// rt::Error exits with 1 (a failure while running). Code under every layer throws it where
// the remedy is the user's (another value, another file); it is not an rt::Error, so a
// `catch (const Error&)` that reports a runtime failure never swallows it.
#pragma once

#include <stdexcept>

namespace rt {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace rt
