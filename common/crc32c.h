// CRC-32C (Castagnoli), as TFRecord framing uses it, and TensorFlow's "masked" form: the
// TensorBoard event files the trainer writes (trainer/observe) and the TFRecord datasets it
// reads (trainer/data).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tj {

// CRC-32C of `size` bytes; Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(const void* data, size_t size);

// TFRecord's masking: rotate right by 15, add 0xa282ead8.
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace tj
