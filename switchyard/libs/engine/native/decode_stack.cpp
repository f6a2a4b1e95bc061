// A decoder's layers for a step of single-token decodes, in one call from Python.
//
// In the `native` format a layer is eight native calls (RMSNorm, four block products, rotary
// embedding with the KV write, decode attention, SiLU); from Python each one also paid the
// interpreter, the dispatcher and a few view ops, about a fifth of a one-row step on 2 cores.
// The stack holds each layer's weights (the model's own tensors, not copies) and runs the same
// functions in the same order, so a row gets the same bits as from the Python loop (tested).
#include <torch/custom_class.h>
#include <torch/library.h>
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "ops.h"

namespace {

// One product's weight in the layout of its kind (see block_matmul.cpp).
struct Product {
  int64_t kind;  // 0: 4-bit interleaved by 8 columns, 1: 4-bit, 2: 8-bit (no m), 3: 8-bit interleaved (no m)
  at::Tensor values, d, m;

  at::Tensor operator()(const at::Tensor& x) const {
    switch (kind) {
      case 0: return sy::q4x8_matmul(x, values, d, m);
      case 1: return sy::q4_matmul(x, values, d, m);
      case 3: return sy::q8x8_matmul(x, values, d);
      default: return sy::q8_matmul(x, values, d);
    }
  }
};

struct Layer {
  at::Tensor attn_norm, ffn_norm;
  Product qkv, o, gate_up, down;
};

struct DecodeStack : torch::CustomClassHolder {
  int64_t nh, nkv, hd;
  double eps;
  std::vector<Layer> layers;

  DecodeStack(int64_t nh, int64_t nkv, int64_t hd, double eps) : nh(nh), nkv(nkv), hd(hd), eps(eps) {}

  // weights: (values, d, m) of qkv, o, gate_up and down in that order, m empty for 8-bit; kinds
  // as Product's.
  void add_layer(at::Tensor attn_norm, at::Tensor ffn_norm, std::vector<at::Tensor> weights, std::vector<int64_t> kinds) {
    TORCH_CHECK(weights.size() == 12 && kinds.size() == 4, "four products of (values, d, m) each");
    auto product = [&](size_t i) {
      TORCH_CHECK(kinds[i] >= 0 && kinds[i] <= 3, "a product kind is 0, 1, 2 or 3");
      return Product{kinds[i], weights[3 * i], weights[3 * i + 1], weights[3 * i + 2]};
    };
    layers.push_back(Layer{attn_norm, ffn_norm, product(0), product(1), product(2), product(3)});
  }

  int64_t num_layers() const { return static_cast<int64_t>(layers.size()); }

  // x [T, D] (the embedded tokens) through every layer: row t is at positions[t], writes its keys
  // and values to slot slots[t] of each layer's caches kc, vc [layers, nkv, S, hd], and attends to
  // decode_slots[t, :lens[t]]. Returns the residual stream after the last layer.
  at::Tensor run(at::Tensor x, at::Tensor cos, at::Tensor sin, at::Tensor positions, at::Tensor kc, at::Tensor vc,
                 at::Tensor slots, at::Tensor decode_slots, at::Tensor lens) {
    TORCH_CHECK(x.dim() == 2 && kc.dim() == 4 && kc.size(0) == num_layers() && vc.sizes() == kc.sizes(),
                "x [T, D]; kc, vc [layers, nkv, S, hd]");
    const int64_t T = x.size(0);
    for (int64_t li = 0; li < num_layers(); ++li) {
      const Layer& L = layers[li];
      at::Tensor kl = kc.select(0, li), vl = vc.select(0, li);
      at::Tensor qkv = L.qkv(sy::rms_norm(x, L.attn_norm, eps));
      sy::rope_store(qkv, cos, sin, positions, kl, vl, slots, nh, nkv);
      const at::Tensor q = qkv.narrow(1, 0, nh * hd).view({T, nh, hd});
      const at::Tensor attn = sy::decode_attention(q, kl, vl, decode_slots, lens);
      x = x + L.o(attn.reshape({T, nh * hd}));
      x = x + L.down(sy::silu_mul(L.gate_up(sy::rms_norm(x, L.ffn_norm, eps))));
    }
    return x;
  }
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(switchyard, m) {
  m.class_<DecodeStack>("DecodeStack")
      .def(torch::init<int64_t, int64_t, int64_t, double>())
      .def("add_layer", &DecodeStack::add_layer)
      .def("num_layers", &DecodeStack::num_layers)
      .def("run", &DecodeStack::run);
}
