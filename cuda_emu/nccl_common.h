// What every part of the NCCL fake shares (--config=cuda-emu, cuda_emu/nccl_*.cc): the
// internal error type, NCCL_DEBUG logging and the last error (ncclGetLastError), the peer
// timeout, and the names and sizes of NCCL's data types and reduction operations.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace rt::emu::nccl {

using Clock = std::chrono::steady_clock;

// A failure inside the fake: NCCL's result code and the message ncclGetLastError returns.
// Thrown between the fake's own functions only; every entry point catches it and returns
// the code (or records it as the communicator's asynchronous error).
struct Error : std::runtime_error {
  Error(ncclResult_t c, const std::string& what) : std::runtime_error(what), code(c) {}
  ncclResult_t code;
};

// Note [Peer timeout]
// A real NCCL waits for ever for a peer that does not come: a rank that skipped or reordered
// a collective, one that crashed before ncclCommInitRank, a send with no receive. A test
// would then hang until its runner kills it, saying nothing. The fake gives up after
// RINGTAPE_EMU_NCCL_TIMEOUT seconds (default 300) without progress from the peer it waits
// for, and reports it (the communicator's asynchronous error, ncclRemoteError) naming that
// peer and the operation. Generous on purpose: under the emulator a rank may compute for
// minutes between two collectives while its peers wait in the second one.
Clock::duration peer_timeout();
std::string timeout_text();  // "300 s (RINGTAPE_EMU_NCCL_TIMEOUT)"

// NCCL_DEBUG=WARN prints warnings to stderr as NCCL does, NCCL_DEBUG=INFO also setup steps.
// warn() also makes `msg` the process's last error (NCCL keeps one, not one per
// communicator).
void warn(const std::string& msg);
void info(const std::string& msg);
std::string last_error();

// Bytes per element; 0 for a value that is not an ncclDataType_t.
size_t type_size(ncclDataType_t t);
const char* type_name(ncclDataType_t t);  // "ncclFloat32"
const char* op_name(ncclRedOp_t op);      // "ncclSum"
// Whether the fake reduces this type (every type but the two fp8 formats, which only move).
bool reducible(ncclDataType_t t);

}  // namespace rt::emu::nccl
