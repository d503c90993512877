#include "trainer/data/batch_prefetcher.h"

#include <algorithm>
#include <utility>

#include "common/random.h"

namespace tj::data {

AugmentDraw DrawAugmentation(uint64_t seed, int epoch, int index, const AugmentOptions& options) {
  // Three draws whatever the options, so one option's draw does not shift with another's.
  SplitMix64 g(
      DeriveSeed(DeriveSeed(seed, static_cast<uint64_t>(epoch)), static_cast<uint64_t>(index)));
  const uint64_t span = 2 * static_cast<uint64_t>(std::max(options.pad, 0)) + 1;
  AugmentDraw d;
  d.shift_y = static_cast<int>(g.Below(span)) - options.pad;
  d.shift_x = static_cast<int>(g.Below(span)) - options.pad;
  d.flip = (g.Next() >> 63) != 0 && options.flip;
  if (options.pad <= 0) d.shift_y = d.shift_x = 0;
  return d;
}

void AugmentAndNormalize(std::span<const uint8_t> pixels, ImageShape shape, const AugmentDraw& draw,
                         const Normalization& normalization, std::span<float> out) {
  const int c = shape.channels;
  float mean[16] = {};
  float scale[16];
  std::vector<float> mean_big;
  std::vector<float> scale_big;
  float* m = mean;
  float* s = scale;
  if (c > 16) {
    mean_big.assign(static_cast<size_t>(c), 0.0f);
    scale_big.assign(static_cast<size_t>(c), 1.0f);
    m = mean_big.data();
    s = scale_big.data();
  }
  for (int k = 0; k < c; ++k) {
    m[k] = normalization.mean.empty() ? 0.0f : normalization.mean[static_cast<size_t>(k)];
    s[k] =
        normalization.stddev.empty() ? 1.0f : 1.0f / normalization.stddev[static_cast<size_t>(k)];
  }
  for (int y = 0; y < shape.height; ++y) {
    const int sy = y + draw.shift_y;
    for (int x = 0; x < shape.width; ++x) {
      const int sx = (draw.flip ? shape.width - 1 - x : x) + draw.shift_x;
      const bool inside = sy >= 0 && sy < shape.height && sx >= 0 && sx < shape.width;
      const uint8_t* src =
          inside ? &pixels[(static_cast<size_t>(sy) * shape.width + static_cast<size_t>(sx)) * c]
                 : nullptr;
      float* dst = &out[(static_cast<size_t>(y) * shape.width + static_cast<size_t>(x)) * c];
      for (int k = 0; k < c; ++k) {
        // Divided, not multiplied by 1 / 255: the IDX reader's floats, to the bit.
        const float v = src != nullptr ? static_cast<float>(src[k]) / 255.0f : 0.0f;
        dst[k] = (v - m[k]) * s[k];
      }
    }
  }
}

std::vector<int> StepIndices(const std::vector<uint32_t>& order, const ShardPlan& plan, int step) {
  const int64_t start = plan.SliceStart(step);
  const int64_t count = int64_t{plan.batch_per_shard} * plan.ShardsPerReplica();
  std::vector<int> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = start; i < start + count && i < static_cast<int64_t>(order.size()); ++i) {
    out.push_back(static_cast<int>(order[static_cast<size_t>(i)]));
  }
  return out;
}

StatusOr<std::unique_ptr<BatchPrefetcher>> BatchPrefetcher::Create(const ImageDataset& dataset,
                                                                   PrefetchOptions options) {
  const size_t c = static_cast<size_t>(dataset.shape().channels);
  const Normalization& n = options.normalization;
  if ((!n.mean.empty() && n.mean.size() != c) || (!n.stddev.empty() && n.stddev.size() != c)) {
    return Status::Error("normalisation for " + std::to_string(n.mean.size()) + " means and " +
                         std::to_string(n.stddev.size()) + " deviations, but " + dataset.source() +
                         " has " + std::to_string(c) + " channels");
  }
  for (float sd : n.stddev) {
    if (!(sd > 0.0f)) return Status::Error("a normalisation std must be positive");
  }
  if (options.augment.pad < 0 || options.augment.pad > 1024) {
    return Status::Error("crop padding " + std::to_string(options.augment.pad) +
                         ": 0..1024 pixels");
  }
  if (options.threads < 0 || options.threads > 256) {
    return Status::Error("prefetch threads " + std::to_string(options.threads) + ": 0..256");
  }
  return std::unique_ptr<BatchPrefetcher>(new BatchPrefetcher(dataset, std::move(options)));
}

BatchPrefetcher::BatchPrefetcher(const ImageDataset& dataset, PrefetchOptions options)
    : dataset_(dataset), options_(std::move(options)) {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Work(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BatchPrefetcher::Submit(BatchRequest request) {
  auto job = std::make_unique<Job>();
  const ImageShape shape = dataset_.shape();
  job->batch.epoch = request.epoch;
  job->batch.shape = shape;
  job->batch.count = static_cast<int>(request.indices.size());
  job->batch.images.resize(request.indices.size() * shape.Size());
  job->batch.labels.resize(request.indices.size());
  job->request = std::move(request);
  {
    MutexLock lock(mu_);
    jobs_.push_back(std::move(job));
  }
  work_ready_.notify_all();
}

Status BatchPrefetcher::DecodeOne(Job& job, int position, std::vector<uint8_t>& scratch) const {
  const int index = job.request.indices[static_cast<size_t>(position)];
  if (index < 0 || index >= dataset_.size()) {
    return Status::Error(dataset_.source() + ": example " + std::to_string(index) +
                         " is not one of its " + std::to_string(dataset_.size()));
  }
  const ImageShape shape = job.batch.shape;
  scratch.resize(shape.Size());
  TJ_RETURN_IF_ERROR(dataset_.ReadImage(index, scratch));
  const AugmentDraw draw = job.request.augment ? DrawAugmentation(options_.seed, job.request.epoch,
                                                                  index, options_.augment)
                                               : AugmentDraw{};
  AugmentAndNormalize(scratch, shape, draw, options_.normalization,
                      std::span<float>(job.batch.images)
                          .subspan(static_cast<size_t>(position) * shape.Size(), shape.Size()));
  job.batch.labels[static_cast<size_t>(position)] = dataset_.Label(index);
  return Status::Ok();
}

void BatchPrefetcher::Finish(Job& job, int position, Status status) {
  if (!status.ok() && (job.error_position < 0 || position < job.error_position)) {
    job.error_position = position;
    job.error = std::move(status);
  }
  if (++job.finished == job.batch.count) batch_ready_.notify_all();
}

void BatchPrefetcher::Work() {
  std::vector<uint8_t> scratch;
  MutexLock lock(mu_);
  while (true) {
    Job* job = nullptr;
    for (const auto& j : jobs_) {
      if (j->claimed < j->batch.count) {
        job = j.get();
        break;
      }
    }
    if (job == nullptr) {
      if (stopping_) return;
      work_ready_.wait(lock);
      continue;
    }
    const int position = job->claimed++;
    lock.unlock();
    // The job stays queued (and alive) until every position is finished: Next() waits for that.
    Status status = DecodeOne(*job, position, scratch);
    lock.lock();
    Finish(*job, position, std::move(status));
  }
}

StatusOr<Batch> BatchPrefetcher::Next() {
  MutexLock lock(mu_);
  if (jobs_.empty()) return Status::Error("no batch was submitted");
  Job* job = jobs_.front().get();
  if (threads_.empty()) {  // decode here, in order
    std::vector<uint8_t> scratch;
    while (job->claimed < job->batch.count) {
      const int position = job->claimed++;
      lock.unlock();
      Status status = DecodeOne(*job, position, scratch);
      lock.lock();
      Finish(*job, position, std::move(status));
    }
  }
  while (job->finished < job->batch.count) batch_ready_.wait(lock);
  std::unique_ptr<Job> done = std::move(jobs_.front());
  jobs_.pop_front();
  if (done->error_position >= 0) return done->error;
  return std::move(done->batch);
}

}  // namespace tj::data
