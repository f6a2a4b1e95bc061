// Products of fp32 activations with weights kept in the GGUF's own blocks of 32 values, for
// decode steps of a few rows on CPUs without fast bf16 (see switchyard/libs/engine/native/__init__.py), and,
// with AMX-INT8, the interleaved products (q4x8, q8x8) of many rows on tiles (block_amx.inc).
//
// Each activation row is quantized per block of 32 to int8 with one fp32 scale (and the block's
// sum, for the weights' minimum term), then multiplied with integer dot products:
// AVX2 `maddubs` (u8 x s8 -> s16 pairs) and `madd` (-> s32), as llama.cpp does. A row's result
// depends on that row alone: its quantization, its accumulation order and its final reduction
// are the same whatever the row count of the call and however the columns are split between
// threads, so the engine's batch invariance holds.
//
// Weight layouts (made once at load by the Python side):
//   q4: packed [N, K/2] uint8, per block 16 bytes: low nibbles = values 0..15, high = 16..31
//       (ggml's order), d and m [N, K/32] fp32 with w = d * q + m (Q4_0: m = -8 d).
//   q8: qs [N, K] int8, d [N, K/32] fp32 with w = d * q (Q8_0).
//   q8x8: the 8-bit blocks of 8 columns interleaved as q4x8's, unpacked: [N/8, K/32, 256] int8,
//       register j (0..7) = values 4j..4j+3 of each column; d [N/8, K/32, 8] fp16. Each lane sums
//       its column's block exactly in int32 (|w| x x with w's sign moved onto x), then one
//       multiply-add by d * d_x: the order the AMX tiles reproduce.
//   q4x8: the 4-bit blocks of 8 columns interleaved, [N/8, K/32, 128] bytes, d and m [N/8, K/32, 8]
//       in fp16 (the GGUF's own precision; converted with F16C as they are loaded).
//       In a block's 128 bytes, 32-byte register j (0..3) holds 4 bytes per column (column c at
//       bytes 4c..4c+3): values 4j..4j+3 in the low nibbles and 16+4j..16+4j+3 in the high ones.
//       A `maddubs` with the row's 4 values broadcast then yields one column per 32-bit lane, so
//       a block's 8 partial products add up in int16 (at most 8 x 2 x 15 x 127 = 30480) and need
//       one `madd`, one conversion and one scale multiply for 8 columns instead of per column:
//       about half the multiply-port work of the q4 layout, which bounds these kernels on AVX2.
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <memory>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "simd.h"
#define SY_X86 1
#endif

namespace {

constexpr int64_t kBlock = 32;
// Rows multiplied against one loaded weight block; more rows take several passes over the
// (cached) block. Every row runs the same instructions in any group, which keeps its bits.
constexpr int kGroup = 4;

bool cpu_has_avx2() {
#ifdef SY_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpu_has_vnni() {
#ifdef SY_X86
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

// AMX-INT8 tiles, where the CPU has them and Linux lets this process use them (tile data is
// state the kernel allocates per process on request: ARCH_REQ_XCOMP_PERM for XTILEDATA).
bool cpu_has_amx() {
#ifdef SY_X86
  static const bool ok = [] {
    unsigned a, b, c, d;
    if (!cpu_has_vnni() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = d & (1u << 24), int8 = d & (1u << 25);
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return tile && int8 && syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

// Whether the products take the VNNI kernels, and the interleaved products (q4x8, q8x8) of many rows the AMX one: on
// where the CPU has them; tests switch them off to compare the paths bit for bit.
std::atomic<bool> g_vnni{cpu_has_vnni()};
std::atomic<bool> g_amx{cpu_has_amx()};
// Whether the interleaved products of several rows take the AMX tiles now: the AMX kernel builds on
// VNNI (its odd last group runs the VNNI rows), so it is off whenever VNNI is.
bool amx_serves() { return g_amx.load() && g_vnni.load(); }
// Rows from which the q4x8 product takes the AMX tiles: a tile costs the same for 1 row as for 16,
// and below 12 rows the VNNI kernel was as fast or faster (576x1536, 960x576 and 3072x576 products,
// 1 and 2 threads, on a Sapphire Rapids Xeon); from 16 rows the tiles take 1.3x to 2x less time.
constexpr int64_t kAmxMinRows = 12;

#ifdef SY_X86
#define SY_AVX2 __attribute__((target("avx2,fma,f16c")))

// x [K] fp32 -> q [K] int8, d [K/32] (scale) and s [K/32] (d * sum of the block's q).
SY_AVX2 void quantize_row(const float* x, int64_t K, int8_t* q, float* d, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float am = _mm_cvtss_f32(m4);
    const float db = am / 127.0f;
    const __m256 id = _mm256_set1_ps(am > 0.0f ? 127.0f / am : 0.0f);
    __m256i qi[4];
    for (int i = 0; i < 4; ++i) {
      qi[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // Sum of the 32 integers (exact), before narrowing.
    __m256i tot = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(tot), _mm256_extracti128_si256(tot, 1));
    t4 = _mm_hadd_epi32(t4, t4);
    t4 = _mm_hadd_epi32(t4, t4);
    // packs interleave 128-bit lanes; the permute restores the values' order.
    __m256i p16a = _mm256_packs_epi32(qi[0], qi[1]);
    __m256i p16b = _mm256_packs_epi32(qi[2], qi[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock), p8);
    d[b] = db;
    s[b] = db * static_cast<float>(_mm_cvtsi128_si32(t4));
  }
}

struct QRows {
  const int8_t* q;
  const float* d;
  const float* s;
  int64_t K;
};

// The row kernels, compiled twice: for AVX2 (maddubs into int16 pairs, madd into int32) and for
// AVX-512 VNNI (dpbusd straight into int32). Both sum the same integers exactly (the int16 pairs
// cannot saturate: at most 2 x 15 x 127 per pair for 4-bit weights, 8 x that per lane in q4x8, and
// 128 x 127 x 2 for 8-bit ones), so a row gets the same bits from either.
namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define SY_VNNI 0
#include "block_rows.inc"
#undef SY_VNNI
#pragma GCC pop_options
}  // namespace avx2

namespace vnni {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
#define SY_VNNI 1
#include "block_rows.inc"
#undef SY_VNNI
#pragma GCC pop_options
}  // namespace vnni

namespace amx {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni,amx-tile,amx-int8")
#include "block_amx.inc"
#pragma GCC pop_options
}  // namespace amx

// Calls f(r0, std::integral_constant<int, G>) over row groups of kGroup and one smaller tail group.
template <typename F>
inline void for_row_groups(int64_t M, F f) {
  int64_t r = 0;
  for (; r + kGroup <= M; r += kGroup) f(r, std::integral_constant<int, kGroup>{});
  switch (M - r) {
    case 3: f(r, std::integral_constant<int, 3>{}); break;
    case 2: f(r, std::integral_constant<int, 2>{}); break;
    case 1: f(r, std::integral_constant<int, 1>{}); break;
    default: break;
  }
}
#endif  // SY_X86

struct Quantized {
  at::Tensor q, d, s;
  QRows view() const;
};

void check_x(const at::Tensor& x, int64_t K) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2, "x must be a 2-D CPU tensor");
  TORCH_CHECK(x.size(1) == K, "x has ", x.size(1), " columns, the weight ", K);
  TORCH_CHECK(K % kBlock == 0, "the inner dimension must be a multiple of 32");
}

#ifdef SY_X86
// `padded_rows` > M: q gets that many rows, the ones past M zero (whole tiles for the AMX kernel).
Quantized quantize(const at::Tensor& x, int64_t padded_rows = 0) {
  const int64_t M = x.size(0), K = x.size(1), nb = K / kBlock;
  Quantized out{at::empty({std::max(M, padded_rows), K}, x.options().dtype(at::kChar)), at::empty({M, nb}, x.options()),
                at::empty({M, nb}, x.options())};
  if (padded_rows > M) out.q.narrow(0, M, padded_rows - M).zero_();
  const float* xp = x.data_ptr<float>();
  for (int64_t r = 0; r < M; ++r) {
    quantize_row(xp + r * K, K, out.q.data_ptr<int8_t>() + r * K, out.d.data_ptr<float>() + r * nb,
                 out.s.data_ptr<float>() + r * nb);
  }
  return out;
}

QRows Quantized::view() const {
  return QRows{q.data_ptr<int8_t>(), d.data_ptr<float>(), s.data_ptr<float>(), q.size(1)};
}

// Fewest columns a thread takes. parallel_for gives each thread one contiguous range, so a small
// grain spreads a one-row product over every thread: at 256 columns, a 576-column product kept 13
// of a 16-core machine's threads idle. The fork is paid either way once there are two ranges.
constexpr int64_t kMinColumns = 16;
#endif

// y [M, N] = x @ W.T for x [M, K]: x is quantized once, then `tile(xv, t, r, g, dpbusd, y)` fills
// the outputs of task t (a column or a group of columns) for rows r..r+G, over tasks split
// between threads.
template <typename Tile>
at::Tensor blocked_product(const at::Tensor& x_in, int64_t N, int64_t K, int64_t tasks, int64_t columns_per_task,
                           Tile tile) {
  check_x(x_in, K);
  const at::Tensor x = x_in.to(at::kFloat).contiguous();
  const int64_t M = x.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
#ifdef SY_X86
  const Quantized xq = quantize(x);
  const QRows xv = xq.view();
  const bool dpbusd = g_vnni.load();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, tasks, std::max<int64_t>(1, kMinColumns / columns_per_task), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) for_row_groups(M, [&](int64_t r, auto g) { tile(xv, t, r, g, dpbusd, yp); });
  });
#endif
  return y;
}

#ifdef SY_X86
// A product of the interleaved layouts (q4x8, or q8x8 where wm is null) on AMX tiles
// (block_amx.inc): a task is a pair of groups (16 columns), and an odd last group takes the VNNI
// rows, whose bits are the same.
// Whether an interleaved product of `groups` groups of 8 columns takes the tiles for x.
bool on_tiles(const at::Tensor& x, int64_t groups) {
  return amx_serves() && x.dim() == 2 && x.size(0) >= kAmxMinRows && groups >= 2;
}

at::Tensor amx_x8_product(const at::Tensor& x_in, const uint8_t* wp, const uint16_t* dp, const uint16_t* mp,
                          int64_t groups, int64_t nb) {
  check_x(x_in, nb * kBlock);
  const bool q8 = mp == nullptr;
  const int64_t N = groups * 8, group_bytes = nb * (q8 ? 256 : 128);
  const at::Tensor x = x_in.to(at::kFloat).contiguous();
  const int64_t M = x.size(0), pairs = groups / 2;
  at::Tensor y = at::empty({M, N}, x.options());
  const Quantized xq = quantize(x, (M + 15) / 16 * 16);
  const QRows xv = xq.view();
  float* yp = y.data_ptr<float>();
  const amx::TileConfig cfg = amx::tile_config();
  at::parallel_for(0, pairs + groups % 2, 1, [&](int64_t t0, int64_t t1) {
    std::unique_ptr<uint8_t, decltype(&std::free)> tiles(static_cast<uint8_t*>(std::aligned_alloc(64, nb * 512)),
                                                         &std::free);
    TORCH_CHECK(tiles, "out of memory for the AMX weight tiles");
    amx::begin(cfg);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c = 2 * t;
      const uint8_t* w = wp + c * group_bytes;
      const uint16_t *d = dp + c * nb * 8, *m = q8 ? nullptr : mp + c * nb * 8;
      if (t < pairs) {
        if (q8) {
          amx::x16_columns<true>(xv, M, w, d, m, nb, tiles.get(), yp + c * 8, N);
        } else {
          amx::x16_columns<false>(xv, M, w, d, m, nb, tiles.get(), yp + c * 8, N);
        }
        continue;
      }
      for_row_groups(M, [&](int64_t r, auto g) {
        constexpr int G = decltype(g)::value;
        if (q8) {
          vnni::q8x8_rows<G>(xv, r, reinterpret_cast<const int8_t*>(w), d, nb, yp + c * 8, N);
        } else {
          vnni::q4x8_rows<G>(xv, r, w, d, m, nb, yp + c * 8, N);
        }
      });
    }
    amx::end();
  });
  return y;
}
#endif

// One instantiation of a row kernel per instruction set, called as the CPU allows.
#define SY_ROWS(KERNEL, G, ...) \
  (dpbusd ? vnni::KERNEL<decltype(G)::value>(__VA_ARGS__) : avx2::KERNEL<decltype(G)::value>(__VA_ARGS__))

}  // namespace

namespace sy {

at::Tensor q4_matmul(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& d, const at::Tensor& m) {
  TORCH_CHECK(cpu_has_avx2(), "switchyard::q4_matmul needs AVX2, FMA and F16C");
  const int64_t N = packed.size(0), K = packed.size(1) * 2, nb = K / kBlock;
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous(), "packed: contiguous uint8 [N, K/2]");
  TORCH_CHECK(d.scalar_type() == at::kFloat && m.scalar_type() == at::kFloat && d.is_contiguous() &&
                  m.is_contiguous() && d.numel() == N * nb && m.numel() == N * nb,
              "d, m: contiguous fp32 [N, K/32]");
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const float *dp = d.data_ptr<float>(), *mp = m.data_ptr<float>();
  return blocked_product(x, N, K, N, 1, [&](const QRows& xv, int64_t n, int64_t r, auto g, bool dpbusd, float* y) {
#ifdef SY_X86
    SY_ROWS(q4_rows, g, xv, r, wp + n * (K / 2), dp + n * nb, mp + n * nb, nb, y + n, N);
#endif
  });
}

at::Tensor q4x8_matmul(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& d, const at::Tensor& m) {
  TORCH_CHECK(cpu_has_avx2(), "switchyard::q4x8_matmul needs AVX2, FMA and F16C");
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == 128, "packed: [N/8, K/32, 128] uint8");
  const int64_t groups = packed.size(0), nb = packed.size(1), N = groups * 8, K = nb * kBlock;
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous(), "packed: contiguous uint8");
  TORCH_CHECK(d.scalar_type() == at::kHalf && m.scalar_type() == at::kHalf && d.is_contiguous() &&
                  m.is_contiguous() && d.numel() == N * nb && m.numel() == N * nb,
              "d, m: contiguous fp16 [N/8, K/32, 8]");
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.data_ptr<at::Half>());
  const uint16_t* mp = reinterpret_cast<const uint16_t*>(m.data_ptr<at::Half>());
#ifdef SY_X86
  if (on_tiles(x, groups)) return amx_x8_product(x, wp, dp, mp, groups, nb);
#endif
  return blocked_product(x, N, K, groups, 8, [&](const QRows& xv, int64_t c, int64_t r, auto g, bool dpbusd, float* y) {
#ifdef SY_X86
    SY_ROWS(q4x8_rows, g, xv, r, wp + c * nb * 128, dp + c * nb * 8, mp + c * nb * 8, nb, y + c * 8, N);
#endif
  });
}

at::Tensor q8x8_matmul(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& d) {
  TORCH_CHECK(cpu_has_avx2(), "switchyard::q8x8_matmul needs AVX2, FMA and F16C");
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == 256, "packed: [N/8, K/32, 256] int8");
  const int64_t groups = packed.size(0), nb = packed.size(1), N = groups * 8, K = nb * kBlock;
  TORCH_CHECK(packed.scalar_type() == at::kChar && packed.is_contiguous(), "packed: contiguous int8");
  TORCH_CHECK(d.scalar_type() == at::kHalf && d.is_contiguous() && d.numel() == N * nb, "d: contiguous fp16 [N/8, K/32, 8]");
  const int8_t* wp = packed.data_ptr<int8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.data_ptr<at::Half>());
#ifdef SY_X86
  if (on_tiles(x, groups)) return amx_x8_product(x, reinterpret_cast<const uint8_t*>(wp), dp, nullptr, groups, nb);
#endif
  return blocked_product(x, N, K, groups, 8, [&](const QRows& xv, int64_t c, int64_t r, auto g, bool dpbusd, float* y) {
#ifdef SY_X86
    SY_ROWS(q8x8_rows, g, xv, r, wp + c * nb * 256, dp + c * nb * 8, nb, y + c * 8, N);
#endif
  });
}

at::Tensor q8_matmul(const at::Tensor& x, const at::Tensor& qs, const at::Tensor& d) {
  TORCH_CHECK(cpu_has_avx2(), "switchyard::q8_matmul needs AVX2, FMA and F16C");
  const int64_t N = qs.size(0), K = qs.size(1), nb = K / kBlock;
  TORCH_CHECK(qs.scalar_type() == at::kChar && qs.is_contiguous(), "qs: contiguous int8 [N, K]");
  TORCH_CHECK(d.scalar_type() == at::kFloat && d.is_contiguous() && d.numel() == N * nb, "d: contiguous fp32 [N, K/32]");
  const int8_t* wp = qs.data_ptr<int8_t>();
  const float* dp = d.data_ptr<float>();
  return blocked_product(x, N, K, N, 1, [&](const QRows& xv, int64_t n, int64_t r, auto g, bool dpbusd, float* y) {
#ifdef SY_X86
    SY_ROWS(q8_rows, g, xv, r, wp + n * K, dp + n * nb, nb, y + n, N);
#endif
  });
}

}  // namespace sy

namespace {

// The activation quantization alone, for tests against a reference: (q int8, d, s) per block.
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x_in) {
  TORCH_CHECK(cpu_has_avx2(), "switchyard::quantize_rows needs AVX2, FMA and F16C");
  check_x(x_in, x_in.size(1));
  const at::Tensor x = x_in.to(at::kFloat).contiguous();
#ifdef SY_X86
  Quantized q = quantize(x);
  return {q.q, q.d, q.s};
#else
  return {x, x, x};
#endif
}

bool has_avx2() { return cpu_has_avx2(); }

bool has_vnni() { return cpu_has_vnni(); }

// Turns the VNNI kernels on or off (on only where the CPU has them); returns whether they are on.
bool use_vnni(bool on) {
  g_vnni.store(on && cpu_has_vnni());
  return g_vnni.load();
}

bool has_amx() { return cpu_has_amx(); }

// Turns the AMX kernel on or off (on only where the CPU has it); whether it is on. It serves only
// while the VNNI kernels do too (see amx_on).
bool use_amx(bool on) {
  g_amx.store(on && cpu_has_amx());
  return g_amx.load();
}

bool amx_on() { return amx_serves(); }

// Whether the products take the VNNI kernels now.
bool vnni_on() { return g_vnni.load(); }

}  // namespace

TORCH_LIBRARY(switchyard, m) {
  m.def("q4_matmul(Tensor x, Tensor packed, Tensor d, Tensor m) -> Tensor");
  m.def("q4x8_matmul(Tensor x, Tensor packed, Tensor d, Tensor m) -> Tensor");
  m.def("q8_matmul(Tensor x, Tensor qs, Tensor d) -> Tensor");
  m.def("q8x8_matmul(Tensor x, Tensor packed, Tensor d) -> Tensor");
  m.def("quantize_rows(Tensor x) -> (Tensor, Tensor, Tensor)");
  m.def("has_avx2() -> bool", &has_avx2);
  m.def("has_vnni() -> bool", &has_vnni);
  m.def("use_vnni(bool on) -> bool", &use_vnni);
  m.def("vnni_on() -> bool", &vnni_on);
  m.def("has_amx() -> bool", &has_amx);
  m.def("use_amx(bool on) -> bool", &use_amx);
  m.def("amx_on() -> bool", &amx_on);
}

TORCH_LIBRARY_IMPL(switchyard, CPU, m) {
  m.impl("q4_matmul", &sy::q4_matmul);
  m.impl("q4x8_matmul", &sy::q4x8_matmul);
  m.impl("q8_matmul", &sy::q8_matmul);
  m.impl("q8x8_matmul", &sy::q8x8_matmul);
  m.impl("quantize_rows", &quantize_rows);
}
