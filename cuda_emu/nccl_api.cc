// NCCL's C API as ringtape uses it, on the NCCL fake: the same names and signatures as the
// toolkit's nccl.h (whose declarations give them C linkage), linked instead of libnccl
// under --config=cuda-emu. Communicators (nccl_comm.h), their operations (nccl_ops.h) and
// group calls: between ncclGroupStart and ncclGroupEnd a thread's calls are collected and
// issued as one operation per communicator, so sends and receives that wait on each other
// move together. A function the engine starts to use and this file lacks is a link error,
// never a silent stub.
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "cuda_emu/nccl_bootstrap.h"
#include "cuda_emu/nccl_comm.h"
#include "cuda_emu/nccl_ops.h"

// The handle NCCL's API passes around. Freed by ncclCommDestroy / ncclCommAbort; the
// communicator itself lives on while queued operations still hold it.
struct ncclComm {
  std::shared_ptr<rt::emu::nccl::Comm> core;
};

using namespace rt::emu::nccl;

namespace {

// Live handles: a destroyed or aborted one is refused (ncclInvalidArgument) instead of used.
std::mutex g_live_mu;
std::unordered_set<ncclComm_t>& live() {
  static auto* s = new std::unordered_set<ncclComm_t>;  // leaked: used until the process ends
  return *s;
}

std::shared_ptr<Comm> core_of(ncclComm_t c) {
  std::lock_guard<std::mutex> g(g_live_mu);
  return live().count(c) ? c->core : nullptr;
}

bool unregister(ncclComm_t c) {
  std::lock_guard<std::mutex> g(g_live_mu);
  return live().erase(c) != 0;
}

ncclResult_t failed(ncclResult_t code, const std::string& msg) {
  warn(msg);
  return code;
}

ncclResult_t bad_comm(const char* api) {
  return failed(ncclInvalidArgument,
                std::string(api) + ": invalid communicator (NULL, or already destroyed or aborted)");
}

// The calling thread's group (ncclGroupStart/End nest).
struct Group {
  int depth = 0;
  ncclResult_t error = ncclSuccess;  // the first failed call of the group
  std::vector<std::pair<std::shared_ptr<Comm>, Op>> ops;
  std::vector<std::shared_ptr<Comm>> inits;  // blocking setups that ncclGroupEnd waits for
};
thread_local Group g_group;

ncclResult_t issue(ncclComm_t comm, Op op) {
  const char* api = kind_name(op.d.kind);
  std::shared_ptr<Comm> c = core_of(comm);
  ncclResult_t r = ncclSuccess;
  if (!c) {
    r = bad_comm(api);
  } else {
    try {
      c->check_usable(api);
      check_op(*c, op);
    } catch (const Error& e) {
      r = failed(e.code, e.what());
    }
  }
  if (r != ncclSuccess) {
    if (g_group.depth > 0 && g_group.error == ncclSuccess) g_group.error = r;
    return r;
  }
  if (op.d.count == 0) return ncclSuccess;  // NCCL queues nothing for an empty call
  if (g_group.depth > 0) {
    g_group.ops.emplace_back(std::move(c), op);
    return ncclSuccess;
  }
  return launch(c, {op});
}

Op make_op(Kind k, const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
           cudaStream_t s) {
  Op o;
  o.d.kind = k;
  o.d.dtype = t;
  o.d.op = op;
  o.d.root = root;
  o.d.count = count;
  o.send = send;
  o.recv = recv;
  o.stream = s;
  return o;
}

bool env_blocking() {  // NCCL_COMM_BLOCKING, NCCL's default for configs that leave it unset
  const char* v = std::getenv("NCCL_COMM_BLOCKING");
  return !v || !*v || std::atoi(v) != 0;
}

}  // namespace

// ---- versions and errors ---------------------------------------------------------------------
ncclResult_t ncclGetVersion(int* version) {
  if (!version) return failed(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {  // NCCL's own texts
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  // NCCL keeps one last error per process; a communicator that failed gives its own.
  thread_local std::string s;
  const std::shared_ptr<Comm> c = comm ? core_of(comm) : nullptr;
  s = c ? c->message() : "";
  if (s.empty()) s = last_error();
  return s.c_str();
}

// ---- communicators ---------------------------------------------------------------------------
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return failed(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  try {
    *id = make_unique_id();
  } catch (const Error& e) {
    return failed(e.code, std::string("ncclGetUniqueId: ") + e.what());
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  const char* api = "ncclCommInitRankConfig";
  if (!comm) return failed(ncclInvalidArgument, std::string(api) + ": comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return failed(ncclInvalidArgument, std::string(api) + ": rank " + std::to_string(rank) +
                                           " is not in [0, nranks) for nranks " + std::to_string(nranks));
  if (config && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t)))
    return failed(ncclInvalidArgument, std::string(api) + ": the config was not initialised with "
                                                          "NCCL_CONFIG_INITIALIZER");
  const bool blocking =
      !config || config->blocking == NCCL_CONFIG_UNDEF_INT ? env_blocking() : config->blocking != 0;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return failed(ncclUnhandledCudaError, std::string(api) + ": cudaGetDevice failed");
  auto core = std::make_shared<Comm>(nranks, rank, device, blocking);
  try {
    core->start_setup(id);
  } catch (const Error& e) {
    return failed(e.code, std::string(api) + ": " + e.what());
  }
  auto* handle = new ncclComm{core};
  {
    std::lock_guard<std::mutex> g(g_live_mu);
    live().insert(handle);
  }
  *comm = handle;
  if (g_group.depth > 0) {  // joins the others of the group at ncclGroupEnd
    if (blocking) g_group.inits.push_back(core);
    return blocking ? ncclSuccess : ncclInProgress;
  }
  if (!blocking) return ncclInProgress;
  core->join_threads();
  const ncclResult_t r = core->state();
  if (r != ncclSuccess) {  // a failed blocking setup leaves no communicator behind
    unregister(handle);
    core->abort();
    delete handle;
    *comm = nullptr;
  }
  return r;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  const std::shared_ptr<Comm> c = core_of(comm);
  if (!c) return bad_comm("ncclCommGetAsyncError");
  if (!async_error) return failed(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  *async_error = c->state();
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  const std::shared_ptr<Comm> c = core_of(comm);
  if (!c || !count) return bad_comm("ncclCommCount");
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  const std::shared_ptr<Comm> c = core_of(comm);
  if (!c || !device) return bad_comm("ncclCommCuDevice");
  *device = c->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  const std::shared_ptr<Comm> c = core_of(comm);
  if (!c || !rank) return bad_comm("ncclCommUserRank");
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  const std::shared_ptr<Comm> c = core_of(comm);
  if (!c) return bad_comm("ncclCommFinalize");
  return c->finalize();
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL
  if (!unregister(comm)) return bad_comm("ncclCommDestroy");
  comm->core->destroy();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL
  if (!unregister(comm)) return bad_comm("ncclCommAbort");
  comm->core->abort();
  delete comm;
  return ncclSuccess;
}

// ---- groups ----------------------------------------------------------------------------------
ncclResult_t ncclGroupStart() {
  ++g_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group.depth == 0) return failed(ncclInvalidUsage, "ncclGroupEnd without a matching ncclGroupStart");
  if (--g_group.depth > 0) return ncclSuccess;
  Group g = std::move(g_group);
  g_group = Group{};
  if (g.error != ncclSuccess) return g.error;  // a call of the group failed: none is issued
  ncclResult_t result = ncclSuccess;
  // One operation per communicator, its calls in issue order.
  std::vector<std::shared_ptr<Comm>> order;
  for (const auto& [c, op] : g.ops)
    if (std::find(order.begin(), order.end(), c) == order.end()) order.push_back(c);
  for (const std::shared_ptr<Comm>& c : order) {
    std::vector<Op> ops;
    for (const auto& [oc, op] : g.ops)
      if (oc == c) ops.push_back(op);
    const ncclResult_t r = launch(c, std::move(ops));
    if (result == ncclSuccess) result = r;
  }
  for (const std::shared_ptr<Comm>& c : g.inits) {
    c->join_threads();
    if (result == ncclSuccess) result = c->state();
  }
  return result;
}

// ---- collectives and transfers -----------------------------------------------------------------
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return issue(comm, make_op(Kind::all_reduce, sendbuff, recvbuff, count, datatype, op, 0, stream));
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return issue(comm, make_op(Kind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, stream));
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return issue(comm, make_op(Kind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream));
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return issue(comm, make_op(Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0, stream));
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return issue(comm, make_op(Kind::send, sendbuff, nullptr, count, datatype, ncclSum, peer, stream));
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return issue(comm, make_op(Kind::recv, nullptr, recvbuff, count, datatype, ncclSum, peer, stream));
}
