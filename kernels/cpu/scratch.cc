#include "kernels/cpu/scratch.h"

#include <cstdlib>
#include <new>

namespace rt::cpu {
namespace {

struct Slot {
  void* ptr = nullptr;
  size_t bytes = 0;
  ~Slot() { std::free(ptr); }
};

thread_local Slot t_slots[kScratchSlots];

}  // namespace

void* scratch_bytes(int slot, size_t bytes) {
  Slot& s = t_slots[slot];
  if (bytes > s.bytes) {
    std::free(s.ptr);
    s.bytes = (bytes + 63) / 64 * 64;
    s.ptr = std::aligned_alloc(64, s.bytes);
    if (!s.ptr) {
      s.bytes = 0;
      throw std::bad_alloc();
    }
  }
  return s.ptr;
}

size_t scratch_reserved_bytes() {
  size_t n = 0;
  for (const Slot& s : t_slots) n += s.bytes;
  return n;
}

}  // namespace rt::cpu
