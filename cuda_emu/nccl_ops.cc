// Checks, memory uses and the queued work of the NCCL fake's operations (nccl_ops.h).
//
// Each collective is an exchange of frames between every pair of ranks
// (Note [Matching operations] in nccl_wire.cc) followed by local work:
//   all-reduce      every rank sends its input to every other; each reduces the N inputs
//                   in rank order (Note [Reduction order and rounding] in nccl_reduce.cc)
//   reduce-scatter  rank r sends its chunk p to rank p; each reduces the chunks it got
//   all-gather      every rank sends its input to every other, straight into place
//   broadcast       the root sends its input to every other rank
//   send / recv     one frame from the sender to the receiver, in issue order per pair
// The N^2 transfers cost more bandwidth than NCCL's rings; they keep every result exact
// and identical on all ranks, which is what a test of the engine needs.
#include "cuda_emu/nccl_ops.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>

#include "cuda_emu/emu.h"
#include "cuda_emu/nccl_reduce.h"

namespace rt::emu::nccl {
namespace {

using rt::emu::MemUse;

uint64_t op_bytes(const Op& op) { return uint64_t(op.d.count) * type_size(op.d.dtype); }

struct Buffer {
  const void* p;
  uint64_t bytes;
  MemUse::Access access;
  const char* name;
};

// The device memory `op` reads and writes on this rank.
std::vector<Buffer> buffers(const Comm& c, const Op& op) {
  const uint64_t b = op_bytes(op), all = b * uint64_t(c.nranks);
  switch (op.d.kind) {
    case Kind::all_reduce: return {{op.send, b, MemUse::read, "sendbuff"}, {op.recv, b, MemUse::write, "recvbuff"}};
    case Kind::broadcast:
      if (c.rank != op.d.root) return {{op.recv, b, MemUse::write, "recvbuff"}};  // sendbuff is the root's only
      return {{op.send, b, MemUse::read, "sendbuff"}, {op.recv, b, MemUse::write, "recvbuff"}};
    case Kind::all_gather: return {{op.send, b, MemUse::read, "sendbuff"}, {op.recv, all, MemUse::write, "recvbuff"}};
    case Kind::reduce_scatter:
      return {{op.send, all, MemUse::read, "sendbuff"}, {op.recv, b, MemUse::write, "recvbuff"}};
    case Kind::send: return {{op.send, b, MemUse::read, "sendbuff"}};
    case Kind::recv: return {{op.recv, b, MemUse::write, "recvbuff"}};
  }
  return {};
}

void add_uses(const Comm& c, const Op& op, std::vector<MemUse>& uses) {
  const std::vector<Buffer> bs = buffers(c, op);
  if (bs.size() == 2 && bs[0].p == bs[1].p && bs[0].bytes == bs[1].bytes) {  // in place
    uses.push_back({bs[0].p, bs[0].bytes, MemUse::read_write});
    return;
  }
  for (const Buffer& b : bs) uses.push_back({b.p, b.bytes, b.access});
}

// Where NCCL's in-place form puts sendbuff for this rank, given recvbuff (or the reverse).
bool in_place(const Comm& c, const Op& op) {
  const uint64_t b = op_bytes(op);
  const auto* s = static_cast<const char*>(op.send);
  const auto* r = static_cast<const char*>(op.recv);
  switch (op.d.kind) {
    case Kind::all_gather: return s == r + uint64_t(c.rank) * b;
    case Kind::reduce_scatter: return r == s + uint64_t(c.rank) * b;
    default: return s == r;
  }
}

std::string ptr_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

std::string batch_text(const std::vector<Op>& ops) {
  if (ops.size() == 1) return describe(ops[0].d);
  std::string s = "a group of " + std::to_string(ops.size()) + " operations (";
  for (size_t i = 0; i < ops.size() && i < 4; ++i) s += (i ? ", " : "") + describe(ops[i].d);
  return s + (ops.size() > 4 ? ", ...)" : ")");
}

// ---- the queued work ---------------------------------------------------------------------------
struct Batch {
  std::shared_ptr<Comm> comm;
  std::vector<Op> ops;
  uint64_t ticket = 0;
  std::string what;
  bool retired = false;
  void retire() {
    if (!retired) comm->retire(ticket);
    retired = true;
  }
  ~Batch() { retire(); }  // dropped without running (Note [Issue order in the fake])
};

struct Plan {
  std::vector<Outgoing> out;
  std::vector<Incoming> in;
  std::vector<std::unique_ptr<char[]>> temps;  // peers' inputs to reductions
  std::vector<std::function<void()>> local;    // after the exchange, in issue order
  std::vector<const Op*> self_sends, self_recvs;
  void* temp(uint64_t bytes) {
    temps.emplace_back(new char[bytes]);
    return temps.back().get();
  }
};

void plan_op(const Comm& c, const Op& op, Plan& p) {
  const int n = c.nranks, me = c.rank;
  const uint64_t b = op_bytes(op);
  const OpDesc d = op.d;
  const auto* send = static_cast<const char*>(op.send);
  auto* recv = static_cast<char*>(op.recv);
  switch (d.kind) {
    case Kind::all_reduce:
    case Kind::reduce_scatter: {
      const bool scatter = d.kind == Kind::reduce_scatter;
      std::vector<const void*> in(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        const char* mine = scatter ? send + uint64_t(r) * b : send;  // what rank r gets from this rank
        if (r == me) {
          in[size_t(r)] = mine;
          continue;
        }
        void* t = p.temp(b);
        in[size_t(r)] = t;
        p.out.push_back({r, header(Channel::coll, d, me, b), mine});
        p.in.push_back({r, Channel::coll, d, t, b});
      }
      p.local.push_back([in, d, n, recv] { reduce_in_rank_order(d.dtype, d.op, n, in.data(), recv, d.count); });
      return;
    }
    case Kind::broadcast: {
      const bool root = me == d.root;
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        // Every rank sends every peer at least the header (Note [Matching operations]).
        p.out.push_back({r, header(Channel::coll, d, me, root ? b : 0), root ? send : nullptr});
        p.in.push_back({r, Channel::coll, d, r == d.root ? recv : nullptr, r == d.root ? b : 0});
      }
      if (root && send != recv) p.local.push_back([recv, send, b] { std::memmove(recv, send, b); });
      return;
    }
    case Kind::all_gather:
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        p.out.push_back({r, header(Channel::coll, d, me, b), send});
        p.in.push_back({r, Channel::coll, d, recv + uint64_t(r) * b, b});
      }
      if (send != recv + uint64_t(me) * b)
        p.local.push_back([dst = recv + uint64_t(me) * b, send, b] { std::memmove(dst, send, b); });
      return;
    case Kind::send:
      if (d.root == me) p.self_sends.push_back(&op);
      else p.out.push_back({d.root, header(Channel::p2p, d, me, b), send});
      return;
    case Kind::recv:
      if (d.root == me) p.self_recvs.push_back(&op);
      else p.in.push_back({d.root, Channel::p2p, d, recv, b});
      return;
  }
}

Plan plan(const Comm& c, const std::vector<Op>& ops) {
  Plan p;
  for (const Op& op : ops) plan_op(c, op, p);
  // A rank's transfers to itself meet within the group, in order.
  if (p.self_sends.size() != p.self_recvs.size())
    throw Error(ncclInvalidUsage, "rank " + std::to_string(c.rank) + " issued " +
                                      std::to_string(p.self_sends.size()) + " ncclSend to itself and " +
                                      std::to_string(p.self_recvs.size()) +
                                      " ncclRecv from itself in one group: each needs its partner in the same "
                                      "group (a real NCCL would hang)");
  for (size_t i = 0; i < p.self_sends.size(); ++i) {
    const Op &s = *p.self_sends[i], &r = *p.self_recvs[i];
    if (s.d.count != r.d.count || s.d.dtype != r.d.dtype)
      throw Error(ncclInvalidUsage, "mismatched operations: rank " + std::to_string(c.rank) + " issued " +
                                        describe(s.d) + " and " + describe(r.d) +
                                        ": an ncclSend needs an ncclRecv of the same count and type");
    p.local.push_back([dst = r.recv, src = s.send, b = op_bytes(s)] { std::memmove(dst, src, b); });
  }
  return p;
}

// On the stream's worker.
void run(Batch& b) {
  Comm& c = *b.comm;
  bool moved = false;
  if (c.begin(b.ticket, b.what)) {
    try {
      Plan p = plan(c, b.ops);
      exchange(c.conns(), c.rank, c.stop(), p.out, p.in, b.what);
      for (auto& f : p.local) f();
      moved = true;
    } catch (const Error& e) {
      c.fail(e);  // Note [A failed communicator]
    } catch (const std::exception& e) {
      c.fail(Error(ncclSystemError, "rank " + std::to_string(c.rank) + ": " + b.what + " failed: " + e.what()));
    }
    c.end();
  }
  c.hold(b.what);  // returns at once unless the communicator failed (Note [A failed communicator])
  // Failed or aborted: the receive buffers hold what they held (perhaps half an exchange),
  // not this operation's result; the emulator must not count them as written by it.
  if (!moved) rt::emu::discard_writes();
  b.retire();
}

void cuda_ok(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw Error(ncclUnhandledCudaError, std::string(call) + " failed: " + cudaGetErrorString(e));
}

// Sets the current device for a scope (events belong to the current device).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&prev_);
    if (prev_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() { cudaSetDevice(prev_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
};

// `to` waits for everything queued on `from` so far.
void join_stream(cudaStream_t to, cudaStream_t from) {
  cudaEvent_t e;
  cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  const cudaError_t r = cudaEventRecord(e, from);
  const cudaError_t w = r == cudaSuccess ? cudaStreamWaitEvent(to, e, 0) : r;
  cudaEventDestroy(e);
  cuda_ok(w, "joining a group's streams");
}

}  // namespace

void check_op(const Comm& c, const Op& op) {
  const char* api = kind_name(op.d.kind);
  auto bad = [&](ncclResult_t code, const std::string& why) { throw Error(code, std::string(api) + ": " + why); };
  const int n = c.nranks;
  const size_t es = type_size(op.d.dtype);
  if (!es) bad(ncclInvalidArgument, "invalid data type " + std::to_string(int(op.d.dtype)));
  if (op.d.kind == Kind::all_reduce || op.d.kind == Kind::reduce_scatter) {
    if (int(op.d.op) < 0 || op.d.op >= ncclNumOps)
      bad(ncclInvalidArgument, "invalid reduction operation " + std::to_string(int(op.d.op)) +
                                   " (the fake has no ncclRedOpCreatePreMulSum operations)");
    if (!reducible(op.d.dtype))
      bad(ncclInvalidArgument, std::string("the NCCL fake does not reduce ") + type_name(op.d.dtype));
  }
  const char* role = op.d.kind == Kind::broadcast ? "root" : "peer";
  if ((op.d.kind == Kind::broadcast || op.d.kind == Kind::send || op.d.kind == Kind::recv) &&
      (op.d.root < 0 || op.d.root >= n))
    bad(ncclInvalidArgument, std::string(role) + " " + std::to_string(op.d.root) + " is not a rank of this " +
                                 std::to_string(n) + "-rank communicator");
  if (op.d.count > UINT64_MAX / es / uint64_t(n)) bad(ncclInvalidArgument, "count " + std::to_string(op.d.count) + " is too large");
  const int sd = rt::emu::stream_device(op.stream);
  if (sd < 0) bad(ncclInvalidArgument, "invalid stream " + ptr_text(op.stream) + " (destroyed?)");
  if (sd != c.device)
    bad(ncclInvalidUsage, "the stream belongs to cuda:" + std::to_string(sd) + " but rank " + std::to_string(c.rank) +
                              "'s communicator is on cuda:" + std::to_string(c.device) +
                              ": queue it on a stream of cuda:" + std::to_string(c.device) +
                              " (the default stream, nullptr, is the current device's: a missing cudaSetDevice?)");
  if (op.d.count == 0) return;
  const std::vector<Buffer> bs = buffers(c, op);
  for (const Buffer& b : bs) {
    const std::string what = std::string(b.name) + " " + ptr_text(b.p);
    if (!b.p) bad(ncclInvalidArgument, std::string(b.name) + " is NULL");
    const int dev = rt::emu::device_of(b.p);
    if (dev < 0)
      bad(ncclInvalidArgument, what + " is not device memory: NCCL moves cudaMalloc'd memory of the communicator's "
                                      "device (cuda:" + std::to_string(c.device) + ")");
    if (dev != c.device)
      bad(ncclInvalidArgument, what + " is memory of cuda:" + std::to_string(dev) + ", but rank " +
                                   std::to_string(c.rank) + "'s communicator is on cuda:" + std::to_string(c.device));
    if (rt::emu::device_of(static_cast<const char*>(b.p) + b.bytes - 1) != dev)
      bad(ncclInvalidArgument, what + " (" + std::to_string(b.bytes) + " bytes) runs past the end of cuda:" +
                                   std::to_string(dev) + "'s memory");
  }
  if (bs.size() == 2 && !in_place(c, op)) {
    const auto s = uintptr_t(bs[0].p), r = uintptr_t(bs[1].p);
    if (s < r + bs[1].bytes && r < s + bs[0].bytes)
      bad(ncclInvalidArgument, "sendbuff (" + std::to_string(bs[0].bytes) + " bytes at " + ptr_text(bs[0].p) +
                                   ") and recvbuff (" + std::to_string(bs[1].bytes) + " bytes at " +
                                   ptr_text(bs[1].p) +
                                   ") overlap, but not in NCCL's in-place form: the result would be garbage");
  }
}

ncclResult_t launch(const std::shared_ptr<Comm>& c, std::vector<Op> ops) {
  std::vector<MemUse> uses;
  for (const Op& op : ops) add_uses(*c, op, uses);
  const std::string name = ops.size() == 1 ? kind_name(ops[0].d.kind) : "ncclGroup";
  const cudaStream_t primary = ops[0].stream;
  std::vector<cudaStream_t> others;
  for (const Op& op : ops) {
    const uint32_t id = rt::emu::stream_id(op.stream);
    bool seen = id == rt::emu::stream_id(primary);
    for (cudaStream_t o : others) seen = seen || id == rt::emu::stream_id(o);
    if (!seen) others.push_back(op.stream);
  }
  // Numbered and ticketed when queued, and anew at each launch of a CUDA graph that captured
  // it (emu.h, enqueue_issued): every run is an operation of its own on the communicator,
  // which all ranks must issue in the same order.
  auto issue = [c, ops = std::move(ops)]() -> std::function<void()> {
    auto batch = std::make_shared<Batch>();
    batch->comm = c;
    batch->ops = ops;
    for (Op& op : batch->ops)
      op.d.seq = op.d.kind == Kind::send   ? c->next_send(op.d.root)
                 : op.d.kind == Kind::recv ? c->next_recv(op.d.root)
                                           : c->next_collective();
    batch->what = batch_text(batch->ops);
    batch->ticket = c->issue_ticket();
    return [batch] { run(*batch); };
  };
  try {
    const DeviceScope scope(c->device);
    for (cudaStream_t o : others) join_stream(primary, o);
    cuda_ok(rt::emu::enqueue_issued(primary, name, std::move(uses), std::move(issue)), "queueing on the stream");
    for (cudaStream_t o : others) join_stream(o, primary);
  } catch (const Error& e) {
    warn(name + ": " + e.what());
    return e.code;
  }
  return ncclSuccess;
}

}  // namespace rt::emu::nccl
