#include "distributed/communicator.h"

#include <cstdlib>
#include <utility>

#include "distributed/communicator_liveness.h"
#include "distributed/flight_recorder.h"

namespace rt::dist {

AllReduceAlgo parse_allreduce_algo(const std::string& s) {
  for (int i = 0; i <= int(AllReduceAlgo::tree); ++i)
    if (s == kAllReduceAlgoNames[i]) return AllReduceAlgo(i);
  RT_FAIL("unknown all-reduce algorithm '", clip_for_message(s), "': choose one of library (the backend's own), ",
          "ring or tree");
}

std::string listen_host(const CommOptions& o) {
  if (!o.host.empty()) return o.host;
  const char* master = std::getenv("MASTER_ADDR");
  return master && *master ? local_address_toward(master) : "127.0.0.1";
}

Communicator::Communicator(int rank, int world, Device device, CommOptions opts)
    : rank_(rank), world_(world), device_(device), opts_(std::move(opts)) {
  RT_CHECK(world >= 1, "a communicator needs a world size of at least 1, got ", world);
  RT_CHECK(rank >= 0 && rank < world, "rank ", rank, " is outside the world of ", world,
           " ranks (ranks are 0..", world - 1, ")");
  RT_CHECK(opts_.timeout.count() > 0, "CommOptions::timeout must be positive, got ", opts_.timeout.count(), " ms");
  RT_CHECK(opts_.slice_bytes >= 64, "CommOptions::slice_bytes must be at least 64, got ", opts_.slice_bytes);
}

void Communicator::check_tensor(const Tensor& t, const char* op, const char* arg) const {
  check_defined(t, op, arg);
  RT_CHECK(t.device() == device_, op, ": ", arg, " is on ", t.device().str(), " but this ", backend(),
           " communicator works on ", device_.str(), ": move it with .to(", device_.str(), ")");
}

void Communicator::check_peer(int peer, const char* op, const char* arg) const {
  RT_CHECK(peer >= 0 && peer < world_, op, ": ", arg, " ", peer, " is not a rank of this world of ", world_,
           " (ranks 0..", world_ - 1, ")");
}

void Communicator::check_reduction(DType t, const std::string& what) const {
  RT_CHECK(is_floating(t), what, ": reduces floating tensors only (f32, f64, bf16, f16), got ", dtype_name(t),
           ": convert with .to(DType::f64) (exact for integers below 2^53)");
  check_reducible(t, what);
}

void Communicator::check_blocks(const Tensor& whole, const char* whole_name, const Tensor& block,
                                const char* block_name, const std::string& what) const {
  RT_CHECK(whole.dtype() == block.dtype(), what, ": ", whole_name, " is ", dtype_name(whole.dtype()), " but ",
           block_name, " is ", dtype_name(block.dtype()));
  RT_CHECK(whole.numel() == block.numel() * world_, what, ": ", whole_name, " has ", whole.numel(),
           " elements; it needs world size (", world_, ") x ", block.numel(), " = ", block.numel() * world_);
  RT_CHECK(whole.format() == MemoryFormat::contiguous && block.format() == MemoryFormat::contiguous, what,
           ": needs contiguous tensors (call .contiguous())");
  RT_CHECK(whole.impl().storage != block.impl().storage, what, ": ", whole_name, " and ", block_name,
           " share storage; use separate tensors");
}

Communicator::Call Communicator::make_call(Kind kind, std::string what, Millis timeout) const {
  RT_CHECK(timeout == kDefaultTimeout || timeout.count() > 0, what, ": the timeout must be positive, got ",
           timeout.count(), " ms");
  Call c;
  c.kind = kind;
  c.what = std::move(what);
  c.timeout = timeout == kDefaultTimeout ? opts_.timeout : timeout;
  return c;
}

namespace {
std::string elems(const Tensor& t) { return detail::cat(dtype_name(t.dtype()), " x ", t.numel()); }
}  // namespace

Work Communicator::record_and_run(Call c, const char* op, const Tensor& t) {
  if (flight::enabled()) {
    const bool has = t.defined();
    c.flight = flight::queued(opts_.name, opts_.purpose, collectives_, op, has ? t.numel() : 0,
                              has ? t.numel() * int64_t(dtype_size(t.dtype())) : 0, has ? dtype_name(t.dtype()) : "",
                              c.kind == Kind::all_reduce ? algo_name(c.algo) : "", c.what);
  }
  ++collectives_;
  return run(std::move(c));
}

Work Communicator::watch(const Stream&, const std::string& what, Millis) {
  RT_FAIL(backend(), " cannot watch a stream (", what, "): its calls are not captured in CUDA graphs, only NCCL's are");
}

Work Communicator::all_reduce(const Tensor& t, ReduceOp op, AllReduceAlgo algo, Millis timeout) {
  check_tensor(t, "all_reduce", "the tensor");
  const std::string what = detail::cat("all_reduce #", collectives_, " (", algo_name(algo), ", ",
                                       reduce_op_name(op), ", ", elems(t), ")");
  check_reduction(t.dtype(), what);
  Call c = make_call(Kind::all_reduce, what, timeout);
  c.a = t;
  c.op = op;
  c.algo = algo;
  return record_and_run(std::move(c), "all_reduce", t);
}

Work Communicator::broadcast(const Tensor& t, int root, Millis timeout) {
  check_tensor(t, "broadcast", "the tensor");
  check_peer(root, "broadcast", "root");
  Call c = make_call(Kind::broadcast, detail::cat("broadcast #", collectives_, " (root ", root, ", ", elems(t), ")"),
                     timeout);
  c.a = t;
  c.root = root;
  return record_and_run(std::move(c), "broadcast", t);
}

Work Communicator::all_gather(const Tensor& out, const Tensor& in, Millis timeout) {
  check_tensor(out, "all_gather", "out");
  check_tensor(in, "all_gather", "in");
  const std::string what = detail::cat("all_gather #", collectives_, " (", elems(in), " per rank)");
  check_blocks(out, "out", in, "in", what);
  Call c = make_call(Kind::all_gather, what, timeout);
  c.a = out;
  c.b = in;
  return record_and_run(std::move(c), "all_gather", in);
}

Work Communicator::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, Millis timeout) {
  check_tensor(out, "reduce_scatter", "out");
  check_tensor(in, "reduce_scatter", "in");
  const std::string what =
      detail::cat("reduce_scatter #", collectives_, " (", reduce_op_name(op), ", ", elems(out), " per rank)");
  check_blocks(in, "in", out, "out", what);
  check_reduction(in.dtype(), what);
  Call c = make_call(Kind::reduce_scatter, what, timeout);
  c.a = out;
  c.b = in;
  c.op = op;
  return record_and_run(std::move(c), "reduce_scatter", out);
}

Work Communicator::barrier(Millis timeout) {
  Call c = make_call(Kind::barrier, detail::cat("barrier #", collectives_), timeout);
  return record_and_run(std::move(c), "barrier", Tensor());
}

Work Communicator::send(const Tensor& t, int dst, Millis timeout) { return send_recv(t, dst, Tensor(), -1, timeout); }

Work Communicator::recv(const Tensor& t, int src, Millis timeout) { return send_recv(Tensor(), -1, t, src, timeout); }

Work Communicator::send_recv(const Tensor& sent, int dst, const Tensor& received, int src, Millis timeout) {
  RT_CHECK(sent.defined() || received.defined(), "send_recv: give a tensor to send, to receive, or both");
  std::string what = detail::cat("p2p #", p2p_, " (");
  if (sent.defined()) {
    check_tensor(sent, "send", "the tensor");
    check_peer(dst, "send", "destination rank");
    RT_CHECK(dst != rank_, "send: rank ", rank_, " cannot send to itself");
    what += detail::cat("send ", elems(sent), " to rank ", dst, received.defined() ? ", " : "");
  }
  if (received.defined()) {
    check_tensor(received, "recv", "the tensor");
    check_peer(src, "recv", "source rank");
    RT_CHECK(src != rank_, "recv: rank ", rank_, " cannot receive from itself");
    what += detail::cat("recv ", elems(received), " from rank ", src);
  }
  Call c = make_call(Kind::p2p, what + ")", timeout);
  c.a = sent;
  c.b = received;
  c.dst = sent.defined() ? dst : -1;
  c.src = received.defined() ? src : -1;
  ++p2p_;
  return run(std::move(c));
}

}  // namespace rt::dist
