// The message of an rt::Error, for tests that check what a user would read.
#pragma once

#include <functional>
#include <string>

#include "base/error.h"

namespace rt::dist::testing {

// The message of the rt::Error that f throws, "(no error)" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace rt::dist::testing
