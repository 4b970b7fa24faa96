"""A compiled AVX-512 CPU kernel for banded softmax attention (`banded.banded_attention`'s
forward without autograd): query i over keys [i − before, i + after] ∩ [0, N).

Why compiled: torch's CPU flash kernel runs the short key spans of a band (a block of queries
and its block + before + after keys) at about half its long-span rate, so window 64 reached
0.3 of its ideal speed-up at causal 8k (issue #27 asks for 0.5). Here a block of 16 queries is
one 16-lane vector per key: its scores accumulate by FMAs over the head dimension with the
key's entry broadcast, the band is a lane mask per key, the softmax runs across keys with one
exp per score (at::vec's ``exp_u20``, as torch's CPU flash kernel), and the values are mixed
four query rows at a time, 64 columns in 16 register accumulators. Measured at causal 8k
(B = 1, H = 4, D = 64, 2 threads): window 64 in 3.0 ms, 1.0 of the ideal, where the SDPA path
took 10 ms.

It returns the row log-sum-exp too (strided merges its local and dilated parts by it). Like
`topk_kernel`, the source is a string here so that the code fingerprint covers it, built on
first use by ``torch.utils.cpp_extension.load_inline``; it needs AVX-512 (torch's dispatch
capability), float32, head dimension at most 256 and a value dimension a multiple of 16.
Elsewhere, or where it cannot be built (one warning), `compiled_banded` returns None and the
caller keeps its SDPA path.
"""

from __future__ import annotations

import functools
import warnings

import torch

KERNEL_SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t R = 16;        // queries per block: one per lane
constexpr int64_t MAX_D = 256;   // head dimension held transposed on the stack

// mask of the lanes (rows r0 + lane) that see key position p: p - after <= row <= p + before
inline __mmask16 band_lanes(int64_t p, int64_t r0, int64_t rows, int64_t before, int64_t after) {
  const __m512i row = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                         12, 13, 14, 15),
                                       _mm512_set1_epi32(int(r0)));
  const __mmask16 live = rows >= R ? __mmask16(0xFFFF) : __mmask16((1u << rows) - 1);
  return live & _mm512_cmpge_epi32_mask(row, _mm512_set1_epi32(int(p - after))) &
         _mm512_cmple_epi32_mask(row, _mm512_set1_epi32(int(p + before)));
}

// out rows [0, rows) (G 16-column groups from column 0 of o) += weights (key-major, R lanes a
// key) times the values of L keys, each row then scaled by its inverse sum
template <int G>
void mix_values(const float* P, const float* v, float* o, int64_t L, int64_t rows, int64_t dv,
                 const float* inverse) {
  for (int64_t rg = 0; rg < rows; rg += 4) {
    __m512 acc[4][G];
    for (int a = 0; a < 4; ++a)
      for (int c = 0; c < G; ++c) acc[a][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < L; ++j) {
      __m512 vv[G];
      for (int c = 0; c < G; ++c) vv[c] = _mm512_loadu_ps(v + j * dv + 16 * c);
      const float* pj = P + j * R + rg;
      for (int a = 0; a < 4; ++a) {
        const __m512 pa = _mm512_set1_ps(pj[a]);
        for (int c = 0; c < G; ++c) acc[a][c] = _mm512_fmadd_ps(pa, vv[c], acc[a][c]);
      }
    }
    for (int64_t a = 0; a < 4 && rg + a < rows; ++a) {
      const __m512 s = _mm512_set1_ps(inverse[rg + a]);
      for (int c = 0; c < G; ++c)
        _mm512_storeu_ps(o + (rg + a) * dv + 16 * c, _mm512_mul_ps(acc[a][c], s));
    }
  }
}

std::tuple<at::Tensor, at::Tensor> banded_forward(at::Tensor q, at::Tensor k, at::Tensor v,
                                                  int64_t before, int64_t after, double scale) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
              v.scalar_type() == at::kFloat, "banded_forward takes float32");
  TORCH_CHECK(q.dim() == 3 && k.sizes() == q.sizes() && v.size(0) == q.size(0) &&
              v.size(1) == q.size(1), "banded_forward takes (BH, N, D) tensors, N = M");
  const int64_t BH = q.size(0), N = q.size(1), D = q.size(2), DV = v.size(2);
  TORCH_CHECK(D <= MAX_D && DV % 16 == 0, "banded_forward: D <= 256 and Dv % 16 == 0");
  q = q.contiguous(); k = k.contiguous(); v = v.contiguous();
  auto out = at::empty({BH, N, DV}, q.options());
  auto lse = at::empty({BH, N}, q.options());
  const float* Q = q.data_ptr<float>();
  const float* K = k.data_ptr<float>();
  const float* V = v.data_ptr<float>();
  float* O = out.data_ptr<float>();
  float* LSE = lse.data_ptr<float>();
  const int64_t blocks = (N + R - 1) / R;
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
#pragma omp parallel num_threads(at::get_num_threads())
  {
    alignas(64) float qt[MAX_D * R];
    std::vector<float> S((R + before + after) * R + R);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < BH * blocks; ++task) {
      const int64_t bh = task / blocks, r0 = (task % blocks) * R;
      const int64_t rows = std::min<int64_t>(R, N - r0);
      const float* q0 = Q + (bh * N + r0) * D;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t d = 0; d < D; ++d)
          qt[d * R + r] = r < rows ? q0[r * D + d] * float(scale) : 0.f;
      const int64_t p0 = std::max<int64_t>(0, r0 - before);
      const int64_t p1 = std::min<int64_t>(N, r0 + rows + after);  // keys [p0, p1)
      const int64_t L = p1 - p0;
      const float* kb = K + (bh * N + p0) * D;
      __m512 mx = ninf;
      int64_t j = 0;
      for (; j + 4 <= L; j += 4) {  // four keys at a time: one load of q per four FMAs
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
        const float* k0 = kb + j * D;
        for (int64_t d = 0; d < D; ++d) {
          const __m512 qd = _mm512_load_ps(qt + d * R);
          for (int t = 0; t < 4; ++t)
            a[t] = _mm512_fmadd_ps(qd, _mm512_set1_ps(k0[t * D + d]), a[t]);
        }
        for (int t = 0; t < 4; ++t) {
          const __m512 s = _mm512_mask_blend_ps(band_lanes(p0 + j + t, r0, rows, before, after),
                                                ninf, a[t]);
          _mm512_storeu_ps(S.data() + (j + t) * R, s);
          mx = _mm512_max_ps(mx, s);
        }
      }
      for (; j < L; ++j) {
        __m512 a = _mm512_setzero_ps();
        const float* k0 = kb + j * D;
        for (int64_t d = 0; d < D; ++d)
          a = _mm512_fmadd_ps(_mm512_load_ps(qt + d * R), _mm512_set1_ps(k0[d]), a);
        const __m512 s = _mm512_mask_blend_ps(band_lanes(p0 + j, r0, rows, before, after), ninf, a);
        _mm512_storeu_ps(S.data() + j * R, s);
        mx = _mm512_max_ps(mx, s);
      }
      // lanes past the last row have no key: give them a finite maximum, their sums are unused
      mx = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ), mx, _mm512_setzero_ps());
      __m512 sum = _mm512_setzero_ps();
      for (j = 0; j < L; ++j) {
        const __m512 e = Vec(_mm512_sub_ps(_mm512_loadu_ps(S.data() + j * R), mx)).exp_u20();
        _mm512_storeu_ps(S.data() + j * R, e);
        sum = _mm512_add_ps(sum, e);
      }
      alignas(64) float inverse[R], row_max[R], row_sum[R];
      _mm512_store_ps(inverse, _mm512_div_ps(_mm512_set1_ps(1.f), sum));
      _mm512_store_ps(row_max, mx);
      _mm512_store_ps(row_sum, sum);
      for (int64_t r = 0; r < rows; ++r) LSE[bh * N + r0 + r] = row_max[r] + std::log(row_sum[r]);
      const float* vb = V + (bh * N + p0) * DV;
      float* o0 = O + (bh * N + r0) * DV;
      for (int64_t c0 = 0; c0 < DV; c0 += 64) {
        const float* vc = vb + c0;
        float* oc = o0 + c0;
        switch (std::min<int64_t>(4, (DV - c0) / 16)) {  // compile-time widths: registers
          case 4: mix_values<4>(S.data(), vc, oc, L, rows, DV, inverse); break;
          case 3: mix_values<3>(S.data(), vc, oc, L, rows, DV, inverse); break;
          case 2: mix_values<2>(S.data(), vc, oc, L, rows, DV, inverse); break;
          default: mix_values<1>(S.data(), vc, oc, L, rows, DV, inverse); break;
        }
      }
    }
  }
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY(attnbench_banded, m) {
  m.def("banded_forward(Tensor q, Tensor k, Tensor v, int before, int after, float scale)"
        " -> (Tensor, Tensor)");
  m.impl("banded_forward", c10::DispatchKey::CPU, TORCH_FN(banded_forward));
}
"""

FLAGS = [
    "-O3",
    "-fopenmp",
    "-DCPU_CAPABILITY=AVX512",
    "-DCPU_CAPABILITY_AVX512",
    "-mavx512f",
    "-mavx512bw",
    "-mavx512vl",
    "-mavx512dq",
    "-mfma",
]


@functools.cache
def _load() -> bool:
    """Build (or find in torch's extension cache) and load the kernel; False where the CPU
    dispatch is not AVX-512 (quietly) or the build fails (one warning)."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False
    try:
        from torch.utils.cpp_extension import load_inline

        load_inline(
            name="attnbench_banded_avx512",
            cpp_sources=[KERNEL_SOURCE],
            extra_cflags=FLAGS,
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except Exception as error:  # no compiler, no ninja, a failed build: keep the SDPA path
        message = str(error).strip().splitlines()[-1] if str(error).strip() else ""
        warnings.warn(
            f"the banded engine's compiled CPU kernel could not be built ({type(error).__name__}:"
            f" {message}); window and strided use their slower SDPA path.",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def compiled_banded(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, before: int, after: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(out (B, H, N, Dv), row log-sum-exp (B, H, N)) of query i over keys [i − before,
    i + after], by the compiled kernel; None where it does not serve the call (autograd
    recording, not float32 on the CPU, D > 256, Dv not a multiple of 16, no AVX-512, no build)."""
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in (q, k, v)):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return None
    bsz, heads, n, d = q.shape
    dv = v.shape[-1]
    if d > 256 or dv % 16 or k.shape != q.shape or not _load():
        return None
    out, lse = torch.ops.attnbench_banded.banded_forward(
        q.reshape(bsz * heads, n, d),
        k.reshape(bsz * heads, n, d),
        v.reshape(bsz * heads, n, dv),
        before,
        after,
        scale,
    )
    return out.view(bsz, heads, n, dv), lse.view(bsz, heads, n)
