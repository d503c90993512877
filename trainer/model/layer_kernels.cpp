#include "trainer/model/layer_kernels.h"

#include <algorithm>
#include <cstring>

namespace tj::model::kernels {

Window WindowOf(const Layer& layer) {
  Window w;
  w.in_h = layer.in.h;
  w.in_w = layer.in.w;
  w.channels = layer.in.c;
  w.out_h = layer.out.h;
  w.out_w = layer.out.w;
  w.kh = layer.kh;
  w.kw = layer.kw;
  w.sh = layer.sh;
  w.sw = layer.sw;
  w.pad_top = layer.pad_top;
  w.pad_left = layer.pad_left;
  return w;
}

void Im2Col(const float* x, const Window& w, int c0, int group_channels, int stride, float* col) {
  const int taps = w.kh * w.kw * group_channels;
  // With every channel taken, a window row's taps inside the image are one contiguous run of
  // the input: one copy each, the rest of the row zero.
  const bool whole = group_channels == w.channels;
  for (int oy = 0; oy < w.out_h; ++oy) {
    for (int ox = 0; ox < w.out_w; ++ox) {
      float* row = col + static_cast<size_t>(oy * w.out_w + ox) * stride;
      const int ix0 = ox * w.sw - w.pad_left;
      const int kx0 = std::max(0, -ix0), kx1 = std::min(w.kw, w.in_w - ix0);
      for (int ky = 0; ky < w.kh; ++ky) {
        const int iy = oy * w.sh - w.pad_top + ky;
        float* out = row + static_cast<size_t>(ky) * w.kw * group_channels;
        if (iy < 0 || iy >= w.in_h || kx0 >= kx1) {
          std::fill(out, out + static_cast<size_t>(w.kw) * group_channels, 0.0f);
          continue;
        }
        std::fill(out, out + static_cast<size_t>(kx0) * group_channels, 0.0f);
        const float* in = x + static_cast<size_t>(iy * w.in_w + ix0) * w.channels + c0;
        if (whole) {
          std::memcpy(out + static_cast<size_t>(kx0) * group_channels,
                      in + static_cast<size_t>(kx0) * w.channels,
                      sizeof(float) * static_cast<size_t>(kx1 - kx0) * group_channels);
        } else {
          for (int kx = kx0; kx < kx1; ++kx) {
            std::memcpy(out + static_cast<size_t>(kx) * group_channels,
                        in + static_cast<size_t>(kx) * w.channels, sizeof(float) * group_channels);
          }
        }
        std::fill(out + static_cast<size_t>(kx1) * group_channels,
                  out + static_cast<size_t>(w.kw) * group_channels, 0.0f);
      }
      std::fill(row + taps, row + stride, 0.0f);
    }
  }
}

void Col2ImAdd(const float* __restrict__ dcol, const Window& w, int c0, int group_channels,
               int stride, float* __restrict__ dx) {
  for (int oy = 0; oy < w.out_h; ++oy) {
    for (int ox = 0; ox < w.out_w; ++ox) {
      const float* row = dcol + static_cast<size_t>(oy * w.out_w + ox) * stride;
      for (int ky = 0; ky < w.kh; ++ky) {
        const int iy = oy * w.sh - w.pad_top + ky;
        if (iy < 0 || iy >= w.in_h) continue;
        for (int kx = 0; kx < w.kw; ++kx) {
          const int ix = ox * w.sw - w.pad_left + kx;
          if (ix < 0 || ix >= w.in_w) continue;
          const float* g = row + (ky * w.kw + kx) * group_channels;
          float* out = dx + static_cast<size_t>(iy * w.in_w + ix) * w.channels + c0;
          for (int c = 0; c < group_channels; ++c) out[c] += g[c];
        }
      }
    }
  }
}

void MaxPoolForward(const float* __restrict__ x, const Window& w, float* __restrict__ y,
                    int32_t* __restrict__ argmax) {
  const int C = w.channels;
  for (int oy = 0; oy < w.out_h; ++oy) {
    const int y0 = std::max(oy * w.sh - w.pad_top, 0);
    const int y1 = std::min(oy * w.sh - w.pad_top + w.kh, w.in_h);
    for (int ox = 0; ox < w.out_w; ++ox) {
      const int x0 = std::max(ox * w.sw - w.pad_left, 0);
      const int x1 = std::min(ox * w.sw - w.pad_left + w.kw, w.in_w);
      float* __restrict__ out = y + static_cast<size_t>(oy * w.out_w + ox) * C;
      int32_t* __restrict__ arg = argmax + static_cast<size_t>(oy * w.out_w + ox) * C;
      const int32_t first = (y0 * w.in_w + x0) * C;
      for (int c = 0; c < C; ++c) {
        out[c] = x[first + c];
        arg[c] = first + c;
      }
      for (int iy = y0; iy < y1; ++iy) {
        for (int ix = x0; ix < x1; ++ix) {
          const int32_t base = (iy * w.in_w + ix) * C;
          for (int c = 0; c < C; ++c) {
            const bool better = x[base + c] > out[c];
            out[c] = better ? x[base + c] : out[c];
            arg[c] = better ? base + c : arg[c];
          }
        }
      }
    }
  }
}

void MaxPoolBackwardAdd(const float* dy, const int32_t* argmax, size_t outputs, float* dx) {
  for (size_t i = 0; i < outputs; ++i) dx[argmax[i]] += dy[i];
}

void AvgPoolForward(const float* __restrict__ x, const Window& w, float* __restrict__ y) {
  const int C = w.channels;
  for (int oy = 0; oy < w.out_h; ++oy) {
    const int y0 = std::max(oy * w.sh - w.pad_top, 0);
    const int y1 = std::min(oy * w.sh - w.pad_top + w.kh, w.in_h);
    for (int ox = 0; ox < w.out_w; ++ox) {
      const int x0 = std::max(ox * w.sw - w.pad_left, 0);
      const int x1 = std::min(ox * w.sw - w.pad_left + w.kw, w.in_w);
      float* out = y + static_cast<size_t>(oy * w.out_w + ox) * C;
      std::fill(out, out + C, 0.0f);
      for (int iy = y0; iy < y1; ++iy) {
        for (int ix = x0; ix < x1; ++ix) {
          const float* in = x + static_cast<size_t>(iy * w.in_w + ix) * C;
          for (int c = 0; c < C; ++c) out[c] += in[c];
        }
      }
      const float count = static_cast<float>((y1 - y0) * (x1 - x0));
      for (int c = 0; c < C; ++c) out[c] /= count;
    }
  }
}

void AvgPoolBackwardAdd(const float* __restrict__ dy, const Window& w, float* __restrict__ dx) {
  const int C = w.channels;
  for (int oy = 0; oy < w.out_h; ++oy) {
    const int y0 = std::max(oy * w.sh - w.pad_top, 0);
    const int y1 = std::min(oy * w.sh - w.pad_top + w.kh, w.in_h);
    for (int ox = 0; ox < w.out_w; ++ox) {
      const int x0 = std::max(ox * w.sw - w.pad_left, 0);
      const int x1 = std::min(ox * w.sw - w.pad_left + w.kw, w.in_w);
      const float* g = dy + static_cast<size_t>(oy * w.out_w + ox) * C;
      const float count = static_cast<float>((y1 - y0) * (x1 - x0));
      for (int iy = y0; iy < y1; ++iy) {
        for (int ix = x0; ix < x1; ++ix) {
          float* out = dx + static_cast<size_t>(iy * w.in_w + ix) * C;
          for (int c = 0; c < C; ++c) out[c] += g[c] / count;
        }
      }
    }
  }
}

void DepthwiseForward(const float* x, const Window& w, int dm, const float* kernel,
                      const float* bias, float* acc, float* y) {
  const int C = w.channels, CO = C * dm;
  for (int oy = 0; oy < w.out_h; ++oy) {
    for (int ox = 0; ox < w.out_w; ++ox) {
      std::fill(acc, acc + CO, 0.0f);
      for (int ky = 0; ky < w.kh; ++ky) {
        const int iy = oy * w.sh - w.pad_top + ky;
        if (iy < 0 || iy >= w.in_h) continue;
        for (int kx = 0; kx < w.kw; ++kx) {
          const int ix = ox * w.sw - w.pad_left + kx;
          if (ix < 0 || ix >= w.in_w) continue;
          const float* in = x + static_cast<size_t>(iy * w.in_w + ix) * C;
          const float* k = kernel + static_cast<size_t>(ky * w.kw + kx) * CO;
          if (dm == 1) {
            for (int c = 0; c < C; ++c) acc[c] += in[c] * k[c];
          } else {
            for (int co = 0; co < CO; ++co) acc[co] += in[co / dm] * k[co];
          }
        }
      }
      float* out = y + static_cast<size_t>(oy * w.out_w + ox) * CO;
      if (bias != nullptr) {
        for (int co = 0; co < CO; ++co) out[co] = acc[co] + bias[co];
      } else {
        std::copy(acc, acc + CO, out);
      }
    }
  }
}

void DepthwiseBackward(const float* x, const float* dy, const Window& w, int dm,
                       const float* kernel, float* dkernel, float* dbias, float* dx) {
  const int C = w.channels, CO = C * dm;
  std::fill(dkernel, dkernel + static_cast<size_t>(w.kh * w.kw) * CO, 0.0f);
  if (dbias != nullptr) std::fill(dbias, dbias + CO, 0.0f);
  for (int oy = 0; oy < w.out_h; ++oy) {
    for (int ox = 0; ox < w.out_w; ++ox) {
      const float* g = dy + static_cast<size_t>(oy * w.out_w + ox) * CO;
      if (dbias != nullptr) {
        for (int co = 0; co < CO; ++co) dbias[co] += g[co];
      }
      for (int ky = 0; ky < w.kh; ++ky) {
        const int iy = oy * w.sh - w.pad_top + ky;
        if (iy < 0 || iy >= w.in_h) continue;
        for (int kx = 0; kx < w.kw; ++kx) {
          const int ix = ox * w.sw - w.pad_left + kx;
          if (ix < 0 || ix >= w.in_w) continue;
          const size_t at = static_cast<size_t>(iy * w.in_w + ix) * C;
          const float* in = x + at;
          float* din = dx + at;
          const size_t tap = static_cast<size_t>(ky * w.kw + kx) * CO;
          const float* k = kernel + tap;
          float* dk = dkernel + tap;
          if (dm == 1) {
            for (int c = 0; c < C; ++c) {
              dk[c] += in[c] * g[c];
              din[c] += k[c] * g[c];
            }
          } else {
            for (int co = 0; co < CO; ++co) {
              dk[co] += in[co / dm] * g[co];
              din[co / dm] += k[co] * g[co];
            }
          }
        }
      }
    }
  }
}

void ZeroPadForward(const float* x, const Window& w, float* y) {
  const size_t row = static_cast<size_t>(w.in_w) * w.channels;
  std::fill(y, y + static_cast<size_t>(w.out_h) * w.out_w * w.channels, 0.0f);
  for (int iy = 0; iy < w.in_h; ++iy) {
    const float* from = x + iy * row;
    std::copy(from, from + row,
              y + (static_cast<size_t>(iy + w.pad_top) * w.out_w + w.pad_left) * w.channels);
  }
}

void ZeroPadBackwardAdd(const float* dy, const Window& w, float* dx) {
  const size_t row = static_cast<size_t>(w.in_w) * w.channels;
  for (int iy = 0; iy < w.in_h; ++iy) {
    const float* from =
        dy + (static_cast<size_t>(iy + w.pad_top) * w.out_w + w.pad_left) * w.channels;
    float* to = dx + iy * row;
    for (size_t i = 0; i < row; ++i) to[i] += from[i];
  }
}

}  // namespace tj::model::kernels
