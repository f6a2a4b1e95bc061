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
#include <vector>

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
  TORCH_CHECK(kc.is_contiguous() && vc.is_contiguous() && kc.scalar_type() == at::kFloat &&
                  vc.scalar_type() == at::kFloat && kc.dim() == 3 && vc.sizes() == kc.sizes(),
              "kc, vc: contiguous f32 [nkv, S, hd]");
  const at::Tensor cs = f32(cos_in, "cos"), sn = f32(sin_in, "sin");
  const at::Tensor pos = pos_in.to(at::kLong).contiguous(), slots = slots_in.to(at::kLong).contiguous();
  const int64_t T = qkv.size(0), hd = kc.size(2), S = kc.size(1), half = hd / 2, W = qkv.size(1);
  TORCH_CHECK(kc.size(0) == nkv && W == (nh + 2 * nkv) * hd && cs.size(1) == hd && sn.sizes() == cs.sizes(),
              "shapes of qkv, caches and rotary tables disagree");
  TORCH_CHECK(pos.numel() == T && slots.numel() == T, "one position and one slot per row");
  float* qp = qkv.data_ptr<float>();
  float *kp = kc.data_ptr<float>(), *vp = vc.data_ptr<float>();
  const float *cp = cs.data_ptr<float>(), *sp = sn.data_ptr<float>();
  const int64_t *pp = pos.data_ptr<int64_t>(), *slp = slots.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t) {
    TORCH_CHECK(pp[t] >= 0 && pp[t] < cs.size(0) && slp[t] >= 0 && slp[t] < S, "position or slot out of range");
  }
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
        std::copy(row + (nh + h) * hd, row + (nh + h + 1) * hd, kp + (h * S + slp[t]) * hd);
        std::copy(row + (nh + nkv + h) * hd, row + (nh + nkv + h + 1) * hd, vp + (h * S + slp[t]) * hd);
      }
    }
  });
}

// Single-token decode attention over the paged caches, read in place: row r attends to the keys
// at slots[r, :lens[r]]; the query heads of kv head h are h * group .. (h + 1) * group - 1.
at::Tensor decode_attention(const at::Tensor& q_in, const at::Tensor& kc, const at::Tensor& vc,
                            const at::Tensor& slots_in, const at::Tensor& lens_in) {
  const at::Tensor q = f32(q_in, "q");
  TORCH_CHECK(kc.is_contiguous() && vc.is_contiguous() && kc.scalar_type() == at::kFloat &&
                  vc.scalar_type() == at::kFloat && kc.dim() == 3 && vc.sizes() == kc.sizes(),
              "kc, vc: contiguous f32 [nkv, S, hd]");
  const at::Tensor slots = slots_in.to(at::kLong).contiguous(), lens = lens_in.to(at::kLong).contiguous();
  TORCH_CHECK(q.dim() == 3 && slots.dim() == 2, "q [B, nh, hd], slots [B, width]");
  const int64_t B = q.size(0), nh = q.size(1), hd = q.size(2), nkv = kc.size(0), S = kc.size(1);
  const int64_t width = slots.size(1), group = nh / nkv;
  TORCH_CHECK(kc.size(2) == hd && nh % nkv == 0 && slots.size(0) == B && lens.numel() == B, "shapes disagree");
  const int64_t *lp = lens.data_ptr<int64_t>(), *slp = slots.data_ptr<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    TORCH_CHECK(lp[r] >= 1 && lp[r] <= width, "each row attends to 1..width keys");
    for (int64_t j = 0; j < lp[r]; ++j) TORCH_CHECK(slp[r * width + j] >= 0 && slp[r * width + j] < S, "slot out of range");
  }
  at::Tensor out = at::empty_like(q);
  const float *qp = q.data_ptr<float>(), *kp = kc.data_ptr<float>(), *vp = vc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // One task per (row, kv head): its keys and values are read once for the whole head group.
  at::parallel_for(0, B * nkv, 1, [&](int64_t a, int64_t b) {
    std::vector<float> p(group * width);
    for (int64_t task = a; task < b; ++task) {
      const int64_t r = task / nkv, h = task % nkv, n = lp[r];
      const int64_t* sl = slp + r * width;
      const float* kh = kp + h * S * hd;
      const float* vh = vp + h * S * hd;
      for (int64_t g = 0; g < group; ++g) {
        const float* qv = qp + (r * nh + h * group + g) * hd;
        float* pg = p.data() + g * width;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          pg[j] = dot(qv, kh + sl[j] * hd, hd) * scale;
          mx = std::max(mx, pg[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          pg[j] = std::exp(pg[j] - mx);
          sum += pg[j];
        }
        const float inv = 1.0f / sum;
        float* o = op + (r * nh + h * group + g) * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          const float w = pg[j] * inv;
          const float* vj = vh + sl[j] * hd;
          for (int64_t i = 0; i < hd; ++i) o[i] += w * vj[i];
        }
      }
    }
  });
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
