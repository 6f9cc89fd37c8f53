#include "models/resnet.h"

#include <numeric>

#include "engine/profiler.h"

namespace rt::models {
namespace {

std::shared_ptr<nn::Sequential> make_downsample(int64_t in, int64_t out, int stride, Generator& g) {
  auto ds = std::make_shared<nn::Sequential>();
  ds->push_back(std::make_shared<nn::Conv2d>(in, out, 1, stride, 0, g));  // downsample.0
  ds->push_back(std::make_shared<nn::BatchNorm2d>(out));                  // downsample.1
  return ds;
}

// Note [Fused block tails]
// Every batch norm of the network is followed by a relu, or by the residual add and a relu;
// each pair runs as one fused op through BatchNorm2d::forward_relu (batch_norm_relu,
// batch_norm_add_relu: one elementwise pass each way instead of two), with the same
// parameters, buffers and values as bn.forward() then relu / add_relu, also under mixed
// precision.

// conv's output and, where bn will take them, its channel sums: every batch norm of the
// network follows a convolution, and takes its statistics from the convolution's fused sums
// where cuDNN computes them (Note [Statistics from the convolution] in
// engine/ops/batch_norm.cc; ResNetConfig::conv_sums).
Tensor conv_for(nn::Conv2d& conv, const nn::BatchNorm2d& bn, const Tensor& x, ChannelSums* sums) {
  return conv.forward(x, bn.wants_sums() ? sums : nullptr);
}

// relu(bn(conv(x))), the pair fused (Note [Fused block tails]).
Tensor conv_bn_relu(nn::Conv2d& conv, nn::BatchNorm2d& bn, const Tensor& x) {
  ChannelSums sums;
  const Tensor y = conv_for(conv, bn, x, &sums);
  return bn.forward_relu(y, Tensor(), sums);
}

// conv(relu(bn(y))) with y's channel sums, bn applied by the convolution as it loads y
// (Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc),
// and the output's sums where `next`, the batch norm after conv, will take them.
Tensor bn_relu_conv(nn::BatchNorm2d& bn, const Tensor& y, const ChannelSums& sums, nn::Conv2d& conv,
                    const nn::BatchNorm2d& next, ChannelSums* next_sums) {
  return bn.forward_relu_conv(y, sums, conv, next.wants_sums() ? next_sums : nullptr);
}

// The downsample branch's modules (make_downsample: conv, batch norm).
std::pair<nn::Conv2d*, nn::BatchNorm2d*> downsample_parts(nn::Sequential& ds) {
  RT_CHECK(ds.size() == 2, "ResNet: a downsample is a conv and a batch norm, got ", ds.size(), " modules");
  auto* conv = dynamic_cast<nn::Conv2d*>(ds.at(0).get());
  auto* bn = dynamic_cast<nn::BatchNorm2d*>(ds.at(1).get());
  RT_CHECK(conv && bn, "ResNet: a downsample is a conv and a batch norm");
  return {conv, bn};
}

// A block's tail: relu(bn(y) + residual), y the last convolution's output with its sums,
// fused (Note [Fused block tails]) unless an attention module sits between the batch norm
// and the add (timm's order: bn, attention, add, relu). The residual is x, or the downsample
// of x (its statistics from its convolution's sums too), whose batch norm then joins the
// tail's op (Note [Two batch norms in one tail] in engine/ops/dual_batch_norm_add_relu.cc).
Tensor block_tail(nn::BatchNorm2d& bn, nn::Module* attention, const Tensor& y, const ChannelSums& sums,
                  nn::Sequential* downsample, const Tensor& x) {
  Tensor r = x;
  ChannelSums r_sums;
  nn::BatchNorm2d* r_bn = nullptr;
  if (downsample) {
    const auto [conv, ds_bn] = downsample_parts(*downsample);
    const prof::ModuleScope scope(downsample);
    r = conv_for(*conv, *ds_bn, x, &r_sums);
    r_bn = ds_bn;
    if (attention) r = r_bn->forward(r, r_sums);
  }
  if (attention) return add_relu(attention->forward(bn.forward(y, sums)), r);
  if (r_bn) return bn.forward_add_relu(y, sums, *r_bn, r, r_sums);
  return bn.forward_relu(y, r, sums);
}

std::shared_ptr<nn::Module> make_attention(const BlockAttention& attention, int64_t channels, Generator& g) {
  if (!attention) return nullptr;
  auto m = attention(channels, g);
  RT_CHECK(m != nullptr, "ResNetConfig::attention returned no module for ", channels, " channels");
  return m;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in, int64_t planes, int stride, bool ds, Generator& g, const BlockAttention& attn,
                       const std::string& attn_name) {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in, planes, 3, stride, 1, g));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(planes, planes, 3, 1, 1, g));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
  if (attn) attention = register_module(attn_name, make_attention(attn, planes, g));
  if (ds) downsample = register_module("downsample", make_downsample(in, planes, stride, g));
}

Tensor BasicBlock::forward(const Tensor& x) {
  const prof::ModuleScope scope(this);
  ChannelSums s1, s2;
  const Tensor y1 = conv_for(*conv1, *bn1, x, &s1);
  const Tensor y2 = bn_relu_conv(*bn1, y1, s1, *conv2, *bn2, &s2);
  return block_tail(*bn2, attention.get(), y2, s2, downsample.get(), x);
}

Bottleneck::Bottleneck(int64_t in, int64_t planes, int stride, bool ds, Generator& g, int64_t groups,
                       int64_t width_per_group, const BlockAttention& attn, const std::string& attn_name) {
  RT_CHECK(groups > 0 && groups <= (int64_t(1) << 30) && width_per_group > 0 && planes * width_per_group % 64 == 0,
           "Bottleneck: planes ", planes, " x width_per_group ", width_per_group,
           " must be a positive multiple of 64, groups in [1, 2^30] (got ", groups, ")");
  // torchvision: width = int(planes * (base_width / 64.)) * groups, exact here.
  const int64_t width = planes * width_per_group / 64 * groups;
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in, width, 1, 1, 0, g));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(width));
  conv2 = register_module("conv2",
                          std::make_shared<nn::Conv2d>(width, width, 3, stride, 1, g, /*bias=*/false, int(groups)));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(width));
  conv3 = register_module("conv3", std::make_shared<nn::Conv2d>(width, planes * kExpansion, 1, 1, 0, g));
  bn3 = register_module("bn3", std::make_shared<nn::BatchNorm2d>(planes * kExpansion));
  if (attn) attention = register_module(attn_name, make_attention(attn, planes * kExpansion, g));
  if (ds) downsample = register_module("downsample", make_downsample(in, planes * kExpansion, stride, g));
}

Tensor Bottleneck::forward(const Tensor& x) {
  const prof::ModuleScope scope(this);
  ChannelSums s1, s2, s3;
  const Tensor y1 = conv_for(*conv1, *bn1, x, &s1);
  const Tensor y2 = bn_relu_conv(*bn1, y1, s1, *conv2, *bn2, &s2);
  const Tensor y3 = bn_relu_conv(*bn2, y2, s2, *conv3, *bn3, &s3);
  return block_tail(*bn3, attention.get(), y3, s3, downsample.get(), x);
}

ResNet::ResNet(const ResNetConfig& cfg) : cfg_(cfg) {
  RT_CHECK(cfg.layers.size() == 4, "ResNet needs 4 stages, got ", cfg.layers.size());
  RT_CHECK(cfg.width > 0 && cfg.num_classes > 0 && cfg.in_channels > 0, "ResNet: width, num_classes and in_channels ",
           "must be positive");
  // The last stage has 8 * expansion * width channels, the fc weight is (num_classes, that):
  // refuse sizes whose products overflow, naming the option, before a layer computes one.
  const int expansion = cfg.bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  int64_t fc_in = 0, fc_bytes = 0;
  RT_CHECK(!__builtin_mul_overflow(cfg.width, int64_t(8 * expansion), &fc_in), "ResNet: width ", cfg.width,
           " is too large");
  RT_CHECK(!__builtin_mul_overflow(cfg.num_classes, fc_in, &fc_bytes) &&
               !__builtin_mul_overflow(fc_bytes, int64_t(sizeof(float)), &fc_bytes),
           "ResNet: num_classes ", cfg.num_classes, " is too large: the classifier's weight [", cfg.num_classes, ", ",
           fc_in, "] of f32 would need more than 2^63 bytes");
  // Note [Group width]
  // A bottleneck's 3x3 conv has groups x (planes * width_per_group / 64) channels, planes =
  // width << stage. torchvision truncates the group width to an integer (to 0 below 1); here
  // a width for which it is not a positive integer at the first stage (and so at every
  // stage) is refused, so that --width scales every group alike.
  RT_CHECK(cfg.bottleneck || (cfg.groups == 1 && cfg.width_per_group == 64),
           "ResNet: the basic block (resnet18/34) supports only groups 1 and width_per_group 64, got groups ",
           cfg.groups, " and width_per_group ", cfg.width_per_group, " (as torchvision)");
  RT_CHECK(cfg.groups > 0 && cfg.groups <= (int64_t(1) << 30) && cfg.width_per_group > 0,
           "ResNet: groups must be in [1, 2^30] and width_per_group positive, got ", cfg.groups, " and ",
           cfg.width_per_group);
  if (cfg.bottleneck) {
    int64_t last_inner = 0;  // the last stage's group width x 64, then its inner width x 64
    RT_CHECK(!__builtin_mul_overflow(cfg.width * 8, cfg.width_per_group, &last_inner) &&
                 !__builtin_mul_overflow(last_inner, cfg.groups, &last_inner),
             "ResNet: width ", cfg.width, " x width_per_group ", cfg.width_per_group, " x groups ", cfg.groups,
             " is too large");
    const int64_t unit = 64 / std::gcd(cfg.width_per_group, int64_t(64));  // the smallest width that divides
    RT_CHECK(cfg.width % unit == 0, "ResNet: width ", cfg.width, " with width_per_group ", cfg.width_per_group,
             " gives the first stage's bottleneck groups ", cfg.width, " x ", cfg.width_per_group,
             " / 64 channels each, not a whole number: use a width that is a multiple of ", unit, " (the ",
             cfg.groups, " groups stay)");
  }
  Generator g(cfg.seed);
  const int64_t w = cfg.width;
  RT_CHECK(cfg.stem_stride == 1 || (cfg.small_stem && cfg.stem_stride == 2),
           "ResNet: stem stride 2 goes with the small stem only (the ImageNet stem has its own)");
  conv1_ = cfg.small_stem ? std::make_shared<nn::Conv2d>(cfg.in_channels, w, 3, cfg.stem_stride, 1, g)
                          : std::make_shared<nn::Conv2d>(cfg.in_channels, w, 7, 2, 3, g);
  register_module("conv1", conv1_);
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(w));
  int64_t in = w;
  for (int s = 0; s < 4; ++s) {
    const int64_t planes = w << s;
    const int stride = s == 0 ? 1 : 2;
    auto stage = std::make_shared<nn::Sequential>();
    for (int b = 0; b < cfg.layers[s]; ++b) {
      const int st = b == 0 ? stride : 1;
      const bool ds = b == 0 && (st != 1 || in != planes * expansion);
      if (cfg.bottleneck) {
        auto blk = std::make_shared<Bottleneck>(in, planes, st, ds, g, cfg.groups, cfg.width_per_group,
                                                cfg.attention, cfg.attention_name);
        if (cfg.zero_init_residual) blk->bn3->weight.fill_(0.0);
        stage->push_back(blk);
      } else {
        auto blk = std::make_shared<BasicBlock>(in, planes, st, ds, g, cfg.attention, cfg.attention_name);
        if (cfg.zero_init_residual) blk->bn2->weight.fill_(0.0);
        stage->push_back(blk);
      }
      in = planes * expansion;
    }
    stages_.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  fc_ = register_module("fc", std::make_shared<nn::Linear>(in, cfg.num_classes, g));
  for (auto& [name, m] : named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) {
      bn->fuse_relu = cfg.fused_tails;
      bn->sums_from_conv = cfg.conv_sums;
      bn->prologue_into_conv = cfg.bn_prologue;
      bn->dual_tail = cfg.dual_tails;
    }
}

Tensor ResNet::forward(const Tensor& x) {
  const prof::ModuleScope scope(this);
  RT_CHECK(x.ndim() == 4 && x.size(1) == cfg_.in_channels, "ResNet: expected input (N, ", cfg_.in_channels,
           ", H, W), got ", x.str());
  Tensor h = conv_bn_relu(*conv1_, *bn1_, x);
  if (!cfg_.small_stem) h = max_pool2d(h, Pool2dParams::make(3, 2, 1));
  for (auto& stage : stages_) h = stage->forward(h);
  return fc_->forward(global_avg_pool(h));
}

}  // namespace rt::models
