// Private helpers shared by safetensors.cc and safetensors_save.cc.
#pragma once

#include <unistd.h>

namespace rt::io_detail {

// Closes a file descriptor when the scope ends, also on the error paths that throw.
struct FdCloser {
  explicit FdCloser(int f) : fd(f) {}
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
};

}  // namespace rt::io_detail
