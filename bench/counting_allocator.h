#pragma once
// The CPU allocator of LibTorch, counted: the bytes of live CPU tensors now and at their peak
// since the last reset. Installed once per process, before the first tensor, so that memory is
// counted from live tensors rather than estimated (a process's RSS also holds freed heap that
// malloc keeps, and misses nothing a tensor frees).
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace volt::bench {

// LibTorch 2.3 made Allocator::allocate non-const and copy_data pure.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define VOLT_BENCH_ALLOCATE_CONST
#define VOLT_BENCH_COPY_DATA 1
#else
#define VOLT_BENCH_ALLOCATE_CONST const
#define VOLT_BENCH_COPY_DATA 0
#endif

class CountingCPUAllocator final : public c10::Allocator {
 public:
  // Installs the counting allocator in front of the current CPU allocator (once per process).
  static CountingCPUAllocator& install() {
    static CountingCPUAllocator* counting = [] {
      auto* allocator = new CountingCPUAllocator(c10::GetCPUAllocator());
      c10::SetCPUAllocator(allocator, /*priority=*/255);
      return allocator;
    }();
    return *counting;
  }

  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }
  // The peak starts again from the bytes live now.
  void reset_peak() { peak_.store(live_.load()); }

  c10::DataPtr allocate(size_t bytes) VOLT_BENCH_ALLOCATE_CONST override {
    auto* held = new Held{inner_->allocate(bytes), static_cast<int64_t>(bytes), this};
    const int64_t now = live_.fetch_add(held->bytes) + held->bytes;
    int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    void* data = held->inner.get();
    return {data, held, &release, held->inner.device()};
  }
#if VOLT_BENCH_COPY_DATA
  void copy_data(void* destination, const void* source, std::size_t count) const override {
    default_copy_data(destination, source, count);
  }
#endif

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
    const CountingCPUAllocator* owner;
  };
  explicit CountingCPUAllocator(c10::Allocator* inner) : inner_(inner) {}
  static void release(void* context) {
    auto* held = static_cast<Held*>(context);
    held->owner->live_.fetch_sub(held->bytes);
    delete held;
  }

  c10::Allocator* inner_;
  mutable std::atomic<int64_t> live_{0}, peak_{0};
};

}  // namespace volt::bench
