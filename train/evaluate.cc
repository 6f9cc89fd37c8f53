#include "train/evaluate.h"

#include <algorithm>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "train/metrics.h"

namespace rt::train {

EvalResult evaluate(const Setup& s, MixedPrecision& mp, const CommonConfig& cfg, ParallelContext& par,
                    const InterruptHandler* interrupt, prof::ProfileSession* profile) {
  NoGradGuard ng;
  nn::Module& model = mp.model();  // s.model, or the EMA's model
  par.before_evaluation(model);
  model.eval();
  // This rank's shard of the test set; the examples past shard.valid are the sampler's padding.
  const EvalShard shard = par.eval_shard(s.test_set->size());
  data::SamplerOptions so;
  so.shuffle = false;
  so.rank = shard.rank;
  so.world_size = shard.world;
  so.shard_sizes = s.test_set->shard_sizes();  // shards: each rank reads a contiguous part (Note [Shard order])
  data::Loader loader(*s.test_set, data::Sampler(s.test_set->size(), cfg.loader.batch_size, so),
                      loader_options(cfg.loader, s.device));
  data::DeviceFeeder feed(loader, s.device, s.format, mp.input_dtype());
  EvalResult r;
  EvalCounts c;
  feed.start_epoch(0, 0);
  for (int64_t batch = 0;; ++batch) {
    if (profile) profile->begin_step(batch);
    const prof::RangeScope step(prof::EventKind::step, "batch " + std::to_string(batch + 1));
    prof::set_step(batch);
    std::optional<data::DeviceBatch> b;
    {
      const prof::RangeScope phase(prof::EventKind::phase, "data");
      b = feed.next();
    }
    if (!b) break;
    if (interrupt && interrupt->signal()) {
      r.interrupted = true;
      break;
    }
    const int64_t n = std::min(b->input.size(0), shard.valid - c.n);  // without the padding
    if (n <= 0) break;
    // The batch's step ends (and a profile of it with it) at the end of this iteration.
    struct EndStep {
      prof::ProfileSession* p;
      int64_t i;
      ~EndStep() {
        if (p) p->end_step(i);
      }
    } end_step{profile, batch};
    const prof::RangeScope phase(prof::EventKind::phase, "forward");
    const Tensor input = n < b->input.size(0) ? b->input.slice_batch(0, n) : b->input;
    const Tensor labels = n < b->input.size(0) ? b->labels.slice_batch(0, n) : b->labels;
    const Tensor logits = mp.forward(input);
    c.loss_sum += cross_entropy(logits, labels, cfg.label_smoothing).item() * double(n);
    const Tensor host = logits.to(Device::cpu()).to(DType::f32);
    topk_hits(host.data<float>(), b->host_labels.data<int64_t>(), n, host.size(1), &c.top1, &c.top5, &c.nonfinite);
    c.n += n;
  }
  if (profile) profile->stop();  // the test set ended inside the profiled batches
  c.skipped = loader.skipped_in_epoch();
  model.train();
  if (r.interrupted) return r;
  par.sum_eval_counts(c);
  const double n = double(std::max<int64_t>(c.n, 1));
  r.loss = c.loss_sum / n;
  r.top1 = 100.0 * double(c.top1) / n;
  r.top5 = 100.0 * double(c.top5) / n;
  r.n = c.n;
  r.skipped = c.skipped;
  r.nonfinite = c.nonfinite;
  return r;
}

}  // namespace rt::train
