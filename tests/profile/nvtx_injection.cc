// Note [NVTX injection]
// NVTX (nvtx3, header-only) looks for a tool at its first call: the library named by
// NVTX_INJECTION64_PATH, else a statically linked function pointer
// InitializeInjectionNvtx2_fnptr, which its headers declare weak and null. Defining it here
// as a strong symbol makes this test binary its own "tool": NVTX calls init() with its
// export table, and init() swaps the core module's RangePushA and RangePop entries for
// recorders. This file includes no NVTX header (their weak declaration would make this
// definition weak too); the few ABI constants below are NVTX's, from nvtxTypes.h:
// NVTX_ETID_CALLBACKS = 1, NVTX_CB_MODULE_CORE = 1, NVTX_CBID_CORE_RangePushA = 9,
// NVTX_CBID_CORE_RangePop = 11.
#include "tests/profile/nvtx_injection.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace rt::nvtx_test {

Seen& seen() {
  static Seen s;
  return s;
}

namespace {

using FnPtr = void (*)();
using FnTable = FnPtr**;
struct ExportTableCallbacks {
  size_t struct_size;
  int (*get_module_function_table)(int module, FnTable* out_table, unsigned int* out_size);
};
using GetExportTable = const void* (*)(uint32_t id);

constexpr uint32_t kEtidCallbacks = 1;
constexpr int kModuleCore = 1;
constexpr unsigned kRangePushA = 9, kRangePop = 11;

int push(const char* message) {
  Seen& s = seen();
  s.pushed.emplace_back(message ? message : "");
  s.max_depth = std::max(s.max_depth, ++s.depth);
  return s.depth - 1;
}

int pop() {
  Seen& s = seen();
  ++s.pops;
  return s.depth--;
}

int init(GetExportTable get) {
  const auto* cb = static_cast<const ExportTableCallbacks*>(get(kEtidCallbacks));
  if (!cb) return 0;
  FnTable table = nullptr;
  unsigned int size = 0;
  if (!cb->get_module_function_table(kModuleCore, &table, &size) || !table || size <= kRangePop) return 0;
  *table[kRangePushA] = reinterpret_cast<FnPtr>(&push);
  *table[kRangePop] = reinterpret_cast<FnPtr>(&pop);
  seen().initialised = true;
  return 1;
}

}  // namespace
}  // namespace rt::nvtx_test

extern "C" {
// The hook NVTX's loader calls (strong: overrides the headers' weak null).
int (*InitializeInjectionNvtx2_fnptr)(rt::nvtx_test::GetExportTable) = &rt::nvtx_test::init;
}
