// tj-bench-data: how fast the trainer's image datasets decode.
//
//   tj-bench-data decode [SECONDS]
//       JPEG (quality 90, 4:2:0) and PNG images of 32x32x3 and 96x96x3, 256 distinct ones each
//       (smooth gradients with noise, about a photograph's entropy), decoded to their own size
//       on one thread for SECONDS (default 2) each: images/s per thread.
//   tj-bench-data read folder|tfrecord|npz PATH [HEIGHT WIDTH] [THREADS]
//       Opens a dataset (npz: its train split) and times one pass over it in batches of 64
//       through the prefetcher with THREADS decoding threads (default 1), random crop (pad 4)
//       and flip on; prints its size, classes, digest and images/s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/random.h"
#include "trainer/data/batch_prefetcher.h"
#include "trainer/data/image_decoder.h"
#include "trainer/data/image_encoder.h"
#include "trainer/data/image_folder_dataset.h"
#include "trainer/data/numpy_dataset.h"
#include "trainer/data/tfrecord_dataset.h"

namespace tj::data {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> NoisyImage(ImageShape shape, uint64_t seed) {
  SplitMix64 g(seed);
  const int fx = static_cast<int>(g.Below(200)) + 20;
  const int fy = static_cast<int>(g.Below(200)) + 20;
  std::vector<uint8_t> p(shape.Size());
  for (int y = 0; y < shape.height; ++y) {
    for (int x = 0; x < shape.width; ++x) {
      for (int c = 0; c < shape.channels; ++c) {
        int v = x * fx / shape.width + y * fy / shape.height + c * 20 +
                static_cast<int>(g.Below(41)) - 20;
        p[(static_cast<size_t>(y) * shape.width + x) * shape.channels + c] =
            static_cast<uint8_t>(v < 0     ? 0
                                 : v > 255 ? 255
                                           : v);
      }
    }
  }
  return p;
}

int Decode(double seconds) {
  std::printf(
      "| format | size | bytes/image (mean) | images/s per thread |\n|---|---|---:|---:|\n");
  for (int side : {32, 96}) {
    const ImageShape shape{side, side, 3};
    for (const char* format : {"JPEG q90", "PNG"}) {
      std::vector<std::string> files;
      size_t bytes = 0;
      for (uint64_t i = 0; i < 256; ++i) {
        const auto pixels = NoisyImage(shape, i);
        auto encoded = format[0] == 'J' ? EncodeJpeg(pixels, shape, 90) : EncodePng(pixels, shape);
        if (!encoded.ok()) {
          std::fprintf(stderr, "%s\n", encoded.status().message().c_str());
          return 1;
        }
        bytes += encoded->size();
        files.push_back(std::move(*encoded));
      }
      std::vector<uint8_t> out(shape.Size());
      const DecodeLimits limits;
      int64_t decoded = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      while (elapsed < seconds) {
        for (const std::string& f : files) {
          Status s = DecodeAndFit({reinterpret_cast<const uint8_t*>(f.data()), f.size()}, shape,
                                  limits, out);
          if (!s.ok()) {
            std::fprintf(stderr, "%s\n", s.message().c_str());
            return 1;
          }
        }
        decoded += static_cast<int64_t>(files.size());
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      }
      std::printf("| %s | %dx%dx3 | %zu | %.0f |\n", format, side, side, bytes / files.size(),
                  static_cast<double>(decoded) / elapsed);
    }
  }
  return 0;
}

int Read(const std::string& kind, const std::string& path, int height, int width, int threads) {
  StatusOr<std::unique_ptr<ImageDataset>> dataset = Status::Error("unknown kind " + kind);
  if (kind == "folder") {
    ImageFolderOptions o;
    o.shape = {height, width, 3};
    dataset = OpenImageFolder(path, o);
  } else if (kind == "tfrecord") {
    TfRecordOptions o;
    o.shape = {height, width, 3};
    auto files = ListTfRecordFiles(path);
    dataset = files.ok() ? OpenTfRecordDataset(*files, o) : files.status();
  } else if (kind == "npz") {
    dataset = OpenNpzDataset(path, "train", NumpyOptions{});
  }
  if (!dataset.ok()) {
    std::fprintf(stderr, "%s\n", dataset.status().message().c_str());
    return 1;
  }
  const ImageDataset& d = **dataset;
  std::printf("%s: %d examples of %s, %d classes, digest %s\n", d.source().c_str(), d.size(),
              d.shape().ToString().c_str(), d.classes(), d.digest().c_str());
  PrefetchOptions options;
  options.seed = 1;
  options.augment = {4, true};
  options.threads = threads;
  auto prefetcher = BatchPrefetcher::Create(d, options);
  if (!prefetcher.ok()) {
    std::fprintf(stderr, "%s\n", prefetcher.status().message().c_str());
    return 1;
  }
  const std::vector<uint32_t> order = EpochOrder(1, 1, d.size());
  ShardPlan plan;
  const int steps = std::max(plan.StepsPerEpoch(d.size()), 1);
  const auto start = Clock::now();
  for (int step = 0; step < std::min(steps, 2); ++step) {
    (*prefetcher)->Submit({1, StepIndices(order, plan, step)});
  }
  int64_t images = 0;
  for (int step = 0; step < steps; ++step) {
    auto batch = (*prefetcher)->Next();
    if (!batch.ok()) {
      std::fprintf(stderr, "%s\n", batch.status().message().c_str());
      return 1;
    }
    images += batch->count;
    if (step + 2 < steps) (*prefetcher)->Submit({1, StepIndices(order, plan, step + 2)});
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("one pass: %lld images in %.2f s, %.0f images/s with %d thread(s)\n",
              static_cast<long long>(images), elapsed, static_cast<double>(images) / elapsed,
              threads);
  return 0;
}

}  // namespace
}  // namespace tj::data

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "decode") return tj::data::Decode(argc > 2 ? std::atof(argv[2]) : 2.0);
  if (mode == "read" && argc >= 4) {
    return tj::data::Read(argv[2], argv[3], argc > 5 ? std::atoi(argv[4]) : 32,
                          argc > 5 ? std::atoi(argv[5]) : 32, argc > 6 ? std::atoi(argv[6]) : 1);
  }
  std::fprintf(stderr,
               "usage: tj-bench-data decode [SECONDS]\n"
               "       tj-bench-data read folder|tfrecord|npz PATH [HEIGHT WIDTH] [THREADS]\n");
  return 2;
}
