// What memory is for. Every allocation is charged to the calling thread's current tag,
// set with a MemoryTagScope, so an allocator can say what filled memory at its peak
// (AllocatorStats::tag_at_peak) and what holds it when it runs out.
//
// Note [Memory tags]
// The tag is read once, at allocate time, and remembered with the block; the block's free
// subtracts from that tag whatever the freeing thread's tag is (a tensor made in forward
// under `activations` and freed in backward under `gradients` stays an activation). Code
// that sets no scope allocates under `other`.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt {

// `workspace` stays last: kNumMemoryTags counts up to it.
enum class MemoryTag : uint8_t { other, parameters, activations, gradients, optimizer_state, workspace };
inline constexpr size_t kNumMemoryTags = size_t(MemoryTag::workspace) + 1;

// "other", "parameters", "activations", "gradients", "optimizer_state", "workspace": the
// keys of memory reports (engine/memory_report.h).
inline const char* memory_tag_name(MemoryTag t) {
  static constexpr const char* kNames[] = {"other",     "parameters",      "activations",
                                           "gradients", "optimizer_state", "workspace"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumMemoryTags, "a MemoryTag without a name");
  return size_t(t) < kNumMemoryTags ? kNames[size_t(t)] : "invalid";
}

namespace detail {
// Constant-initialised and trivially destructible, so reading it is a plain TLS load.
inline thread_local MemoryTag current_memory_tag = MemoryTag::other;
}  // namespace detail

// The tag that allocations on this thread are charged to now.
inline MemoryTag current_memory_tag() noexcept { return detail::current_memory_tag; }

// Charges this thread's allocations to `tag` until the scope ends, then restores the tag
// that was current before (scopes nest). Other threads are not affected: a data loader
// thread keeps its own tag.
class MemoryTagScope {
 public:
  explicit MemoryTagScope(MemoryTag tag) noexcept : previous_(detail::current_memory_tag) {
    detail::current_memory_tag = tag;
  }
  ~MemoryTagScope() { detail::current_memory_tag = previous_; }
  MemoryTagScope(const MemoryTagScope&) = delete;
  MemoryTagScope& operator=(const MemoryTagScope&) = delete;

 private:
  MemoryTag previous_;
};

}  // namespace rt
