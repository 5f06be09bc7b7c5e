// The bf16 decode GEMV on one thread with W in L2, and output hashes to prove
// a kernel change keeps every bit (issue 22; session 19's one-token AMX
// tiles). `time [k]`: best of 15 x 200 MatMul calls at M = 1 for n = 32, 256
// and 1,024 (n = 256 minus n = 32, per row, leaves out the call's fixed cost).
// `hash`: FNV-1a of MatMul, MatMulSiluMul and MatMulAddTo outputs over 10
// shapes (ragged N and K included) at M = 1, 2, 17, 33 on 2 threads; the
// lines of two builds must be equal. Built by hand against a release build:
//
//   g++ -O2 -std=c++20 -march=native -Isrc bench/kernels/bf16_decode_probe.cc \
//     build/release/src/kernels/libkvfork_kernels.a build/release/src/core/libkvfork_core.a \
//     -lpthread -o /tmp/bf16_decode_probe
//   /tmp/bf16_decode_probe time; /tmp/bf16_decode_probe hash > /tmp/hash_new.txt
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "core/bf16.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
using namespace kvfork;
static uint64_t Hash(const float* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) { uint32_t b; memcpy(&b, &p[i], 4); h = (h ^ b) * 1099511628211ull; }
  return h;
}
int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "time";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  if (!strcmp(mode, "hash")) {
    ThreadPool pool(2);
    struct S { int64_t n, k; };
    for (S s : {S{32, 1024}, S{256, 1024}, S{1000, 1024}, S{1024, 1000}, S{77, 45}, S{3072, 1024},
                S{1024, 3072}, S{17, 33}, S{300, 96}, S{151, 2047}}) {
      std::vector<bf16_t> w(s.n * s.k), up(s.n * s.k);
      for (auto& v : w) v = F32ToBf16(u(rng));
      for (auto& v : up) v = F32ToBf16(u(rng));
      for (int64_t m : {1, 2, 17, 33}) {
        std::vector<float> x(m * s.k), y(m * s.n), z(m * s.n);
        for (auto& v : x) v = u(rng);
        MatrixView v{DType::kBf16, w.data(), s.n, s.k}, vu{DType::kBf16, up.data(), s.n, s.k};
        MatMul(x.data(), m, v, y.data(), pool);
        std::vector<float> upy(m * s.n);
        MatMulSiluMul(x.data(), m, MatMulTarget{v, z.data()}, MatMulTarget{vu, upy.data()}, pool);
        std::vector<float> acc(m * s.n);
        for (auto& a : acc) a = u(rng);
        std::vector<float> py(m * s.n);
        MatMulAddTo(x.data(), m, MatMulTarget{v, py.data()}, acc.data(), pool);
        printf("n=%5ld k=%5ld m=%3ld  matmul %016lx  silumul %016lx  addto %016lx\n", s.n, s.k, m,
               Hash(y.data(), y.size()), Hash(z.data(), z.size()), Hash(acc.data(), acc.size()));
      }
    }
    return 0;
  }
  ThreadPool pool(1);
  int64_t k = argc > 2 ? atoi(argv[2]) : 1024;
  for (int64_t n : {32, 256, 1024}) {
    std::vector<bf16_t> w(n * k);
    for (auto& v : w) v = F32ToBf16(u(rng));
    std::vector<float> x(k, 0.5f), y(n);
    MatrixView v{DType::kBf16, w.data(), n, k};
    double best = 1e9;
    for (int rep = 0; rep < 15; ++rep) {
      auto a = std::chrono::steady_clock::now();
      for (int i = 0; i < 200; ++i) MatMul(x.data(), 1, v, y.data(), pool);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count() / 200;
      best = std::min(best, s);
    }
    printf("bf16 n=%5ld k=%ld bytes=%8zu  %8.2f us/call  %6.1f ns/row\n", n, k, w.size() * 2, best * 1e6, best * 1e9 / n);
  }
}
