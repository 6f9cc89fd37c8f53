#include "data/loading/batch.h"

#include "base/error.h"

namespace rt::data {

Batch assemble_batch(const Dataset& ds, std::span<const int64_t> order, int64_t begin, int64_t end, int64_t epoch,
                     int64_t batch_index, const AssembleOptions& opt, std::span<const int64_t> draws) {
  RT_CHECK(0 <= begin && begin < end && end <= int64_t(order.size()), "assemble_batch: positions [", begin, ", ", end,
           ") are not a non-empty range of an order of ", order.size());
  RT_CHECK(draws.empty() || draws.size() == order.size(), "assemble_batch: ", draws.size(), " draws for an order of ",
           order.size());
  const Shape chw = ds.image_shape();
  const int64_t n = end - begin, bytes = ds.example_bytes();
  const bool u8 = ds.pixel_dtype() == DType::u8;
  const Shape shape = u8 ? Shape{n, chw[1], chw[2], chw[0]} : Shape{n, chw[0], chw[1], chw[2]};
  Batch b;
  b.epoch = epoch;
  b.index = batch_index;
  b.norm = ds.normalization();
  try {
    b.images = opt.pin_memory ? Tensor::empty_pinned(shape, ds.pixel_dtype()) : Tensor::empty(shape, ds.pixel_dtype());
  } catch (const OutOfMemory& e) {
    // Name what the bytes are for: one example may be the problem rather than the batch.
    throw OutOfMemory(detail::cat(e.without_hint(), "; it was for a batch of ", n, n == 1 ? " example" : " examples",
                                  " of dataset ", ds.name(), ", each ", dtype_name(ds.pixel_dtype()), shape_str(chw),
                                  " (", bytes, " bytes)"),
                      n > 1 ? "Use a smaller batch size." : "Even one example does not fit: use smaller images.");
  }
  b.labels = opt.pin_memory ? Tensor::empty_pinned({n}, DType::i64) : Tensor::empty({n}, DType::i64);
  auto* images = static_cast<uint8_t*>(b.images.raw_data());
  int64_t* labels = b.labels.data<int64_t>();
  const int64_t size = int64_t(order.size());
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t attempt = 0;; ++attempt) {
      const size_t p = size_t((begin + k + attempt) % size);
      const int64_t i = order[p];
      try {
        ds.get(i, draws.empty() ? epoch : draws[p], images + k * bytes, &labels[k]);
        break;
      } catch (const BadExample& e) {
        RT_CHECK(!opt.strict, e.what(),
                 " (strict_images is set: unreadable images are errors; unset, they are skipped and replaced)");
        b.skipped.push_back({i, e.source(), e.what()});
        RT_CHECK(attempt + 1 < opt.max_replacements && attempt + 1 < size, "dataset ", ds.name(), ": ", attempt + 1,
                 " unreadable examples in a row, the last ", e.source(), ": ", e.what(),
                 "; the dataset looks damaged: check its path");
      }
    }
  }
  return b;
}

}  // namespace rt::data
