// tj-dataset: converts a labelled image dataset between the formats tj-trainer reads, so that
// data kept as IDX files or a NumPy .npz becomes the TFRecord shards or image folders that
// `tf.data` and Keras users keep, and the other way round. Shipped in the trainer images.
//
//   tj-dataset convert --from FORMAT:PATH [--split train|test] --to tfrecord|folder --out DIR
//                      [--image-format png|jpeg] [--quality Q] [--shards N] [--limit N]
//                      [--channels 1|3] [--size HxW]
//   tj-dataset info FORMAT:PATH [--split train|test] [--channels 1|3] [--size HxW]
//
// FORMAT is idx (a directory of MNIST-format files; split train or test, test meaning t10k),
// npz (keras.datasets' layout), npy (two files, IMAGES.npy,LABELS.npy), folder
// (<root>/<class>/<image>) or tfrecord (a file or a directory of them), as tj-trainer's
// --dataset-format names them (trainer/data/open_dataset.h). --channels and --size fit folder and
// TFRecord sources (default 3 channels, the first image's size). The output:
//   tfrecord  DIR/data-00000-of-0000N.tfrecord, ...: tf.train.Example records with the image
//             (PNG or JPEG) under image/encoded and the label under image/class/label, the
//             examples in the source's order, split into N files (default 1) of consecutive
//             examples, so reading DIR gives back the same order;
//   folder    DIR/<class>/<index>.png|jpg, class folders named by the label, zero-padded so
//             that their byte order is the labels' order (Keras' image_dataset_from_directory
//             labels them the same), files named by the example's index, zero-padded likewise.
// PNG is lossless: the converted dataset decodes to the source's pixels (and so has its
// DigestOfImages); JPEG is not.
//
// DIR is written whole or not at all: into a sibling DIR.partial-<host>-<pid> renamed to DIR at
// the end. When DIR exists already (another pod converted it first) nothing is written and the
// exit is 0, so several pods may run the same conversion as their first step. Exit 2: a usage
// error; 1: the source cannot be read or the output written (the message names which).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/dataset.h"
#include "trainer/data/image_encoder.h"
#include "trainer/data/open_dataset.h"
#include "trainer/data/tf_example.h"
#include "trainer/data/tfrecord_reader.h"

namespace tj::data {
namespace {

namespace fs = std::filesystem;

constexpr char kUsage[] =
    "usage: tj-dataset convert --from FORMAT:PATH [--split train|test] --to tfrecord|folder\n"
    "                          --out DIR [--image-format png|jpeg] [--quality Q] [--shards N]\n"
    "                          [--limit N] [--channels 1|3] [--size HxW]\n"
    "       tj-dataset info FORMAT:PATH [--split train|test] [--channels 1|3] [--size HxW]\n"
    "FORMAT: idx, npz, npy, folder or tfrecord\n";

struct Args {
  std::string command;
  std::string from;                            // FORMAT:PATH, as given
  DatasetFormat format = DatasetFormat::kIdx;  // its FORMAT
  std::string path;                            // its PATH
  std::string split = "train";
  std::string to;
  std::string out;
  std::string image_format = "png";
  int quality = 95;
  int shards = 1;
  int64_t limit = 0;  // 0: every example
  ImageShape fit{0, 0, 3};
};

int UsageError(const std::string& message) {
  std::fprintf(stderr, "tj-dataset: %s\n%s", message.c_str(), kUsage);
  return 2;
}

bool ParseInt(const std::string& text, int64_t lo, int64_t hi, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Parses argv into `args`; an empty string, or the usage error's message.
std::string ParseArgs(int argc, char** argv, Args* args) {
  if (argc < 2) return "no command";
  args->command = argv[1];
  if (args->command != "convert" && args->command != "info") {
    return "unknown command '" + args->command + "' (convert or info)";
  }
  int i = 2;
  if (args->command == "info") {
    if (argc < 3 || std::strncmp(argv[2], "--", 2) == 0) return "info needs FORMAT:PATH";
    args->from = argv[2];
    i = 3;
  }
  for (; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return flag + " needs a value";
    const std::string value = argv[++i];
    int64_t n = 0;
    if (flag == "--from" && args->command == "convert") {
      args->from = value;
    } else if (flag == "--split") {
      if (value != "train" && value != "test") return "--split '" + value + "': train or test";
      args->split = value;
    } else if (flag == "--to" && args->command == "convert") {
      if (value != "tfrecord" && value != "folder")
        return "--to '" + value + "': tfrecord or folder";
      args->to = value;
    } else if (flag == "--out" && args->command == "convert") {
      args->out = value;
    } else if (flag == "--image-format" && args->command == "convert") {
      if (value != "png" && value != "jpeg") return "--image-format '" + value + "': png or jpeg";
      args->image_format = value;
    } else if (flag == "--quality" && args->command == "convert") {
      if (!ParseInt(value, 1, 100, &n)) return "--quality '" + value + "': an integer in 1..100";
      args->quality = static_cast<int>(n);
    } else if (flag == "--shards" && args->command == "convert") {
      if (!ParseInt(value, 1, 10000, &n)) return "--shards '" + value + "': an integer in 1..10000";
      args->shards = static_cast<int>(n);
    } else if (flag == "--limit" && args->command == "convert") {
      if (!ParseInt(value, 1, kMaxExamples, &n))
        return "--limit '" + value + "': a positive integer";
      args->limit = n;
    } else if (flag == "--channels") {
      if (value != "1" && value != "3") return "--channels '" + value + "': 1 or 3";
      args->fit.channels = value == "1" ? 1 : 3;
    } else if (flag == "--size") {
      if (!ParseImageSize(value, &args->fit)) return "--size '" + value + "': HxW, e.g. 32x32";
    } else {
      return "unknown flag " + flag;
    }
  }
  const size_t colon = args->from.find(':');
  if (colon == std::string::npos) {
    return "the source '" + args->from + "' is not FORMAT:PATH (e.g. npz:/data/cifar.npz)";
  }
  const std::string format_name = args->from.substr(0, colon);
  if (!ParseDatasetFormat(format_name, &args->format)) {
    return "source format '" + format_name + "': idx, npz, npy, folder or tfrecord";
  }
  args->path = args->from.substr(colon + 1);
  if (args->command == "convert" && (args->to.empty() || args->out.empty())) {
    return "convert needs --to and --out";
  }
  return "";
}

StatusOr<std::unique_ptr<ImageDataset>> OpenSource(const Args& args) {
  OpenOptions options;
  options.split = args.split;
  options.shape = args.fit;
  return OpenDataset(args.format, args.path, options);
}

std::string ZeroPadded(int64_t value, int64_t largest) {
  const std::string digits = std::to_string(largest);
  std::string s = std::to_string(value);
  return std::string(digits.size() > s.size() ? digits.size() - s.size() : 0, '0') + s;
}

Status WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return Status::Error("writing " + path.string() + ": " + std::strerror(errno));
  return Status::Ok();
}

// Writes `count` examples of `dataset` into `dir` (which exists and is empty).
Status Convert(const ImageDataset& dataset, int64_t count, const Args& args, const fs::path& dir) {
  const ImageShape shape = dataset.shape();
  std::vector<uint8_t> pixels(shape.Size());
  const bool png = args.image_format == "png";
  std::ofstream shard;
  int shard_index = -1;
  const int64_t per_shard = (count + args.shards - 1) / args.shards;
  for (int64_t i = 0; i < count; ++i) {
    const int index = static_cast<int>(i);
    if (Status s = dataset.ReadImage(index, pixels); !s.ok()) return s;
    auto encoded = png ? EncodePng(pixels, shape) : EncodeJpeg(pixels, shape, args.quality);
    if (!encoded.ok()) return encoded.status();
    const int label = dataset.Label(index);
    if (args.to == "folder") {
      const fs::path class_dir = dir / ZeroPadded(label, dataset.classes() - 1);
      std::error_code ec;
      fs::create_directories(class_dir, ec);
      if (ec) return Status::Error("creating " + class_dir.string() + ": " + ec.message());
      const fs::path file = class_dir / (ZeroPadded(i, count - 1) + (png ? ".png" : ".jpg"));
      if (Status s = WriteFile(file, *encoded); !s.ok()) return s;
      continue;
    }
    if (i / per_shard != shard_index) {
      shard_index = static_cast<int>(i / per_shard);
      shard.close();
      const std::string name = "data-" + ZeroPadded(shard_index, 10000) + "-of-" +
                               ZeroPadded(args.shards, 10000) + ".tfrecord";
      shard.open(dir / name, std::ios::binary | std::ios::trunc);
      if (!shard)
        return Status::Error("creating " + (dir / name).string() + ": " + std::strerror(errno));
    }
    const std::string example = SerializeImageExample(
        std::span(reinterpret_cast<const uint8_t*>(encoded->data()), encoded->size()), label);
    const std::string record =
        FrameTfRecord(std::span(reinterpret_cast<const uint8_t*>(example.data()), example.size()));
    shard.write(record.data(), static_cast<std::streamsize>(record.size()));
    if (!shard)
      return Status::Error("writing a TFRecord file in " + dir.string() + ": " +
                           std::strerror(errno));
  }
  shard.close();
  if (args.to == "tfrecord" && !shard.good() && shard_index >= 0) {
    return Status::Error("closing a TFRecord file in " + dir.string() + ": " +
                         std::strerror(errno));
  }
  return Status::Ok();
}

int Info(const ImageDataset& dataset) {
  const nlohmann::json info = {{"source", dataset.source()},
                               {"examples", dataset.size()},
                               {"shape", dataset.shape().ToString()},
                               {"classes", dataset.classes()},
                               {"digest", dataset.digest()}};
  std::printf("%s\n", info.dump().c_str());
  return 0;
}

int Main(int argc, char** argv) {
  Args args;
  if (std::string e = ParseArgs(argc, argv, &args); !e.empty()) return UsageError(e);
  const fs::path out(args.out);
  std::error_code ec;
  if (args.command == "convert" && fs::exists(out, ec)) {
    std::fprintf(stderr, "tj-dataset: %s exists already; nothing to do\n", out.c_str());
    return 0;
  }
  auto dataset = OpenSource(args);
  if (!dataset.ok()) {
    std::fprintf(stderr, "tj-dataset: %s\n", dataset.status().message().c_str());
    return 1;
  }
  if (args.command == "info") return Info(**dataset);

  const int64_t count =
      args.limit > 0 ? std::min<int64_t>(args.limit, (*dataset)->size()) : (*dataset)->size();
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const fs::path partial =
      out.string() + ".partial-" + host + "-" + std::to_string(static_cast<long>(getpid()));
  fs::create_directories(partial, ec);
  if (ec) {
    std::fprintf(stderr, "tj-dataset: creating %s: %s\n", partial.c_str(), ec.message().c_str());
    return 1;
  }
  if (Status s = Convert(**dataset, count, args, partial); !s.ok()) {
    fs::remove_all(partial, ec);
    std::fprintf(stderr, "tj-dataset: %s\n", s.message().c_str());
    return 1;
  }
  fs::rename(partial, out, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove_all(partial, ec);
    if (fs::exists(out, ec)) {  // another process finished the same conversion first
      std::fprintf(stderr, "tj-dataset: %s was written meanwhile by another process\n",
                   out.c_str());
      return 0;
    }
    std::fprintf(stderr, "tj-dataset: renaming %s to %s: %s\n", partial.c_str(), out.c_str(),
                 why.c_str());
    return 1;
  }
  const nlohmann::json done = {{"out", out.string()},
                               {"format", args.to},
                               {"image_format", args.image_format},
                               {"examples", count},
                               {"shape", (*dataset)->shape().ToString()},
                               {"classes", (*dataset)->classes()},
                               {"source_digest", (*dataset)->digest()}};
  std::printf("%s\n", done.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tj::data

int main(int argc, char** argv) { return tj::data::Main(argc, argv); }
