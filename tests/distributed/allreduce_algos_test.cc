// The ring and tree schedules (distributed/allreduce_algos.h) on their own, in one process: the
// double binary tree's shape, and every rank of a world run as a thread over an in-memory
// P2P. This is a test of the schedules, not of any transport (gloo_communicator_test runs
// them across real processes): it covers thousands of (world, count, slice) cases in a
// second, and it checks what a real transport would only show by chance: that every
// receive meets a send of the same size, and that no step writes memory a transfer still
// in flight reads (a send's bytes are compared between posting and completion).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "distributed/allreduce_algos.h"
#include "distributed/reduce_kernel.h"
#include "base/error.h"

namespace rt::dist {
namespace {

TEST_CASE("double binary tree: each tree spans every rank, depth <= log2(N), no rank inside both") {
  for (int N = 1; N <= 64; ++N) {
    Tree trees[2] = {double_binary_tree(N, 0), double_binary_tree(N, 1)};
    for (int w = 0; w < 2; ++w) {
      const Tree& t = trees[w];
      int roots = 0;
      for (int r = 0; r < N; ++r) {
        const TreeNode& node = t.nodes[size_t(r)];
        CHECK(node.children.size() <= 2);
        if (node.parent < 0) {
          ++roots;
          CHECK(node.depth == 0);
        } else {
          const TreeNode& p = t.nodes[size_t(node.parent)];
          CHECK(p.depth + 1 == node.depth);
          CHECK(std::count(p.children.begin(), p.children.end(), r) == 1);
        }
        for (int c : node.children) CHECK(t.nodes[size_t(c)].parent == r);
      }
      CHECK_MESSAGE(roots == 1, "N ", N, " tree ", w);
      CHECK(t.max_depth == int(std::floor(std::log2(N))));
    }
    for (int r = 0; r < N; ++r)
      CHECK_MESSAGE(!(!trees[0].nodes[size_t(r)].children.empty() && !trees[1].nodes[size_t(r)].children.empty()),
                    "rank ", r, " of ", N, " is inside both trees");
  }
}

// Every rank a thread; sends are copied at posting (an eager transport), receives filled at
// finish(). The sent bytes must be unchanged at finish(): anything else means a step wrote
// memory while a transfer of it was in flight.
class Mailboxes {
 public:
  using Key = std::tuple<int, int, uint32_t>;  // src, dst, tag
  explicit Mailboxes(int world) : cv_(static_cast<size_t>(world)) {}
  void put(int src, int dst, uint32_t tag, std::vector<char> bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      box_[{src, dst, tag}].push_back(std::move(bytes));
    }
    cv_[size_t(dst)].notify_all();
  }
  std::vector<char> take(int src, int dst, uint32_t tag) {
    std::unique_lock<std::mutex> lock(mu_);
    const Key k{src, dst, tag};
    const bool got =
        cv_[size_t(dst)].wait_for(lock, std::chrono::seconds(10), [&] { return !box_[k].empty(); });
    RT_CHECK(got, "rank ", dst, " waited 10 s for tag ", tag, " from rank ", src, ": the schedules do not match");
    std::vector<char> b = std::move(box_[k].front());
    box_[k].pop_front();
    return b;
  }
  // Like take(), without waiting: false when the message is not there.
  bool try_take(int src, int dst, uint32_t tag, std::vector<char>* out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& q = box_[{src, dst, tag}];
    if (q.empty()) return false;
    *out = std::move(q.front());
    q.pop_front();
    return true;
  }
  bool empty() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [k, q] : box_)
      if (!q.empty()) return false;
    return true;
  }

 private:
  std::mutex mu_;
  std::vector<std::condition_variable> cv_;  // one per receiving rank
  std::map<Key, std::deque<std::vector<char>>> box_;
};

// With `early`, it also takes early receives (Note [Early receives]) and fills each one as
// soon as its message is there, at any later finish(): the earliest a real transport could,
// so that a scratch slot reused too soon shows as a wrong result.
class ThreadP2P final : public P2P {
 public:
  ThreadP2P(Mailboxes& m, int rank, bool early, size_t slice_bytes)
      : m_(m), rank_(rank), early_(early), slice_bytes_(slice_bytes) {}
  void start(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) override {
    Group g;
    for (const Transfer& t : recvs) {
      auto it = expected_.find({t.peer, t.tag});
      if (it == expected_.end()) {
        g.recvs.push_back(t);
        continue;
      }
      RT_CHECK(it->second.ptr == t.ptr && it->second.bytes == t.bytes, "rank ", rank_,
               ": an early receive changed its buffer before it started");
      if (!filled_.erase({t.peer, t.tag})) g.recvs.push_back(t);  // not there yet: wait for it
      expected_.erase(it);
    }
    for (const Transfer& t : sends) {
      std::vector<char> bytes(static_cast<const char*>(t.ptr), static_cast<const char*>(t.ptr) + t.bytes);
      m_.put(rank_, t.peer, t.tag, bytes);
      g.sent.push_back({t, std::move(bytes)});
    }
    groups_.push_back(std::move(g));
  }
  void finish() override {
    Group g = std::move(groups_.front());
    groups_.pop_front();
    for (const auto& [t, bytes] : g.sent)
      RT_CHECK(std::memcmp(t.ptr, bytes.data(), t.bytes) == 0, "rank ", rank_, ": the ", t.bytes,
               " bytes sent to rank ", t.peer, " (tag ", t.tag, ") changed while in flight");
    for (const Transfer& t : g.recvs) deliver(t, m_.take(t.peer, rank_, t.tag));
    for (auto& [key, t] : expected_) {  // early receives whose data has come
      if (filled_.count(key)) continue;
      std::vector<char> b;
      if (m_.try_take(t.peer, rank_, t.tag, &b)) {
        deliver(t, b);
        filled_.insert(key);
      }
    }
  }
  bool early_receives() const override { return early_; }
  void expect(const std::vector<Transfer>& recvs) override {
    for (const Transfer& t : recvs) expected_.emplace(std::make_pair(t.peer, t.tag), t);
  }
  void reduce(ReduceOp op, DType t, int64_t n, const void* in, void* inout) override {
    reduce_cpu(op, t, n, in, inout);
  }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void scale(DType t, int64_t n, void* x, double s) override { scale_cpu(t, n, x, s); }
  void* scratch(size_t bytes) override {
    // What the NCCL communicator allocates up front must be enough.
    RT_CHECK(bytes <= max_scratch_bytes(slice_bytes_), "rank ", rank_, ": scratch of ", bytes,
             " bytes, more than max_scratch_bytes(", slice_bytes_, ") = ", max_scratch_bytes(slice_bytes_));
    // Poisoned, so that a slot read before it is written shows.
    if (scratch_.size() < bytes) scratch_.assign(bytes, char(0x7f));
    return scratch_.data();
  }

 private:
  struct Group {
    std::vector<Transfer> recvs;
    std::vector<std::pair<Transfer, std::vector<char>>> sent;
  };
  void deliver(const Transfer& t, const std::vector<char>& b) {
    RT_CHECK(b.size() == t.bytes, "rank ", rank_, " expected ", t.bytes, " bytes from rank ", t.peer, " (tag ",
             t.tag, "), got ", b.size());
    std::memcpy(t.ptr, b.data(), b.size());
  }
  Mailboxes& m_;
  int rank_;
  bool early_;
  size_t slice_bytes_;
  std::deque<Group> groups_;
  std::map<std::pair<int, uint32_t>, Transfer> expected_;  // posted early, not yet started
  std::set<std::pair<int, uint32_t>> filled_;              // of those, already delivered
  std::vector<char> scratch_;
};

double value(int rank, int64_t i) { return double((rank * 31 + i * 7) % 23) - 11.0; }

enum class Algo { ring, tree, reduce_scatter };

// Runs `algo` on N threads; returns the first failure ("" when every rank got the exact
// result).
std::string simulate(Algo algo, int N, int64_t count, size_t slice_bytes, ReduceOp op, bool early) {
  Mailboxes boxes(N);
  std::vector<std::string> errors(static_cast<size_t>(N));
  std::vector<std::thread> threads;
  for (int r = 0; r < N; ++r)
    threads.emplace_back([&, r] {
      try {
        const int64_t total = algo == Algo::reduce_scatter ? count * N : count;
        std::vector<double> x(static_cast<size_t>(total));
        for (int64_t i = 0; i < total; ++i) x[size_t(i)] = value(r, i);
        ThreadP2P p(boxes, r, early, slice_bytes);
        const AlgoShape s{r, N, DType::f64, count, slice_bytes};
        if (algo == Algo::ring) ring_all_reduce(p, s, x.data(), op);
        else if (algo == Algo::tree) tree_all_reduce(p, s, x.data(), op);
        else ring_reduce_scatter(p, s, x.data(), op);
        const int64_t first = algo == Algo::reduce_scatter ? r * count : 0;
        for (int64_t i = first; i < first + count; ++i) {
          double want = op == ReduceOp::max ? -1e300 : 0;
          for (int q = 0; q < N; ++q) want = op == ReduceOp::max ? std::max(want, value(q, i)) : want + value(q, i);
          if (op == ReduceOp::avg) want *= 1.0 / N;
          RT_CHECK(x[size_t(i)] == want, "rank ", r, " element ", i, ": ", x[size_t(i)], ", expected ", want);
        }
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors)
    if (!e.empty()) return e;
  return boxes.empty() ? "" : "messages were sent that nobody received";
}

TEST_CASE("ring, tree and reduce-scatter schedules: exact on 1-8 ranks, any count and slice size") {
  for (Algo algo : {Algo::ring, Algo::tree, Algo::reduce_scatter})
    for (int N = 1; N <= 8; ++N)
      for (int64_t count : {0, 1, 2, 3, 5, 8, 9, 31, 97, 250, 1009})
        for (size_t slice : {size_t(24), size_t(200), size_t(1) << 20}) {
          if (count == 1009 && slice == 24) continue;  // a thousand steps: slow, nothing new
          const ReduceOp op = count % 3 == 0 ? ReduceOp::max : count % 3 == 1 ? ReduceOp::sum : ReduceOp::avg;
          for (bool early : {false, true}) {
            const std::string err = simulate(algo, N, count, slice, op, early);
            CHECK_MESSAGE(err.empty(), "algo ", int(algo), " N ", N, " count ", count, " slice ", slice, " ",
                          std::string(reduce_op_name(op)), std::string(early ? " early receives" : ""), ": ", err);
          }
        }
}

}  // namespace
}  // namespace rt::dist
