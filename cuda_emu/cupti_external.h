// CUPTI's external correlation ids on the emulator's per-thread stack (cuda_emu/emu.h,
// push_external_id), which each queued operation captures: how the CUPTI fake keeps the
// kind of each id there (cuda_emu/cupti_external.cc).
#pragma once

#include <cupti.h>

#include <cstdint>
#include <vector>

namespace rt::emu::cupti {

// Note [External ids carry their kind]
// CUPTI keeps one stack of external ids per kind (CUSTOM0, CUSTOM1, ...) and precedes each
// activity with one ExternalCorrelation record per kind, naming the innermost id of that
// kind. The emulator keeps one untyped stack per thread, so the fake stores each id with its
// kind in the top 3 bits (kinds 1-5 fit); ids of 2^61 and above are refused with
// CUPTI_ERROR_INVALID_PARAMETER. An entry with kind bits 0 was not pushed through CUPTI and
// is ignored.
constexpr int kKindShift = 61;
constexpr uint64_t kMaxExternalId = (uint64_t(1) << kKindShift) - 1;

inline uint64_t pack_external(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  return (uint64_t(kind) << kKindShift) | id;
}

struct ExternalId {
  CUpti_ExternalCorrelationKind kind;
  uint64_t id;
};

// The innermost id of each kind in a captured stack (innermost last), in kind order.
std::vector<ExternalId> innermost_per_kind(const std::vector<uint64_t>& stack);

}  // namespace rt::emu::cupti
