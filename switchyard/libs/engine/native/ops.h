// The native ops as C++ functions, for the decode stack (decode_stack.cpp) to call without the
// dispatcher; each is also registered as a torch op under switchyard:: by its own source.
#pragma once

#include <ATen/ATen.h>

namespace sy {

// block_matmul.cpp: x [M, K] @ W.T for the weight layouts described there.
at::Tensor q4_matmul(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& d, const at::Tensor& m);
at::Tensor q4x8_matmul(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& d, const at::Tensor& m);
at::Tensor q8_matmul(const at::Tensor& x, const at::Tensor& qs, const at::Tensor& d);
at::Tensor q8x8_matmul(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& d);

// layer_ops.cpp
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);
void rope_store(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& pos, at::Tensor& kc,
                at::Tensor& vc, const at::Tensor& slots, int64_t nh, int64_t nkv);
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& slots,
                            const at::Tensor& lens);
at::Tensor silu_mul(const at::Tensor& gu);

}  // namespace sy
