// Memory as the user reads it: a log line and a metrics.jsonl object per epoch or step,
// and the account an allocator gives when it runs out. All say which tags
// (engine/memory_tag.h) hold the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/device.h"
#include "base/error.h"
#include "engine/io/json.h"

namespace rt {

// Binary prefixes with one decimal: "0 B", "512 B", "1.5 KiB", "97.5 MiB", "31.2 GiB".
std::string format_bytes(int64_t bytes);

// "activations 24.1 GiB, parameters 97.5 MiB, gradients 97.5 MiB, optimizer state 97.5 MiB,
// workspace 1.2 GiB, other 0 B": every tag in this order (activations first, other last).
std::string format_tag_bytes(const TagBytes& bytes);

// One line for the training log:
// "memory cuda:0: peak 31.2 GiB allocated, 33.0 GiB reserved; at peak: activations 24.1 GiB,
// parameters 97.5 MiB, ..., other 0 B". Peaks are since the allocator's last reset_peak().
std::string memory_log_line(Device device, const AllocatorStats& s);

// For metrics.jsonl: {"device":"cuda:0","peak_allocated_bytes":N,"peak_reserved_bytes":N,
// "at_peak":{"activations":N,...,"other":N},"tag_peak":{...}}, tags keyed by
// memory_tag_name() in format_tag_bytes' order.
json::Value memory_json(Device device, const AllocatorStats& s);

// What an allocator knows when it gives up.
struct OutOfMemoryFacts {
  std::string failure;             // "CUDA out of memory on cuda:0", "out of host memory"
  size_t requested = 0;            // bytes asked for
  std::string request_detail;      // how it would have been served ("a 4194304-byte segment"), or empty
  AllocatorStats stats;            // at the failure
  int64_t largest_cached_free = 0; // the largest free block the allocator's cache still holds
  std::string system;              // "the device", "the machine"
  int64_t system_free = -1;        // what the system has left, -1 when unknown
  int64_t system_total = -1;
};

// Note [Out-of-memory messages]
// The account reads "<failure>: tried to allocate N bytes (1.0 GiB[, detail]); <system> has
// F of T free; tensors hold A (activations ..., by tag, non-zero only); the largest free
// block in the allocator's cache is L (of R reserved)". A large L beside a failure means
// fragmentation; a small R against T means something else holds the memory. Callers that
// add to the account (data/loading/batch.cc: "; it was for a batch of ...") rely on it ending in
// " reserved)". The hint names the flags that reduce memory (train/train_flags.cc's
// spellings).
OutOfMemory out_of_memory_error(const OutOfMemoryFacts& facts);

}  // namespace rt
