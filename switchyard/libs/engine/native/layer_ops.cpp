// The elementwise and attention parts of a decoder layer, one op each, for the `native` format.
//
// In a decode step of a few rows a layer ran about 25 torch ops, most of them on a few hundred
// floats: RMSNorm alone was a composite of five, rotary embedding three plus a copy per cache
// write, and decode attention gathered every sequence's keys and values into fresh tensors before
// two batched matmuls and a softmax. Their fixed cost per call, not the work, set the step time.
// Here each is one call that reads the paged cache in place.
//
// Every row is computed alone, in a fixed order (no reduction spans rows or depends on the thread
// split), so a row's bits do not depend on the other rows of its batch: the engine's batch
// invariance holds as it does for the block products.
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <immintrin.h>

#include "ops.h"
#include "simd.h"

// Where the ops run at all the CPU has AVX2 and FMA (native.available() checks before any call).
#pragma GCC target("avx2,fma,f16c")

namespace {

// Partial sums in 8 lanes, added up in a fixed tree: vectorizable, and the same order every time.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) acc[i % 8] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// The KV caches: fp32, or fp16 (half the bytes; rows converted with F16C, round to nearest even,
// as torch's .to(torch.float16)).
void check_caches(const at::Tensor& kc, const at::Tensor& vc) {
  TORCH_CHECK(kc.is_contiguous() && vc.is_contiguous() && kc.dim() == 3 && vc.sizes() == kc.sizes() &&
                  kc.scalar_type() == vc.scalar_type() &&
                  (kc.scalar_type() == at::kFloat || kc.scalar_type() == at::kHalf),
              "kc, vc: contiguous fp32 or fp16 [nkv, S, hd], alike");
}

// Stores n (a multiple of 8) floats as the cache's type; `x` gets the stored values back, so the
// step's own keys are the ones later steps read.
inline void store_row(float* x, float* dst, int64_t n) { std::copy(x, x + n, dst); }
inline void store_row(float* x, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
}
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// The cache's element pointer: float for fp32, the raw bits for fp16.
template <typename E>
E* cache_ptr(const at::Tensor& t) {
  if constexpr (std::is_same_v<E, float>) return t.data_ptr<float>();
  else return reinterpret_cast<uint16_t*>(t.data_ptr<at::Half>());
}

at::Tensor f32(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32");
  return t.contiguous();
}

// y = x / sqrt(mean(x^2) + eps) * w, per row of x [M, D].
at::Tensor rms_norm(const at::Tensor& x_in, const at::Tensor& w_in, double eps) {
  const at::Tensor x = f32(x_in, "x"), w = f32(w_in, "w");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 1 && w.size(0) == x.size(1), "x [M, D], w [D]");
  const int64_t M = x.size(0), D = x.size(1);
  at::Tensor y = at::empty_like(x);
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = xp + r * D;
      const float inv = 1.0f / std::sqrt(dot(xr, xr, D) / static_cast<float>(D) + static_cast<float>(eps));
      for (int64_t i = 0; i < D; ++i) yp[r * D + i] = xr[i] * inv * wp[i];
    }
  });
  return y;
}

// In place on qkv [T, (nh + 2 nkv) * hd]: rotates the q and k heads of each row by its position
// (rotate-half: out[i] = x[i] cos[i] + x[i +- hd/2] sin[i], sin carrying the sign), then writes
// that row's k and v heads to slot slots[t] of the caches kc, vc [nkv, S, hd].
void rope_store(at::Tensor& qkv, const at::Tensor& cos_in, const at::Tensor& sin_in, const at::Tensor& pos_in,
                at::Tensor& kc, at::Tensor& vc, const at::Tensor& slots_in, int64_t nh, int64_t nkv) {
  TORCH_CHECK(qkv.is_contiguous() && qkv.scalar_type() == at::kFloat && qkv.dim() == 2, "qkv: contiguous f32 [T, W]");
  check_caches(kc, vc);
  const at::Tensor cs = f32(cos_in, "cos"), sn = f32(sin_in, "sin");
  const at::Tensor pos = pos_in.to(at::kLong).contiguous(), slots = slots_in.to(at::kLong).contiguous();
  const int64_t T = qkv.size(0), hd = kc.size(2), S = kc.size(1), half = hd / 2, W = qkv.size(1);
  TORCH_CHECK(kc.size(0) == nkv && W == (nh + 2 * nkv) * hd && hd % 8 == 0 && cs.size(1) == hd &&
                  sn.sizes() == cs.sizes(),
              "shapes of qkv, caches and rotary tables disagree");
  TORCH_CHECK(pos.numel() == T && slots.numel() == T, "one position and one slot per row");
  float* qp = qkv.data_ptr<float>();
  const float *cp = cs.data_ptr<float>(), *sp = sn.data_ptr<float>();
  const int64_t *pp = pos.data_ptr<int64_t>(), *slp = slots.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t) {
    TORCH_CHECK(pp[t] >= 0 && pp[t] < cs.size(0) && slp[t] >= 0 && slp[t] < S, "position or slot out of range");
  }
  auto run = [&](auto* kp, auto* vp) {
    at::parallel_for(0, T, 8, [&](int64_t t0, int64_t t1) {
      std::vector<float> tmp(hd);
      for (int64_t t = t0; t < t1; ++t) {
        float* row = qp + t * W;
        const float *c = cp + pp[t] * hd, *s = sp + pp[t] * hd;
        for (int64_t h = 0; h < nh + nkv; ++h) {
          float* x = row + h * hd;
          for (int64_t i = 0; i < half; ++i) tmp[i] = x[i] * c[i] + x[i + half] * s[i];
          for (int64_t i = half; i < hd; ++i) tmp[i] = x[i] * c[i] + x[i - half] * s[i];
          std::copy(tmp.begin(), tmp.end(), x);
        }
        for (int64_t h = 0; h < nkv; ++h) {
          store_row(row + (nh + h) * hd, kp + (h * S + slp[t]) * hd, hd);
          store_row(row + (nh + nkv + h) * hd, vp + (h * S + slp[t]) * hd, hd);
        }
      }
    });
  };
  if (kc.scalar_type() == at::kHalf) run(cache_ptr<uint16_t>(kc), cache_ptr<uint16_t>(vc));
  else run(cache_ptr<float>(kc), cache_ptr<float>(vc));
}

// e^x for x <= 0 (scores minus their maximum), 8 lanes: Cephes' expf (range reduction by ln 2 in
// two parts, a degree-5 polynomial), within 2 ulp of std::exp; lanes below -87 give 0.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  __m256 fx = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(0.5f)));
  x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(0.693359375f)));
  x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(y, x), x), x), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

// One query head over n keys at slots sl of one kv head's cache (rows of hd floats, hd a multiple
// of 8, at most 256): scores into p (at least n + 8 floats), softmax, and the weighted sum of values into o.
template <typename E>
inline void attend(const float* q, const E* k, const E* v, const int64_t* sl, int64_t n, int64_t hd, float scale,
                   float* p, float* o) {
  const int64_t c8 = hd / 8;
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n; ++j) {
    const E* kj = k + sl[j] * hd;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < c8; ++c) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(q + 8 * c), load8(kj + 8 * c)));
    p[j] = hsum(acc) * scale;
    mx = _mm256_max_ps(mx, _mm256_set1_ps(p[j]));
  }
  // The tail past n holds -inf, so its exp is 0 and full vectors cover every key.
  for (int64_t j = n; j < ((n + 7) & ~int64_t{7}); ++j) p[j] = -std::numeric_limits<float>::infinity();
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(p + j), mx));
    _mm256_storeu_ps(p + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  const float inv = 1.0f / hsum(sum);
  // Each value row is read once: the output's hd / 8 vectors stay in registers where they fit
  // (hd 128: 16; Gemma 3's 256 spills half, still one pass over the values).
  __m256 acc[32];
  for (int64_t c = 0; c < c8; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const E* vj = v + sl[j] * hd;
    for (int64_t c = 0; c < c8; ++c) acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(pj, load8(vj + 8 * c)));
  }
  for (int64_t c = 0; c < c8; ++c) _mm256_storeu_ps(o + 8 * c, _mm256_mul_ps(acc[c], _mm256_set1_ps(inv)));
}

// Single-token decode attention over the paged caches, read in place: row r attends to the keys
// at slots[r, :lens[r]]; the query heads of kv head h are h * group .. (h + 1) * group - 1.
at::Tensor decode_attention(const at::Tensor& q_in, const at::Tensor& kc, const at::Tensor& vc,
                            const at::Tensor& slots_in, const at::Tensor& lens_in) {
  const at::Tensor q = f32(q_in, "q");
  check_caches(kc, vc);
  const at::Tensor slots = slots_in.to(at::kLong).contiguous(), lens = lens_in.to(at::kLong).contiguous();
  TORCH_CHECK(q.dim() == 3 && slots.dim() == 2, "q [B, nh, hd], slots [B, width]");
  const int64_t B = q.size(0), nh = q.size(1), hd = q.size(2), nkv = kc.size(0), S = kc.size(1);
  const int64_t width = slots.size(1), group = nh / nkv;
  TORCH_CHECK(kc.size(2) == hd && hd % 8 == 0 && hd <= 256 && nh % nkv == 0 && slots.size(0) == B && lens.numel() == B,
              "shapes disagree (hd a multiple of 8, at most 256)");
  const int64_t *lp = lens.data_ptr<int64_t>(), *slp = slots.data_ptr<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    TORCH_CHECK(lp[r] >= 1 && lp[r] <= width, "each row attends to 1..width keys");
    for (int64_t j = 0; j < lp[r]; ++j) TORCH_CHECK(slp[r * width + j] >= 0 && slp[r * width + j] < S, "slot out of range");
  }
  at::Tensor out = at::empty_like(q);
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  auto run = [&](const auto* kp, const auto* vp) {
    // One task per (row, kv head): its keys and values are read once for the whole head group.
    at::parallel_for(0, B * nkv, 1, [&](int64_t a, int64_t b) {
      std::vector<float> p(width + 8);
      for (int64_t task = a; task < b; ++task) {
        const int64_t r = task / nkv, h = task % nkv;
        for (int64_t g = 0; g < group; ++g) {
          const int64_t head = r * nh + h * group + g;
          attend(qp + head * hd, kp + h * S * hd, vp + h * S * hd, slp + r * width, lp[r], hd, scale, p.data(),
                 op + head * hd);
        }
      }
    });
  };
  if (kc.scalar_type() == at::kHalf) run(cache_ptr<uint16_t>(kc), cache_ptr<uint16_t>(vc));
  else run(cache_ptr<float>(kc), cache_ptr<float>(vc));
  return out;
}

// silu(gu[:, :I]) * gu[:, I:] for gu [T, 2I].
at::Tensor silu_mul(const at::Tensor& gu_in) {
  const at::Tensor gu = f32(gu_in, "gu");
  TORCH_CHECK(gu.dim() == 2 && gu.size(1) % 2 == 0, "gu [T, 2I]");
  const int64_t T = gu.size(0), I = gu.size(1) / 2;
  at::Tensor y = at::empty({T, I}, gu.options());
  const float* gp = gu.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, T, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float *g = gp + t * 2 * I, *u = g + I;
      for (int64_t i = 0; i < I; ++i) yp[t * I + i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  });
  return y;
}

}  // namespace

namespace sy {
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) { return ::rms_norm(x, w, eps); }
void rope_store(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& pos, at::Tensor& kc,
                at::Tensor& vc, const at::Tensor& slots, int64_t nh, int64_t nkv) {
  ::rope_store(qkv, cos, sin, pos, kc, vc, slots, nh, nkv);
}
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& slots,
                            const at::Tensor& lens) {
  return ::decode_attention(q, kc, vc, slots, lens);
}
at::Tensor silu_mul(const at::Tensor& gu) { return ::silu_mul(gu); }
}  // namespace sy

TORCH_LIBRARY_FRAGMENT(switchyard, m) {
  m.def("rms_norm(Tensor x, Tensor w, float eps) -> Tensor");
  m.def(
      "rope_store(Tensor(a!) qkv, Tensor cos, Tensor sin, Tensor positions, Tensor(b!) kc, Tensor(c!) vc, "
      "Tensor slots, int nh, int nkv) -> ()");
  m.def("decode_attention(Tensor q, Tensor kc, Tensor vc, Tensor slots, Tensor lens) -> Tensor");
  m.def("silu_mul(Tensor gu) -> Tensor");
}

TORCH_LIBRARY_IMPL(switchyard, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("rope_store", &rope_store);
  m.impl("decode_attention", &decode_attention);
  m.impl("silu_mul", &silu_mul);
}
