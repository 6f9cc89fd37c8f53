// Scratch memory for kernels (patch matrices, gathered gradients). Each thread has a few
// slots; a slot grows to the largest request it has seen and is then reused, so a
// training step allocates and page-faults nothing after the first. Not zero-filled:
// every kernel writes a scratch buffer completely before reading it.
#pragma once

#include <cstddef>

namespace rt::cpu {

inline constexpr int kScratchSlots = 6;

void* scratch_bytes(int slot, size_t bytes);  // 64-byte aligned
size_t scratch_reserved_bytes();              // this thread's total, for memory reports

template <typename T>
T* scratch(int slot, size_t count) {
  return static_cast<T*>(scratch_bytes(slot, count * sizeof(T)));
}

}  // namespace rt::cpu
