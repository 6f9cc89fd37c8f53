// cuptiActivityPush/PopExternalCorrelationId on the emulator's per-thread stack of
// external ids, kinds kept as Note [External ids carry their kind] (cupti_external.h) says.
#include "cuda_emu/cupti_external.h"

#include <cstdio>

#include "cuda_emu/emu.h"

namespace rt::emu::cupti {
namespace {

bool valid_kind(CUpti_ExternalCorrelationKind kind) {
  return int(kind) > int(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID) &&
         int(kind) < int(CUPTI_EXTERNAL_CORRELATION_KIND_SIZE);
}

CUpti_ExternalCorrelationKind kind_of(uint64_t packed) { return CUpti_ExternalCorrelationKind(packed >> kKindShift); }

}  // namespace

std::vector<ExternalId> innermost_per_kind(const std::vector<uint64_t>& stack) {
  std::vector<ExternalId> out;
  for (int k = CUPTI_EXTERNAL_CORRELATION_KIND_INVALID + 1; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++k)
    for (auto it = stack.rbegin(); it != stack.rend(); ++it)
      if (int(kind_of(*it)) == k) {
        out.push_back({CUpti_ExternalCorrelationKind(k), *it & kMaxExternalId});
        break;
      }
  return out;
}

}  // namespace rt::emu::cupti

using namespace rt::emu::cupti;

CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (!valid_kind(kind)) return CUPTI_ERROR_INVALID_PARAMETER;
  if (id > kMaxExternalId) {
    std::fprintf(stderr,
                 "cuda-emu: CUPTI: external correlation id %#llx is too large for the emulator (ids below 2^61: Note "
                 "[External ids carry their kind] in cuda_emu/cupti_external.h)\n",
                 (unsigned long long)id);
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  rt::emu::push_external_id(pack_external(kind, id));
  return CUPTI_SUCCESS;
}

// Pops the innermost id of `kind`; ids of other kinds pushed after it stay, in order (the
// emulator's stack only pops its top: they come off and go back).
CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* last_id) {
  if (!valid_kind(kind)) return CUPTI_ERROR_INVALID_PARAMETER;
  std::vector<uint64_t> above;  // popped entries of other kinds, innermost first
  uint64_t v = 0;
  bool found = false;
  while (rt::emu::pop_external_id(&v)) {
    if (kind_of(v) == kind) {
      found = true;
      break;
    }
    above.push_back(v);
  }
  for (auto it = above.rbegin(); it != above.rend(); ++it) rt::emu::push_external_id(*it);
  if (!found) return CUPTI_ERROR_QUEUE_EMPTY;
  if (last_id) *last_id = v & kMaxExternalId;
  return CUPTI_SUCCESS;
}
