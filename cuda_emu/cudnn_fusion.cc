// The fused graphs' descriptors and their recognition (cudnn_fusion.h;
// Note [Fused graphs the fake runs] in cudnn_finalize.cc): what the fake computes is narrow (scale-bias-relu into a
// convolution, genstats out of it), so every descriptor says at finalize what it cannot run
// rather than letting a graph finalize and then compute something else.
#include "cuda_emu/cudnn_fusion.h"

#include <cfloat>
#include <sstream>

#include "cuda_emu/cudnn_attrs.h"
#include "cuda_emu/cudnn_finalize.h"
#include "cuda_emu/cudnn_status.h"

namespace rt::emu::cudnn {
namespace {

std::string dims_str(const std::vector<int64_t>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return "(" + os.str() + ")";
}

// "tensor uid 4 (1, 8, 1, 1)" or "virtual tensor uid 8 (2, 8, 5, 7)", for messages.
std::string tname(const NodePtr& t) {
  const TensorInfo& i = t->as<TensorInfo>();
  const std::string id = i.is_virtual && i.uid == 0 ? "(no unique id)" : "uid " + std::to_string(i.uid);
  return std::string(i.is_virtual ? "virtual tensor " : "tensor ") + id + " " + dims_str(i.dims);
}

const char* mode_name(cudnnPointwiseMode_t m) {
  // clang-format off
  switch (m) {
#define RT_M(x)              \
  case CUDNN_POINTWISE_##x: \
    return #x;
    RT_M(ADD) RT_M(MUL) RT_M(SUB) RT_M(DIV) RT_M(MAX) RT_M(MIN) RT_M(SQRT) RT_M(ADD_SQUARE) RT_M(IDENTITY)
    RT_M(RELU_FWD) RT_M(TANH_FWD) RT_M(SIGMOID_FWD) RT_M(ELU_FWD) RT_M(GELU_FWD) RT_M(SOFTPLUS_FWD) RT_M(SWISH_FWD)
    RT_M(GELU_APPROX_TANH_FWD) RT_M(RELU_BWD) RT_M(TANH_BWD) RT_M(SIGMOID_BWD)
#undef RT_M
    default:
      return "(a mode the fake does not name)";
  }
  // clang-format on
}

std::string mode_str(cudnnPointwiseMode_t m) { return std::string(mode_name(m)) + " (" + std::to_string(int(m)) + ")"; }

bool fused_dtype(cudnnDataType_t t, cudnnDataType_t data) { return t == CUDNN_DATA_FLOAT || t == data; }

// The tensors an operation reads and writes.
void ins_outs(const NodePtr& op, std::vector<NodePtr>* in, std::vector<NodePtr>* out) {
  if (op->is<OpInfo>()) {
    const OpInfo& c = op->as<OpInfo>();
    switch (c.op) {
      case ConvOp::forward:
        *in = {c.x, c.w}, *out = {c.y};
        break;
      case ConvOp::backward_data:
        *in = {c.y, c.w}, *out = {c.x};
        break;
      case ConvOp::backward_filter:
        *in = {c.x, c.y}, *out = {c.w};
        break;
    }
  } else if (op->is<PointwiseOpInfo>()) {
    const PointwiseOpInfo& p = op->as<PointwiseOpInfo>();
    *in = p.b ? std::vector<NodePtr>{p.x, p.b} : std::vector<NodePtr>{p.x};
    *out = {p.y};
  } else {
    const GenStatsInfo& g = op->as<GenStatsInfo>();
    *in = {g.x}, *out = {g.sum, g.sqsum};
  }
}

}  // namespace

std::string op_label(const NodePtr& op) {
  if (op->is<OpInfo>()) return std::string("convolution ") + conv_op_name(op->as<OpInfo>().op);
  if (op->is<PointwiseOpInfo>()) return std::string("pointwise ") + mode_name(op->as<PointwiseOpInfo>().mode);
  return "genstats";
}

// Note [Pointwise descriptors the fake takes]
// Modes MUL, ADD and RELU_FWD, math precision FLOAT, relu clipped at 0 below (slope 0) and not
// above, NaN not propagated (relu(NaN) is 0, as max(x, 0) gives): what batch-norm's
// scale-bias-relu prologue uses. Anything else finalizes in cuDNN but is not computed here,
// so it is refused with NOT_SUPPORTED at once.
cudnnStatus_t finalize_pointwise(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* what = "a pointwise descriptor (mode, math precision)";
  const Value* m = required(d.attrs, CUDNN_ATTR_POINTWISE_MODE, what, &st);
  const Value* prec = m ? required(d.attrs, CUDNN_ATTR_POINTWISE_MATH_PREC, what, &st) : nullptr;
  if (st) return st;
  PointwiseInfo pw{m->at<cudnnPointwiseMode_t>(0), prec->at<cudnnDataType_t>(0)};
  if (pw.mode != CUDNN_POINTWISE_MUL && pw.mode != CUDNN_POINTWISE_ADD && pw.mode != CUDNN_POINTWISE_RELU_FWD)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize,
                "pointwise mode " + mode_str(pw.mode) +
                    " is not emulated: the fake runs MUL, ADD and RELU_FWD (the scale-bias-relu prologue of a fused "
                    "convolution); run other pointwise operations outside cuDNN");
  if (pw.math != CUDNN_DATA_FLOAT)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, kFinalize,
                "CUDNN_ATTR_POINTWISE_MATH_PREC is data type " + std::to_string(int(pw.math)) +
                    "; the fake computes pointwise operations in float: set CUDNN_DATA_FLOAT");
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_POINTWISE_NAN_PROPAGATION);
      v && v->at<cudnnNanPropagation_t>(0) != CUDNN_NOT_PROPAGATE_NAN)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize,
                "CUDNN_ATTR_POINTWISE_NAN_PROPAGATION: NaN propagation is not emulated (relu(NaN) is 0 here); leave "
                "it unset or CUDNN_NOT_PROPAGATE_NAN");
  const struct {
    cudnnBackendAttributeName_t name;
    bool ok_if_huge;  // the upper clip: unset, or at least FLT_MAX (no clip)
  } clips[] = {{CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, false},
               {CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, true},
               {CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, false}};
  for (const auto& c : clips)
    if (const Value* v = find_attr(d.attrs, c.name); v && (c.ok_if_huge ? v->real() < double(FLT_MAX) : v->real() != 0))
      return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize,
                  attr_name(c.name) + " is " + std::to_string(v->real()) +
                      "; the fake runs the plain relu max(x, 0): lower clip 0, slope 0, no upper clip (leave them "
                      "unset)");
  auto n = new_node(d);
  n->attrs.try_emplace(
      int(CUDNN_ATTR_POINTWISE_NAN_PROPAGATION),
      Value::of(CUDNN_TYPE_NAN_PROPOGATION, std::vector<cudnnNanPropagation_t>{CUDNN_NOT_PROPAGATE_NAN}));
  n->attrs.try_emplace(int(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP), Value::of(CUDNN_TYPE_DOUBLE, std::vector<double>{0}));
  n->attrs.try_emplace(int(CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP),
                       Value::of(CUDNN_TYPE_DOUBLE, std::vector<double>{DBL_MAX}));
  n->attrs.try_emplace(int(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE),
                       Value::of(CUDNN_TYPE_DOUBLE, std::vector<double>{0}));
  n->info = pw;
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_pointwise_op(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* what = "a pointwise operation (the pointwise descriptor, x, y, and b for two-input modes)";
  const Value* pwv = required(d.attrs, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, what, &st);
  const Value* xv = pwv ? required(d.attrs, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, what, &st) : nullptr;
  const Value* yv = xv ? required(d.attrs, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, what, &st) : nullptr;
  if (st) return st;
  PointwiseOpInfo op;
  op.mode = pwv->descs[0]->as<PointwiseInfo>().mode;
  op.x = xv->descs[0], op.y = yv->descs[0];
  const bool binary = op.mode != CUDNN_POINTWISE_RELU_FWD;
  const Value* bv = find_attr(d.attrs, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
  if (binary && !bv)
    return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                std::string("CUDNN_ATTR_OPERATION_POINTWISE_BDESC is not set; pointwise ") + mode_name(op.mode) +
                    " takes two inputs, x and b");
  if (!binary && bv)
    return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                std::string("pointwise ") + mode_name(op.mode) +
                    " takes one input, x; CUDNN_ATTR_OPERATION_POINTWISE_BDESC is set (leave it unset)");
  if (bv) op.b = bv->descs[0];
  for (cudnnBackendAttributeName_t a : {CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC,
                                        CUDNN_ATTR_OPERATION_POINTWISE_TDESC})
    if (find_attr(d.attrs, a))
      return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize,
                  attr_name(a) +
                      " is set: it belongs to the backward and three-input pointwise modes, which the fake "
                      "does not run (Note [Pointwise descriptors the fake takes])");
  for (cudnnBackendAttributeName_t a : {CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2})
    if (const Value* v = find_attr(d.attrs, a); v && v->real() != 1.0)
      return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize,
                  attr_name(a) + " is " + std::to_string(v->real()) +
                      "; the fake runs pointwise operations unscaled (alpha1 = alpha2 = 1): fold the factor into b");
  const TensorInfo &x = op.x->as<TensorInfo>(), &y = op.y->as<TensorInfo>();
  const std::string shapes = " (pointwise " + std::string(mode_name(op.mode)) + ": x " + dims_str(x.dims) +
                             (op.b ? ", b " + dims_str(op.b->as<TensorInfo>().dims) : "") + ", y " + dims_str(y.dims) +
                             ")";
  if (y.dims != x.dims) return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, kFinalize, "y's dims must be x's" + shapes);
  if (op.b) {
    const std::vector<int64_t>& b = op.b->as<TensorInfo>().dims;
    bool fits = b.size() == x.dims.size();
    for (size_t i = 0; fits && i < b.size(); ++i) fits = b[i] == x.dims[i] || b[i] == 1;
    if (!fits)
      return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, kFinalize,
                  "b does not broadcast to x: each of b's dims must be x's or 1" + shapes);
  }
  auto n = new_node(d);
  n->attrs.try_emplace(int(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1),
                       Value::of(CUDNN_TYPE_DOUBLE, std::vector<double>{1}));
  n->attrs.try_emplace(int(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2),
                       Value::of(CUDNN_TYPE_DOUBLE, std::vector<double>{1}));
  n->info = std::move(op);
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_genstats(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* what = "a genstats operation (mode, math precision, x, sum, sqsum)";
  const cudnnBackendAttributeName_t need[] = {
      CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_ATTR_OPERATION_GENSTATS_XDESC,
      CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC};
  for (cudnnBackendAttributeName_t a : need)
    if (!required(d.attrs, a, what, &st)) return st;
  // The mode's only value is SUM_SQSUM (set_attribute checks the enum's range).
  if (const auto prec = find_attr(d.attrs, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC)->at<cudnnDataType_t>(0);
      prec != CUDNN_DATA_FLOAT)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, kFinalize,
                "CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC is data type " + std::to_string(int(prec)) +
                    "; genstats accumulates in float precision: set CUDNN_DATA_FLOAT");
  GenStatsInfo g;
  g.x = find_attr(d.attrs, CUDNN_ATTR_OPERATION_GENSTATS_XDESC)->descs[0];
  g.sum = find_attr(d.attrs, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC)->descs[0];
  g.sqsum = find_attr(d.attrs, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC)->descs[0];
  const std::vector<int64_t>& x = g.x->as<TensorInfo>().dims;
  std::vector<int64_t> per_channel(x.size(), 1);
  if (x.size() >= 2) per_channel[1] = x[1];
  for (const auto& [name, t] : {std::pair<const char*, const NodePtr*>{"sum", &g.sum}, {"sqsum", &g.sqsum}}) {
    const TensorInfo& ti = (*t)->as<TensorInfo>();
    if (ti.dims != per_channel)
      return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, kFinalize,
                  std::string("genstats: ") + name + " is " + tname(*t) + "; it holds one value per channel of x " +
                      dims_str(x) + ": give it dims " + dims_str(per_channel));
    if (ti.dtype != CUDNN_DATA_FLOAT)
      return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, kFinalize,
                  std::string("genstats: ") + name + " (" + tname(*t) + ") has data type " +
                      std::to_string(int(ti.dtype)) + "; genstats writes f32 sums: make it CUDNN_DATA_FLOAT");
  }
  auto n = new_node(d);
  n->info = std::move(g);
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

namespace {

// One graph's operations as match_fusion walks them: who writes and reads each tensor, which
// operations a pattern has claimed, and the refusal naming the whole graph.
struct FusionWalk {
  explicit FusionWalk(const std::vector<NodePtr>& ops_) : ops(ops_), used(ops_.size()) {
    for (size_t i = 0; i < ops.size(); ++i) {
      found += (i ? ", " : "") + op_label(ops[i]);
      std::vector<NodePtr> in, out;
      ins_outs(ops[i], &in, &out);
      for (const NodePtr& t : in) consumers[slot(t)].push_back(i);
      for (const NodePtr& t : out) producers[slot(t)].push_back(i);
    }
  }

  // Tensors in the order they first appear (for stable messages).
  size_t slot(const NodePtr& t) {
    for (size_t k = 0; k < tensors.size(); ++k)
      if (tensors[k] == t) return k;
    tensors.push_back(t);
    producers.emplace_back();
    consumers.emplace_back();
    return tensors.size() - 1;
  }
  long producer(const NodePtr& t) {
    const size_t k = slot(t);
    return producers[k].empty() ? -1 : long(producers[k][0]);
  }
  // Operation i when it is a pointwise op of `mode`, claimed; else null.
  const PointwiseOpInfo* pointwise(long i, cudnnPointwiseMode_t mode) {
    if (i < 0 || !ops[size_t(i)]->is<PointwiseOpInfo>()) return nullptr;
    const PointwiseOpInfo& p = ops[size_t(i)]->as<PointwiseOpInfo>();
    if (p.mode != mode) return nullptr;
    used[size_t(i)] = true;
    return &p;
  }
  std::string by(long i) const { return i < 0 ? std::string("no operation") : op_label(ops[size_t(i)]); }
  cudnnStatus_t pattern(const std::string& why) const {
    return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, kFinalize,
                why + " (the graph: " + found +
                    "); the fake runs one convolution per graph, alone or fused with a prologue x * scale + bias "
                    "(then relu) on its x (forward, backward filter) and/or genstats of its y (forward): "
                    "Note [Fused graphs the fake runs] in cuda_emu/cudnn_finalize.cc");
  }

  const std::vector<NodePtr>& ops;
  std::string found;  // the operations' labels, for messages
  std::vector<NodePtr> tensors;
  std::vector<std::vector<size_t>> producers, consumers;  // [tensor]: operation indices
  std::vector<bool> used;                                 // [operation]: part of the pattern
};

// Each tensor written once, a virtual tensor linking exactly one producer to one consumer,
// and every real tensor its own unique id (the variant pack binds pointers by id).
cudnnStatus_t check_tensor_links(const FusionWalk& g) {
  for (size_t k = 0; k < g.tensors.size(); ++k) {
    const TensorInfo& t = g.tensors[k]->as<TensorInfo>();
    if (g.producers[k].size() > 1)
      return g.pattern(tname(g.tensors[k]) + " is written by " + std::to_string(g.producers[k].size()) +
                       " operations; give each output its own tensor");
    if (t.is_virtual && (g.producers[k].size() != 1 || g.consumers[k].size() != 1))
      return g.pattern(tname(g.tensors[k]) + " is produced by " + std::to_string(g.producers[k].size()) +
                       " and consumed by " + std::to_string(g.consumers[k].size()) +
                       " operations; a virtual tensor links one operation's output to one other's input (make it "
                       "real to read it twice)");
  }
  for (size_t i = 0; i < g.tensors.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const TensorInfo &a = g.tensors[i]->as<TensorInfo>(), &b = g.tensors[j]->as<TensorInfo>();
      if (!a.is_virtual && !b.is_virtual && a.uid == b.uid)
        return fail(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, kFinalize,
                    tname(g.tensors[j]) + " and " + tname(g.tensors[i]) +
                        " have one unique id; the variant pack binds pointers by id, so give each tensor its own");
    }
  return CUDNN_STATUS_SUCCESS;
}

// The prologue's tensors once matched: the links virtual and shaped like X, X a real tensor
// the graph reads and 4-D, scale and bias real per-channel tensors, X of the convolution's
// data type.
cudnnStatus_t check_prologue_tensors(FusionWalk& g, const std::vector<NodePtr>& links, const Fusion& f,
                                     cudnnDataType_t data) {
  const TensorInfo& X = f.x->as<TensorInfo>();
  for (const NodePtr& l : links) {
    const TensorInfo& li = l->as<TensorInfo>();
    if (!li.is_virtual)
      return g.pattern("the prologue's intermediate " + tname(l) +
                       " is real; the fused kernel never writes it: set CUDNN_ATTR_TENSOR_IS_VIRTUAL");
    if (li.dims != X.dims)
      return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, kFinalize,
                  "the prologue's " + tname(l) + " must have x's dims " + dims_str(X.dims));
    if (!fused_dtype(li.dtype, X.dtype))
      return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, kFinalize,
                  "the prologue's " + tname(l) + " has data type " + std::to_string(int(li.dtype)) +
                      "; the fake's virtual tensors are f32 or x's data type");
  }
  if (X.is_virtual || g.producer(f.x) >= 0)
    return g.pattern("the prologue's input " + tname(f.x) + " comes from " + g.by(g.producer(f.x)) +
                     "; it must be a real tensor the graph reads");
  if (X.dims.size() != 4)
    return g.pattern("the prologue's input " + tname(f.x) + " is not 4-D; the fake fuses 2-D convolutions only");
  const std::vector<int64_t> per_c = {1, X.dims[1], 1, 1};
  for (const auto& [name, p] : {std::pair<const char*, const NodePtr*>{"scale", &f.scale}, {"bias", &f.bias}}) {
    const TensorInfo& ti = (*p)->as<TensorInfo>();
    if (ti.is_virtual)
      return g.pattern(std::string("the prologue's ") + name + " (" + tname(*p) +
                       ") is virtual; scale and bias are real per-channel tensors the variant pack binds");
    if (ti.dims != per_c)
      return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, kFinalize,
                  std::string("the prologue's ") + name + " is " + tname(*p) +
                      "; it holds one value per channel of x " + dims_str(X.dims) + ": give it dims " +
                      dims_str(per_c));
    if (!fused_dtype(ti.dtype, X.dtype))
      return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, kFinalize,
                  std::string("the prologue's ") + name + " (" + tname(*p) + ") has data type " +
                      std::to_string(int(ti.dtype)) + "; make it f32 or x's data type");
  }
  if (X.dtype != data)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, kFinalize,
                "the prologue's input " + tname(f.x) + " has data type " + std::to_string(int(X.dtype)) +
                    " and the convolution's w " + std::to_string(int(data)) + "; give them one data type");
  return CUDNN_STATUS_SUCCESS;
}

// The prologue, walked back from the convolution's x: [RELU_FWD <-] ADD(., bias) <- MUL(X, scale).
cudnnStatus_t match_prologue(FusionWalk& g, const OpInfo& conv, Fusion* f) {
  if (conv.op == ConvOp::backward_data || g.producer(conv.x) < 0) return CUDNN_STATUS_SUCCESS;
  NodePtr t = conv.x;
  std::vector<NodePtr> links = {t};  // the prologue's virtual tensors
  if (const PointwiseOpInfo* relu = g.pointwise(g.producer(t), CUDNN_POINTWISE_RELU_FWD)) {
    f->relu = true;
    t = relu->x;
    links.push_back(t);
  }
  const PointwiseOpInfo* add = g.pointwise(g.producer(t), CUDNN_POINTWISE_ADD);
  if (!add)
    return g.pattern("the convolution's x comes from " + g.by(g.producer(t)) + " through " + tname(t) +
                     "; a prologue is pointwise MUL (x, scale) then ADD (., bias), then optionally "
                     "RELU_FWD: MUL and ADD always together");
  const PointwiseOpInfo* mul = g.pointwise(g.producer(add->x), CUDNN_POINTWISE_MUL);
  if (!mul)
    return g.pattern("the prologue's ADD takes its x (" + tname(add->x) + ") from " + g.by(g.producer(add->x)) +
                     "; it must be the output of a pointwise MUL (x, scale): MUL and ADD always together");
  links.push_back(add->x);
  f->x = mul->x, f->scale = mul->b, f->bias = add->b;
  return check_prologue_tensors(g, links, *f, conv.w->as<TensorInfo>().dtype);
}

// Genstats of the convolution's y: at most one, on a forward's real y, with real outputs.
cudnnStatus_t match_genstats(FusionWalk& g, const OpInfo& conv, const std::vector<size_t>& stats, Fusion* f) {
  if (stats.size() > 1)
    return g.pattern("the graph has " + std::to_string(stats.size()) + " genstats; the fake runs one");
  if (stats.empty()) return CUDNN_STATUS_SUCCESS;
  const GenStatsInfo& gs = g.ops[stats[0]]->as<GenStatsInfo>();
  if (conv.op != ConvOp::forward || gs.x != conv.y)
    return g.pattern("genstats reads " + tname(gs.x) +
                     ", not a convolution forward's y; the fake runs genstats on the forward's output only");
  if (conv.y->as<TensorInfo>().is_virtual)
    return g.pattern("the convolution's y (" + tname(conv.y) +
                     ") is virtual; with genstats the fused graph writes y and its statistics: make y real");
  for (const NodePtr& s : {gs.sum, gs.sqsum})
    if (s->as<TensorInfo>().is_virtual)
      return g.pattern("genstats' output " + tname(s) + " is virtual; sum and sqsum are real f32 tensors");
  f->sum = gs.sum, f->sqsum = gs.sqsum;
  g.used[stats[0]] = true;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

cudnnStatus_t match_fusion(const std::vector<NodePtr>& ops, NodePtr* conv_op, Fusion* f) {
  FusionWalk g(ops);
  std::vector<size_t> convs, stats;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i]->is<OpInfo>()) convs.push_back(i);
    if (ops[i]->is<GenStatsInfo>()) stats.push_back(i);
  }
  if (convs.size() != 1) return g.pattern("the graph has " + std::to_string(convs.size()) + " convolutions");
  if (cudnnStatus_t st = check_tensor_links(g)) return st;
  const OpInfo& conv = ops[convs[0]]->as<OpInfo>();
  g.used[convs[0]] = true;
  if (cudnnStatus_t st = match_prologue(g, conv, f)) return st;
  if (cudnnStatus_t st = match_genstats(g, conv, stats, f)) return st;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!g.used[i])
      return g.pattern("operation " + std::to_string(i) + " (" + op_label(ops[i]) + ") is not part of a pattern");
  *conv_op = ops[convs[0]];
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace rt::emu::cudnn
