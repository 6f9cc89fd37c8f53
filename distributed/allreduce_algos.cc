#include "distributed/allreduce_algos.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <utility>

namespace rt::dist {

namespace {

struct Reduction {
  const void* in;  // a received slice in scratch
  void* inout;     // the same elements of the data
  int64_t n;
  bool copy = false;  // inout = in (a slice received into scratch, not reduced)
};

struct Step {
  std::vector<Transfer> sends, recvs;
  std::vector<Reduction> reduces;  // after the transfers completed
};

// Steps in flight at most: enough to keep a slice on the wire in each direction while
// others wait for their peer or are reduced.
constexpr int64_t kMaxWindow = 4;
// Steps whose receives are posted ahead of their group (Note [Early receives]), and the
// scratch that may take at most.
constexpr int64_t kMaxEarly = 16;
constexpr size_t kEarlyScratchBytes = size_t(4) << 20;

// How many steps ahead receives are posted: only in the strict regime (one step in
// flight: small messages, where the saved message matters), and only while the scratch
// for (window + early) steps of `step_bytes` stays small.
int64_t early_steps(const P2P& p, int64_t n, int64_t window, size_t step_bytes) {
  if (!p.early_receives() || window != 1) return 0;
  int64_t e = std::min(n - 1, kMaxEarly);
  while (e > 0 && size_t(window + e) * step_bytes > kEarlyScratchBytes) --e;
  return e;
}

// Runs steps 0..n-1, each made by make(u, step), with up to `window` steps in flight: step
// u + window is posted once step u has completed and been reduced
// (Note [Slices and look-ahead]). The receives of the `early` steps after those are posted
// ahead (Note [Early receives]); their destinations must be scratch slots no other step in
// that span uses.
void run_steps(P2P& p, int64_t n, int64_t window, int64_t early, ReduceOp op, DType t,
               const std::function<void(int64_t, Step&)>& make) {
  std::deque<Step> made;  // steps [first, first + made.size())
  int64_t first = 0;
  auto step = [&](int64_t v) -> Step& {
    while (first + int64_t(made.size()) <= v) {
      made.emplace_back();
      make(first + int64_t(made.size()) - 1, made.back());
    }
    return made[size_t(v - first)];
  };
  int64_t expected = std::min(n, window);  // steps [0, expected) have their receives posted
  auto expect_upto = [&](int64_t last) {
    for (; expected <= std::min(last, n - 1); ++expected) p.expect(step(expected).recvs);
  };
  for (int64_t u = 0; u < std::min(n, window); ++u) p.start(step(u).sends, step(u).recvs);
  if (early) expect_upto(window - 1 + early);
  for (int64_t u = 0; u < n; ++u) {
    p.finish();
    for (const Reduction& r : step(u).reduces) {
      if (r.copy) p.copy(r.inout, r.in, size_t(r.n) * dtype_size(t));
      else p.reduce(op, t, r.n, r.in, r.inout);
    }
    made.pop_front();
    ++first;
    if (u + window < n) p.start(step(u + window).sends, step(u + window).recvs);
    if (early) expect_upto(u + window + early);
  }
}

// [0, count) cut into `parts` pieces of count/parts elements, the remainder spread one
// element each over the pieces (piece i starts at count*i/parts).
struct Split {
  int64_t count;
  int64_t parts;
  int64_t begin(int64_t i) const { return count * i / parts; }
  int64_t size(int64_t i) const { return begin(i + 1) - begin(i); }
  int64_t max_size() const { return (count + parts - 1) / parts; }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Slices per piece so that no slice exceeds slice_bytes (at least 1).
int64_t slices_for(int64_t max_piece, size_t elem, size_t slice_bytes) {
  return std::max<int64_t>(1, ceil_div(max_piece * int64_t(elem), int64_t(slice_bytes)));
}

}  // namespace

// A slot holds one slice: at most slice_bytes, rounded up to whole elements (< 8 bytes more).
// The tree has the most slots in flight, 6 per step for kMaxWindow steps; early receives
// are posted only while all the slots stay within kEarlyScratchBytes (early_steps).
size_t max_scratch_bytes(size_t slice_bytes) {
  return std::max(size_t(kMaxWindow) * 6 * (slice_bytes + 8), kEarlyScratchBytes);
}

namespace {

int mod(int64_t a, int n) { return int(((a % n) + n) % n); }

// The ring (reduce-scatter, then all-gather if `gather`). Chunk c of N is reduced around
// the ring so that rank r ends up owning chunk (r + 1 + shift) mod N: shift 0 for the
// all-reduce, N-1 for reduce_scatter (rank r owns chunk r).
//   reduce-scatter step s (0..N-2): send chunk (r-s+shift) to r+1; receive chunk
//     (r-s-1+shift) from r-1 into scratch and reduce it into the data.
//   all-gather step s (0..N-2): send chunk (r+1+shift-s) to r+1; receive chunk (r+shift-s)
//     from r-1 straight into the data.
// Steps are cut in S slices (unit u = (phase, step, slice)), W = min(S, kMaxWindow) units
// in flight. Units that touch the same slice of the data (in any chunk: slice j of every
// chunk is its own memory) are a multiple of S >= W apart, so no two of them are ever in
// flight together, and a slice is sent on only after its unit S earlier was reduced.
void ring(P2P& p, const AlgoShape& s, void* data, ReduceOp op, int shift, bool gather) {
  const int N = s.world, r = s.rank;
  if (N == 1 || s.count == 0) return;
  const size_t elem = dtype_size(s.dtype);
  const Split chunks{s.count, N};
  const int64_t S = slices_for(chunks.max_size(), elem, s.slice_bytes);
  const int64_t slice_max = ceil_div(chunks.max_size(), S);
  const int64_t W = std::min(S, kMaxWindow);
  const int64_t per_phase = int64_t(N - 1) * S, steps = gather ? 2 * per_phase : per_phase;
  const size_t slot_bytes = size_t(slice_max) * elem;
  const int64_t E = early_steps(p, steps, W, slot_bytes), slots = W + E;
  char* scratch = static_cast<char*>(p.scratch(size_t(slots) * slot_bytes));
  char* base = static_cast<char*>(data);
  const int next = (r + 1) % N, prev = (r + N - 1) % N;

  // Byte offset and element count of slice j of chunk c.
  auto slice = [&](int c, int64_t j, int64_t* n) {
    const Split sl{chunks.size(c), S};
    *n = sl.size(j);
    return base + (chunks.begin(c) + sl.begin(j)) * int64_t(elem);
  };
  auto make = [&](int64_t u, Step& st) {
    const bool reduce_phase = u < per_phase;
    const int64_t v = u % per_phase, step = v / S, j = v % S;
    const uint32_t tag = uint32_t(u);
    int64_t n_send = 0, n_recv = 0;
    char* src = slice(mod(reduce_phase ? r - step + shift : r + 1 + shift - step, N), j, &n_send);
    char* dst = slice(mod(reduce_phase ? r - step - 1 + shift : r + shift - step, N), j, &n_recv);
    if (n_send) st.sends.push_back({next, src, size_t(n_send) * elem, tag});
    if (!n_recv) return;
    if (!reduce_phase && E == 0) {  // all-gather: straight into the data
      st.recvs.push_back({prev, dst, size_t(n_recv) * elem, tag});
      return;
    }
    char* tmp = scratch + size_t(u % slots) * slot_bytes;
    st.recvs.push_back({prev, tmp, size_t(n_recv) * elem, tag});
    st.reduces.push_back({tmp, dst, n_recv, !reduce_phase});
  };
  run_steps(p, steps, W, E, op == ReduceOp::avg ? ReduceOp::sum : op, s.dtype, make);
}

// Builds the subtree of positions [lo, hi] (1-based) under `parent`; returns its root.
int build(std::vector<int>& parent_of, std::vector<std::vector<int>>& children_of, int lo, int hi, int parent) {
  if (lo > hi) return -1;
  int root = lo;
  for (int q = lo; q <= hi; ++q)
    if ((q & -q) > (root & -root)) root = q;  // the largest lowest set bit
  parent_of[size_t(root)] = parent;
  for (int c : {build(parent_of, children_of, lo, root - 1, root), build(parent_of, children_of, root + 1, hi, root)})
    if (c >= 0) children_of[size_t(root)].push_back(c);
  return root;
}

}  // namespace

Tree double_binary_tree(int world, int which) {
  RT_CHECK(world >= 1 && (which == 0 || which == 1), "double_binary_tree(", world, ", ", which, ")");
  const int N = world;
  std::vector<int> parent_of(size_t(N) + 1, 0);
  std::vector<std::vector<int>> children_of(size_t(N) + 1);
  build(parent_of, children_of, 1, N, 0);
  // position <-> rank (Note [Double binary tree])
  auto position = [&](int r) { return which == 0 ? r + 1 : N % 2 == 0 ? N - r : mod(r + N - 1, N) + 1; };
  std::vector<int> rank_at(size_t(N) + 1);
  for (int r = 0; r < N; ++r) rank_at[size_t(position(r))] = r;

  Tree t;
  t.nodes.resize(size_t(N));
  for (int r = 0; r < N; ++r) {
    const int pos = position(r);
    TreeNode& node = t.nodes[size_t(r)];
    node.parent = parent_of[size_t(pos)] == 0 ? -1 : rank_at[size_t(parent_of[size_t(pos)])];
    for (int c : children_of[size_t(pos)]) node.children.push_back(rank_at[size_t(c)]);
    for (int q = pos; parent_of[size_t(q)] != 0; q = parent_of[size_t(q)]) ++node.depth;
    t.max_depth = std::max(t.max_depth, node.depth);
  }
  return t;
}

void ring_all_reduce(P2P& p, const AlgoShape& s, void* data, ReduceOp op) {
  ring(p, s, data, op, 0, true);
  if (op == ReduceOp::avg && s.world > 1 && s.count > 0) p.scale(s.dtype, s.count, data, 1.0 / s.world);
}

void ring_reduce_scatter(P2P& p, const AlgoShape& s, void* data, ReduceOp op) {
  AlgoShape whole = s;
  whole.count = s.count * s.world;
  ring(p, whole, data, op, s.world - 1, false);
  if (op == ReduceOp::avg && s.world > 1 && s.count > 0)
    p.scale(s.dtype, s.count, static_cast<char*>(data) + size_t(s.rank * s.count) * dtype_size(s.dtype),
            1.0 / s.world);
}

// Note [Pipelined tree schedule]
// Tree w (0, 1) all-reduces half w of the data, cut in K slices. A rank at depth d of a
// tree whose deepest rank is at depth D does, at step t:
//   up:   receive slice t - L(D-d-1) from each child (into scratch; reduced after the step)
//         and send slice t - L(D-d) to its parent;
//   down: receive slice t - L(D+d-1) from its parent (into the data) and send slice
//         t - L(D+d) to its children.
// A child's send and its parent's receive of a slice fall in the same step, so both sides
// agree without negotiation. L = min(K, kMaxWindow) is both the lag between receiving a
// slice and passing it on and the number of steps in flight: every step that touches slice
// k is k + L*m for some m, so two of them are never in flight together, and step t + L is
// posted only after step t was reduced. Steps in all: K + L(2D-1); for one slice 2D, against
// the ring's 2(N-1).
void tree_all_reduce(P2P& p, const AlgoShape& s, void* data, ReduceOp op) {
  const int N = s.world, r = s.rank;
  if (N == 1 || s.count == 0) return;
  const size_t elem = dtype_size(s.dtype);
  const Tree trees[2] = {double_binary_tree(N, 0), double_binary_tree(N, 1)};
  const int64_t D = trees[0].max_depth;  // both trees have the same shape
  const Split halves{s.count, 2};
  const int64_t K = slices_for(halves.max_size(), elem, s.slice_bytes);
  const int64_t L = std::min(K, kMaxWindow);
  const int64_t slice_max = ceil_div(halves.max_size(), K);
  const size_t slot_bytes = size_t(slice_max) * elem;
  const int64_t steps = K + L * (2 * D - 1);
  // Scratch slots: (step mod (L + E), tree, child 0 | child 1 | parent) -> (L + E) x 2 x 3
  // slices; the parent's slot only with early receives.
  const int64_t E = early_steps(p, steps, L, 6 * slot_bytes), slots = L + E;
  char* scratch = static_cast<char*>(p.scratch(size_t(slots) * 6 * slot_bytes));
  char* base = static_cast<char*>(data);

  auto make = [&](int64_t t, Step& st) {
    for (int w = 0; w < 2; ++w) {
      const TreeNode& node = trees[w].nodes[size_t(r)];
      const int64_t d = node.depth;
      const Split sl{halves.size(w), K};
      // Slice k of this tree's half: pointer and element count (0 when k is out of range).
      auto slice = [&](int64_t k, int64_t* n) {
        *n = (k >= 0 && k < K) ? sl.size(k) : 0;
        return base + (halves.begin(w) + (*n ? sl.begin(k) : 0)) * int64_t(elem);
      };
      const uint32_t up = uint32_t(t * 4 + w * 2), down = up + 1;
      int64_t n = 0;
      char* x = slice(t - L * (D - d - 1), &n);
      auto slot = [&](size_t which) { return scratch + (size_t(t % slots) * 6 + size_t(w) * 3 + which) * slot_bytes; };
      for (size_t ci = 0; ci < node.children.size() && n; ++ci) {
        st.recvs.push_back({node.children[ci], slot(ci), size_t(n) * elem, up});
        st.reduces.push_back({slot(ci), x, n});
      }
      if (node.parent >= 0) {
        x = slice(t - L * (D - d), &n);
        if (n) st.sends.push_back({node.parent, x, size_t(n) * elem, up});
        x = slice(t - L * (D + d - 1), &n);
        if (n && E == 0) st.recvs.push_back({node.parent, x, size_t(n) * elem, down});
        if (n && E > 0) {  // via scratch, so that it can be posted early
          st.recvs.push_back({node.parent, slot(2), size_t(n) * elem, down});
          st.reduces.push_back({slot(2), x, n, true});
        }
      }
      x = slice(t - L * (D + d), &n);
      for (size_t ci = 0; ci < node.children.size() && n; ++ci)
        st.sends.push_back({node.children[ci], x, size_t(n) * elem, down});
    }
  };
  run_steps(p, steps, L, E, op == ReduceOp::avg ? ReduceOp::sum : op, s.dtype, make);
  if (op == ReduceOp::avg) p.scale(s.dtype, s.count, data, 1.0 / N);
}

}  // namespace rt::dist
