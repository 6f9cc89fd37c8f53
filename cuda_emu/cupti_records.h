// CUPTI activity records from the emulator's launch log (cuda_emu/cupti_records.cc): one
// completed operation (rt::emu::Activity) as the records CUPTI would write for it, in
// CUPTI's own structs, and the size of each kind of record in a buffer.
#pragma once

#include <cupti.h>

#include <cstddef>
#include <vector>

#include "cuda_emu/emu.h"

namespace rt::emu::cupti {

// The enabled activity kinds that the fake writes.
struct Wanted {
  bool kernel = false;             // CUPTI_ACTIVITY_KIND_KERNEL
  bool concurrent_kernel = false;  // CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
  bool memcpy = false;
  bool memset = false;
  bool external_correlation = false;
  bool any() const { return kernel || concurrent_kernel || memcpy || memset || external_correlation; }
};

// One record's bytes, its size a multiple of ACTIVITY_RECORD_ALIGNMENT.
using Record = std::vector<unsigned char>;

// The records of `a` that `w` asks for: its ExternalCorrelation records (one per kind with
// an id on the launching thread), then its own.
std::vector<Record> records_for(const Activity& a, const Wanted& w);

// The size of a record of kind `k` as the fake writes it; 0 for a kind it never writes.
size_t record_size(CUpti_ActivityKind k);

}  // namespace rt::emu::cupti
