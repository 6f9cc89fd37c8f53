// What a device memory allocator tells the emulated device (--config=cuda-emu) about the
// blocks it hands out from its cudaMalloc'd segments, so that a kernel's access is checked
// against the block, not against the whole segment: a handed-out block is readable only
// once written (its bytes are poisoned with 0xFF, a NaN in every float type), its rounding
// slack and every cached block are out of bounds. Under --config=cuda-emu-asan the same
// ranges are poisoned for AddressSanitizer. Pointers outside emulated device memory are
// ignored, so callers need not know which allocator they wrap.
//
// Note [Stream-ordered annotations]
// A block belongs to a stream, and freeing it on the host does not end the work already
// queued on that stream which uses it; a block handed out again to the same stream is used
// only by work queued after. So each annotation is itself queued on the block's stream
// (nullptr: the legacy default stream of the block's device) and takes effect when the
// stream gets there, not when the host calls.
#pragma once

#include <cstddef>

extern "C" {
void rt_emu_block_handed_out(const void* p, size_t requested, size_t size, void* stream);
void rt_emu_block_cached(const void* p, size_t size, void* stream);
}
