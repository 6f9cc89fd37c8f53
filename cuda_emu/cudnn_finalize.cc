// cudnnBackendFinalize for tensors, convolutions, convolution operations and operation
// graphs (cudnn_finalize.h): what cuDNN checks, with its statuses.
//
// Note [Finalize checks]
// Compared with cuDNN 9.19 on the CPU. Where it is laxer than its documentation the fake
// follows the documentation (CONV_MODE, POST_PADDINGS and the heuristics' MODE are "required
// attributes" in the docs; 9.19 defaults them), and a few checks are the fake's own, for
// bugs a GPU would not report: every tensor needs a unique id and positive dims at finalize
// (9.19 accepts zero dims and no id), and a graph's tensors must have distinct unique ids
// (9.19 binds both to one pointer). Overlapping strides are refused by the operation, as in
// 9.19; the operation graph's handle is optional, as in 9.19 (the attribute is deprecated).
#include "cuda_emu/cudnn_finalize.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "cuda_emu/cudnn_attrs.h"
#include "cuda_emu/cudnn_fusion.h"
#include "cuda_emu/cudnn_status.h"

namespace rt::emu::cudnn {
namespace {

size_t any_dtype_size(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64:
    case CUDNN_DATA_COMPLEX_FP32:
      return 8;
    case CUDNN_DATA_COMPLEX_FP64:
      return 16;
    case CUDNN_DATA_FLOAT:
    case CUDNN_DATA_INT32:
    case CUDNN_DATA_UINT32:
    case CUDNN_DATA_INT8x4:
    case CUDNN_DATA_UINT8x4:
      return 4;
    case CUDNN_DATA_INT8x32:
      return 32;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16:
      return 2;
    default:
      return 1;  // 8-bit and smaller types
  }
}

std::string list(const std::vector<int64_t>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return "(" + os.str() + ")";
}

// The slot names of an operation: x/w/y, dx/w/dy, x/dw/dy, and their attributes.
struct Slots {
  ConvOp op;
  const char *x, *w, *y;
  cudnnBackendAttributeName_t ax, aw, ay, conv, alpha, beta;
};
Slots slots_of(cudnnBackendDescriptorType_t t) {
  switch (t) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      return {ConvOp::backward_data, "dx", "w", "dy", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      return {ConvOp::backward_filter, "x", "dw", "dy", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
    default:
      return {ConvOp::forward, "x", "w", "y", CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
  }
}

// Whether two elements of the tensor share memory: dims of extent > 1 sorted by stride, each
// stride must reach past everything the dims inside it span. "" or the conflict, in words.
std::string overlap(const TensorInfo& t) {
  std::vector<int> order;
  for (int i = 0; i < int(t.dims.size()); ++i)
    if (t.dims[size_t(i)] > 1) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return t.strides[size_t(a)] < t.strides[size_t(b)]; });
  int64_t span = 1;  // elements the dims so far reach: max offset + 1
  for (size_t k = 0; k < order.size(); ++k) {
    const int i = order[k];
    const int64_t s = t.strides[size_t(i)], d = t.dims[size_t(i)];
    if (s < span) {
      std::ostringstream os;
      os << "dim " << i << " (extent " << d << ", stride " << s << ") ";
      if (k == 0)
        os << "has stride 0, so all its elements are one";
      else
        os << "steps by less than dim " << order[k - 1] << " and the dims inside it reach (" << span << " elements)";
      return os.str();
    }
    span = s * (d - 1) + span;
  }
  return "";
}

// Note [Fused graphs the fake runs]
// One convolution operation per graph, 1-D and 2-D (3-D graphs finalize, engines refuse
// them), alone or fused as batch-norm training fuses it (cudnn-frontend's ConvBNfprop and
// scale-bias-relu wgrad samples), the operations in any order:
//   F  [t1 = MUL(X, scale); t2 = ADD(t1, bias); t3 = RELU_FWD(t2)]  y = conv forward(t3 or X, w)
//      [GEN_STATS(y) -> sum, sqsum]                                 (the prologue and/or genstats)
//   W  the same prologue into a convolution backward filter's x: dw = wgrad(t3 or t2, dy)
// RELU_FWD is optional, MUL and ADD come together; X, w, y, dy, dw, scale, bias, sum and sqsum
// are real, scale and bias (1, C, 1, 1) in f32 or X's type, sum and sqsum f32 (1, O, 1, 1);
// t1..t3 are virtual, X's dims, each written by one operation and read by one. Tensors are
// linked by descriptor identity (a descriptor set on two operations is one tensor), real ones
// need distinct unique ids. Anything else with more than one operation is refused with
// NOT_SUPPORTED_GRAPH_PATTERN naming what was found (cudnn_fusion.cc); only engines listing
// the fusions (fusions= in Note [Engine list]) run them, on NHWC x and y.
// Execution (cudnnBackendExecute) computes, as a runtime-compiled kernel would:
//   prologue  v = relu?(float(X) * scale + bias), each operation rounded to float (no FMA),
//             then rounded to the convolution's storage type (w's: what tensor cores read)
//             into a host buffer laid out like X, which the convolution reads as its x with
//             the engine's numerics (Note [Fake engine numerics] in cudnn_engines.cc);
//   genstats  per output channel, sum and sum of squares of y as stored (rounded) over N, H,
//             W, accumulated in double, each rounded once to f32.
// The variant pack binds every real tensor (X in place of the virtual x); the emulator sees
// X, scale, bias, w (dy) read and y (dw), sum, sqsum written, and the kernel lab one pass:
// no extra read or write of the activations for the fused parts.
ConvCase conv_case(const OpInfo& op) {
  const TensorInfo &x = op.x->as<TensorInfo>(), &w = op.w->as<TensorInfo>(), &y = op.y->as<TensorInfo>();
  const ConvInfo& cv = op.conv->as<ConvInfo>();
  ConvCase c;
  c.spatial_dims = cv.spatial;
  c.compute = cv.compute;
  c.dtypes = {x.dtype, w.dtype, y.dtype};
  c.alignment = std::min({x.alignment, w.alignment, y.alignment});
  ConvProblem& p = c.p;
  p.op = op.op;
  p.dtype = x.dtype;
  p.flip = cv.mode == CUDNN_CONVOLUTION;
  if (cv.spatial > 2) return c;
  // As 4-D: a 1-D convolution is a 2-D one with H = 1 (its stride never used).
  auto as4 = [&](const TensorInfo& t, std::array<int64_t, 4>* dims, std::array<int64_t, 4>* strides) {
    if (cv.spatial == 2) {
      std::copy_n(t.dims.begin(), 4, dims->begin());
      std::copy_n(t.strides.begin(), 4, strides->begin());
    } else {
      *dims = {t.dims[0], t.dims[1], 1, t.dims[2]};
      *strides = {t.strides[0], t.strides[1], 0, t.strides[2]};
    }
  };
  std::array<int64_t, 4> xd, wd, yd;
  as4(x, &xd, &p.xs);
  as4(w, &wd, &p.ws);
  as4(y, &yd, &p.ys);
  p.N = xd[0], p.C = xd[1], p.H = xd[2], p.W = xd[3];
  p.O = wd[0], p.KH = wd[2], p.KW = wd[3];
  p.HO = yd[2], p.WO = yd[3];
  p.groups = xd[1] / wd[1];
  const size_t h = cv.spatial == 2 ? 0 : 1;  // index of H in the convolution's arrays (none for 1-D)
  const size_t wi = cv.spatial - 1;
  if (cv.spatial == 2) p.sh = cv.stride[h], p.ph = cv.pre[h], p.dh = cv.dilation[h];
  p.sw = cv.stride[wi], p.pw = cv.pre[wi], p.dw = cv.dilation[wi];
  c.layouts = {layout_of(xd.data(), p.xs.data()), layout_of(wd.data(), p.ws.data()),
               layout_of(yd.data(), p.ys.data())};
  return c;
}

}  // namespace

const Value* find_attr(const AttrStore& a, cudnnBackendAttributeName_t name) {
  const auto it = a.find(int(name));
  return it == a.end() ? nullptr : &it->second;
}

const Value* required(const AttrStore& a, cudnnBackendAttributeName_t name, const char* what, cudnnStatus_t* st) {
  const Value* v = find_attr(a, name);
  if (!v)
    *st = fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
               attr_name(name) + " is not set; " + what + " needs it (cudnnBackendSetAttribute before finalizing)");
  return v;
}

std::shared_ptr<Node> new_node(const Descriptor& d) {
  auto n = std::make_shared<Node>();
  n->type = d.type;
  n->attrs = d.attrs;
  return n;
}

cudnnStatus_t finalize(Descriptor& d) {
  if (d.node)
    return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                std::string("the ") + desc_type_name(d.type) + " is finalized already; a descriptor is finalized once");
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      return finalize_tensor(d);
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
      return finalize_convolution(d);
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      return finalize_operation(d);
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
      return finalize_pointwise(d);
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
      return finalize_pointwise_op(d);
    case CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR:
      return finalize_genstats(d);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      return finalize_graph(d);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      return finalize_heuristics(d);
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      return finalize_engine(d);
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      return finalize_engine_config(d);
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      return finalize_plan(d);
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      return finalize_variant_pack(d);
    default:
      return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize, "descriptor type not emulated");  // not creatable
  }
}

// A tensor descriptor's checks (Note [Finalize checks]).
cudnnStatus_t finalize_tensor(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* what = "a tensor (dims, strides, data type, unique id, byte alignment)";
  TensorInfo t;
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_TENSOR_IS_VIRTUAL)) t.is_virtual = v->at<bool>(0);
  const Value* dims = required(d.attrs, CUDNN_ATTR_TENSOR_DIMENSIONS, what, &st);
  const Value* strides = dims ? required(d.attrs, CUDNN_ATTR_TENSOR_STRIDES, what, &st) : nullptr;
  const Value* dtype = strides ? required(d.attrs, CUDNN_ATTR_TENSOR_DATA_TYPE, what, &st) : nullptr;
  const Value* align = dtype ? required(d.attrs, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, what, &st) : nullptr;
  const Value* uid = !align || t.is_virtual ? nullptr : required(d.attrs, CUDNN_ATTR_TENSOR_UNIQUE_ID, what, &st);
  if (st) return st;
  t.dims = dims->i64s();
  t.strides = strides->i64s();
  t.dtype = dtype->at<cudnnDataType_t>(0);
  t.alignment = align->i64();
  if (!uid && t.is_virtual) uid = find_attr(d.attrs, CUDNN_ATTR_TENSOR_UNIQUE_ID);  // optional: names it in messages
  t.uid = uid ? uid->i64() : 0;
  if (t.dims.size() != t.strides.size())
    return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                "the tensor has " + std::to_string(t.dims.size()) + " dimensions " + list(t.dims) + " but " +
                    std::to_string(t.strides.size()) + " strides " + list(t.strides) + "; give one stride per dim");
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (t.dims[i] <= 0)
      return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                  "dimension " + std::to_string(i) + " of " + list(t.dims) + " is " + std::to_string(t.dims[i]) +
                      "; every dimension must be positive");
    if (t.strides[i] < 0)
      return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                  "stride " + std::to_string(i) + " of " + list(t.strides) + " is negative");
  }
  const int64_t es = int64_t(any_dtype_size(t.dtype));
  if (t.alignment <= 0 || t.alignment % es != 0)
    return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT is " + std::to_string(t.alignment) +
                    "; it must be a positive multiple of the element size (" + std::to_string(es) + " bytes)");
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_TENSOR_VECTOR_COUNT); v && v->i64() != 1)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize, "vectorized tensors (vector count != 1) are not emulated");
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_TENSOR_REORDERING_MODE);
      v && v->at<cudnnBackendTensorReordering_t>(0) != CUDNN_TENSOR_REORDERING_NONE)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize, "tensor reordering modes are not emulated");
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_TENSOR_IS_BY_VALUE); v && v->at<bool>(0))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize, "by-value tensors (pointwise scalars) are not emulated");
  auto n = new_node(d);
  n->attrs.try_emplace(int(CUDNN_ATTR_TENSOR_VECTOR_COUNT), Value::of(CUDNN_TYPE_INT64, std::vector<int64_t>{1}));
  n->attrs.try_emplace(int(CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION),
                       Value::of(CUDNN_TYPE_INT64, std::vector<int64_t>{-1}));
  n->attrs.try_emplace(int(CUDNN_ATTR_TENSOR_IS_VIRTUAL), Value::of(CUDNN_TYPE_BOOLEAN, std::vector<uint8_t>{0}));
  n->attrs.try_emplace(int(CUDNN_ATTR_TENSOR_IS_BY_VALUE), Value::of(CUDNN_TYPE_BOOLEAN, std::vector<uint8_t>{0}));
  n->attrs.try_emplace(int(CUDNN_ATTR_TENSOR_REORDERING_MODE),
                       Value::of(CUDNN_TYPE_TENSOR_REORDERING_MODE,
                                 std::vector<cudnnBackendTensorReordering_t>{CUDNN_TENSOR_REORDERING_NONE}));
  n->info = std::move(t);
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_convolution(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* what = "a convolution (spatial dims, compute type, mode, pre/post paddings, strides, dilations)";
  ConvInfo c;
  const cudnnBackendAttributeName_t need[] = {
      CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,  CUDNN_ATTR_CONVOLUTION_COMP_TYPE,      CUDNN_ATTR_CONVOLUTION_CONV_MODE,
      CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,  CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,  CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
      CUDNN_ATTR_CONVOLUTION_DILATIONS};
  for (cudnnBackendAttributeName_t a : need)
    if (!required(d.attrs, a, what, &st)) return st;
  c.spatial = int(find_attr(d.attrs, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS)->i64());
  c.compute = find_attr(d.attrs, CUDNN_ATTR_CONVOLUTION_COMP_TYPE)->at<cudnnDataType_t>(0);
  c.mode = find_attr(d.attrs, CUDNN_ATTR_CONVOLUTION_CONV_MODE)->at<cudnnConvolutionMode_t>(0);
  c.pre = find_attr(d.attrs, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS)->i64s();
  c.post = find_attr(d.attrs, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS)->i64s();
  c.stride = find_attr(d.attrs, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES)->i64s();
  c.dilation = find_attr(d.attrs, CUDNN_ATTR_CONVOLUTION_DILATIONS)->i64s();
  if (c.spatial < 1 || c.spatial > CUDNN_DIM_MAX - 2)
    return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                "CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS is " + std::to_string(c.spatial) + "; want 1 to " +
                    std::to_string(CUDNN_DIM_MAX - 2) + " (2 for a 2-D convolution)");
  const struct {
    const char* name;
    const std::vector<int64_t>& v;
    int64_t least;
  } arrays[] = {{"pre-paddings", c.pre, 0}, {"post-paddings", c.post, 0}, {"filter strides", c.stride, 1},
                {"dilations", c.dilation, 1}};
  for (const auto& a : arrays) {
    if (int(a.v.size()) != c.spatial)
      return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                  std::string("the convolution has ") + std::to_string(c.spatial) + " spatial dims but " +
                      std::to_string(a.v.size()) + " " + a.name + " " + list(a.v) + "; give one per spatial dim");
    for (int64_t x : a.v)
      if (x < a.least)
        return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                    std::string("the ") + a.name + " " + list(a.v) + " must be >= " + std::to_string(a.least));
  }
  auto n = new_node(d);
  n->info = std::move(c);
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_operation(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const Slots s = slots_of(d.type);
  const std::string what = std::string("a convolution ") + conv_op_name(s.op) + " operation (" + s.x + ", " + s.w +
                           ", " + s.y + ", the convolution)";
  const Value* vx = required(d.attrs, s.ax, what.c_str(), &st);
  const Value* vw = vx ? required(d.attrs, s.aw, what.c_str(), &st) : nullptr;
  const Value* vy = vw ? required(d.attrs, s.ay, what.c_str(), &st) : nullptr;
  const Value* vc = vy ? required(d.attrs, s.conv, what.c_str(), &st) : nullptr;
  if (st) return st;
  OpInfo op;
  op.op = s.op;
  op.x = vx->descs[0], op.w = vw->descs[0], op.y = vy->descs[0], op.conv = vc->descs[0];
  if (const Value* a = find_attr(d.attrs, s.alpha)) op.alpha = a->real();
  if (const Value* b = find_attr(d.attrs, s.beta)) op.beta = b->real();
  const TensorInfo &x = op.x->as<TensorInfo>(), &w = op.w->as<TensorInfo>(), &y = op.y->as<TensorInfo>();
  const ConvInfo& cv = op.conv->as<ConvInfo>();
  auto mismatch = [&](const std::string& m) {
    return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, kFinalize,
                std::string("convolution ") + conv_op_name(s.op) + ": " + m + " (" + s.x + " " + list(x.dims) + ", " +
                    s.w + " " + list(w.dims) + ", " + s.y + " " + list(y.dims) + ")");
  };
  const size_t nd = size_t(cv.spatial) + 2;
  for (const auto& [name, t] : {std::pair<const char*, const TensorInfo*>{s.x, &x}, {s.w, &w}, {s.y, &y}})
    if (t->dims.size() != nd)
      return mismatch(std::string(name) + " has " + std::to_string(t->dims.size()) + " dims; a convolution with " +
                      std::to_string(cv.spatial) + " spatial dims takes " + std::to_string(nd));
  if (x.dims[0] != y.dims[0])
    return mismatch(std::string(s.x) + "'s batch is " + std::to_string(x.dims[0]) + " but " + s.y + "'s is " +
                    std::to_string(y.dims[0]));
  if (w.dims[0] != y.dims[1])
    return mismatch(std::string(s.w) + " has " + std::to_string(w.dims[0]) + " output channels but " + s.y + " has " +
                    std::to_string(y.dims[1]));
  if (x.dims[1] % w.dims[1] != 0)
    return mismatch(std::string(s.x) + "'s " + std::to_string(x.dims[1]) + " channels are not a multiple of " + s.w +
                    "'s " + std::to_string(w.dims[1]) + " (groups = " + s.x + "'s C / " + s.w + "'s C)");
  const int64_t groups = x.dims[1] / w.dims[1];
  if (w.dims[0] % groups != 0)
    return mismatch(std::string(s.w) + "'s " + std::to_string(w.dims[0]) + " output channels are not a multiple of " +
                    std::to_string(groups) + " groups");
  const char* axis_names[] = {"D", "H", "W"};
  for (int i = 0; i < cv.spatial; ++i) {
    const size_t k = size_t(i) + 2;
    const char* ax = cv.spatial <= 3 ? axis_names[3 - cv.spatial + i] : "spatial dim";
    const int64_t padded = x.dims[k] + cv.pre[size_t(i)] + cv.post[size_t(i)];
    const int64_t span = cv.dilation[size_t(i)] * (w.dims[k] - 1) + 1;
    if (padded < span)
      return mismatch("along " + std::string(ax) + " the dilated filter spans " + std::to_string(span) +
                      " but the padded " + s.x + " only " + std::to_string(padded));
    const int64_t out = (padded - span) / cv.stride[size_t(i)] + 1;
    if (y.dims[k] != out)
      return mismatch(std::string(s.y) + "'s " + ax + " is " + std::to_string(y.dims[k]) +
                      " but the convolution gives " + std::to_string(out));
  }
  for (const auto& [name, t] : {std::pair<const char*, const TensorInfo*>{s.x, &x}, {s.w, &w}, {s.y, &y}})
    if (const std::string o = overlap(*t); !o.empty())
      return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                  std::string("convolution ") + conv_op_name(s.op) + ": " + name + "'s strides " + list(t->strides) +
                      " for dims " + list(t->dims) + " make elements overlap: " + o +
                      "; give each element its own memory");
  auto n = new_node(d);
  n->attrs.try_emplace(int(s.alpha), Value::of(CUDNN_TYPE_DOUBLE, std::vector<double>{1.0}));
  n->attrs.try_emplace(int(s.beta), Value::of(CUDNN_TYPE_DOUBLE, std::vector<double>{0.0}));
  n->info = std::move(op);
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

// An operation graph (Note [Fused graphs the fake runs]) and its checks (Note [Finalize checks]).
cudnnStatus_t finalize_graph(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const Value* ops = required(d.attrs, CUDNN_ATTR_OPERATIONGRAPH_OPS, "an operation graph", &st);
  if (st) return st;
  for (size_t i = 0; i < ops->descs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (ops->descs[i] == ops->descs[j])
        return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                    "operation " + std::to_string(i) + " of CUDNN_ATTR_OPERATIONGRAPH_OPS is operation " +
                        std::to_string(j) + " again; list each operation once");
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED); v && v->at<bool>(0))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize, "dynamic shapes are not emulated");
  GraphInfo g;
  if (ops->descs.size() > 1) {
    if (const cudnnStatus_t fst = match_fusion(ops->descs, &g.op, &g.fusion)) return fst;
  } else {
    g.op = ops->descs[0];
    if (!g.op->is<OpInfo>())
      return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, kFinalize,
                  "the graph's one operation is a " + op_label(g.op) +
                      "; the fake runs graphs of one convolution, alone or fused (Note [Fused graphs the fake runs])");
    const OpInfo& op = g.op->as<OpInfo>();
    const Slots s = slots_of(g.op->type);
    const TensorInfo &x = op.x->as<TensorInfo>(), &w = op.w->as<TensorInfo>(), &y = op.y->as<TensorInfo>();
    const std::pair<const char*, const TensorInfo*> ts[] = {{s.x, &x}, {s.w, &w}, {s.y, &y}};
    for (const auto& [name, t] : ts)
      if (t->is_virtual)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, kFinalize,
                    std::string(name) + " is virtual, but no other operation of the graph produces or consumes it");
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < i; ++j)
        if (ts[i].second->uid == ts[j].second->uid)
          return fail(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, kFinalize,
                      std::string(ts[j].first) + " and " + ts[i].first + " both have unique id " +
                          std::to_string(ts[i].second->uid) +
                          "; the variant pack binds pointers by id, so give each tensor its own");
  }
  // The engines see the convolution as it touches memory: with a prologue, x is the real X
  // whose layout and alignment the fused kernel reads.
  OpInfo seen = g.op->as<OpInfo>();
  if (g.fusion.prologue()) seen.x = g.fusion.x;
  g.conv = conv_case(seen);
  g.conv.fusions = uint8_t((g.fusion.prologue() ? kFuseScaleBiasRelu : 0) | (g.fusion.genstats() ? kFuseGenstats : 0));
  g.list = engines();
  auto n = new_node(d);
  n->attrs[int(CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT)] =
      Value::of(CUDNN_TYPE_INT64, std::vector<int64_t>{int64_t(g.list->engines.size())});
  n->info = std::move(g);
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace rt::emu::cudnn
