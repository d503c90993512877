// Test support: a small training set made up in memory, for tests of the training loop that
// need no Fashion-MNIST files. Header-only.
#pragma once

#include <cstdint>

#include "trainer/data/idx_reader.h"

namespace tj::testing {

// `count` images of noise with labels i % 10, as both the training and the test set.
inline data::Dataset SyntheticDataset(int count) {
  data::Dataset d;
  for (data::Split* split : {&d.train, &d.test}) {
    split->count = count;
    split->images.resize(static_cast<size_t>(count) * data::kImagePixels);
    for (size_t i = 0; i < split->images.size(); ++i)
      split->images[i] = static_cast<float>((i * 2654435761u) % 256) / 255.0f;
    split->labels.resize(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) split->labels[i] = static_cast<uint8_t>(i % 10);
  }
  d.digest = "synthetic";
  return d;
}

}  // namespace tj::testing
