// The corpus replay: a main() for builds without libFuzzer (gcc, the normal `make test`).
// Runs every file under the directories (or the files) named on the command line through the
// target's LLVMFuzzerTestOneInput, in sorted order, and exits non-zero if any input is
// missing or unreadable. A crash or a broken invariant aborts, naming the input it was on.
//
// `-malloc_limit_mb=N` first (as libFuzzer spells it): any single operator new of more than N
// MiB, in any thread, aborts with "out-of-memory (malloc(SIZE))", so that allocation
// regressions (a 64 MiB buffer before authentication) fail `make test` too, not only a
// libFuzzer build.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
std::atomic<size_t> malloc_limit{0};  // bytes; 0: none

void* LimitedNew(size_t size) {
  const size_t limit = malloc_limit.load(std::memory_order_relaxed);
  if (limit != 0 && size > limit) {
    std::fprintf(stderr, "replay: ERROR: out-of-memory (malloc(%zu)) over -malloc_limit_mb\n",
                 size);
    std::abort();
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t size) { return LimitedNew(size); }
void* operator new[](size_t size) { return LimitedNew(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::filesystem::path> inputs;
  int first = 1;
  constexpr char kLimitFlag[] = "-malloc_limit_mb=";
  if (argc > 1 && std::strncmp(argv[1], kLimitFlag, sizeof kLimitFlag - 1) == 0) {
    malloc_limit = std::strtoull(argv[1] + sizeof kLimitFlag - 1, nullptr, 10) << 20;
    first = 2;
  }
  for (int i = first; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
    } else if (std::filesystem::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs; usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 2;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replay: %zu inputs, no crash\n", inputs.size());
  return 0;
}
