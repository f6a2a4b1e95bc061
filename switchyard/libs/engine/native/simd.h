// AVX2 helpers shared by the native kernels' translation units.
#pragma once

#include <immintrin.h>

// The sum of 8 lanes, in a fixed order (so a row's bits never depend on where it is summed).
__attribute__((target("avx2,fma,f16c"))) inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
