"""Experiment (not part of the package): a hand-written AVX-512 kernel for causal window
attention on the CPU, against dense causal SDPA and attnbench's `window` at causal 8k.

Why it is here: issue #27 asks for half the ideal speed-up 1/density at density <= 0.1, and the
short windows miss it through torch's CPU flash kernel (window 64: 0.27 of the ideal), whose
64-128-key tiles run at about half its long-span rate. This kernel works on blocks of 16
queries: the block's scores against its 16 + w - 1 keys are 16-lane vectors (one lane per
query), accumulated by FMAs over the head dimension with the key's value broadcast; the band
is a lane mask per key; the softmax runs across keys with one exp (at::vec's ``exp_u20``) per
score; the values are mixed four query rows at a time, 16 accumulators in registers. It is
forward-only, float32, causal, head dimension 64, no grad: a measurement of what a tile kernel
of our own can reach, for the next step (integrating it into the banded engine, which would
re-run the window, strided and bigbird jobs of the reference board).

Measured on the project's 2-core AMD EPYC (quiet, 2 threads, medians of
``torch.utils.benchmark``; fraction of the ideal = density x SDPA time / kernel time):

    window 32:  2.0 ms, 0.75 of the ideal (window's path now: 8.5 ms, 0.18)
    window 64:  3.0 ms, 1.04 of the ideal (now: 10.4 ms, 0.30)
    window 256: 7.7 ms, 1.57 of the ideal (now: 19.4 ms, 0.63)

Max error against float64: 1e-6. Run: ``python docs/experiments/window_kernel.py [window]``
(needs a C++ compiler, ninja and an AVX-512 CPU).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.utils import benchmark
from torch.utils.cpp_extension import load_inline

from attnbench import build_variant
from attnbench.harness.discovery import load_plugins
from attnbench.harness.memory import reuse_freed_memory

KERNEL_SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>
#include <limits>
#include <cmath>
namespace {
using Vec = at::vec::Vectorized<float>;
constexpr int R = 16, D = 64;
// causal window attention, D = 64: q,k,v (BH, N, 64) contiguous; window w
void window_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
                int64_t w, double scale) {
  const int64_t BH = q.size(0), N = q.size(1);
  const float* Q = q.data_ptr<float>();
  const float* K = k.data_ptr<float>();
  const float* V = v.data_ptr<float>();
  float* O = out.data_ptr<float>();
  const int64_t blocks = (N + R - 1) / R;
  const int64_t maxspan = R + w - 1;
#pragma omp parallel num_threads(at::get_num_threads())
  {
    alignas(64) float qt[D * R];
    std::vector<float> S(maxspan * R + 64);
    #pragma omp for schedule(static)
    for (int64_t task = 0; task < BH * blocks; ++task) {
      const int64_t bh = task / blocks, r0 = (task % blocks) * R;
      const int64_t rows = std::min<int64_t>(R, N - r0);
      const float* q0 = Q + (bh * N + r0) * D;
      for (int r = 0; r < R; ++r)
        for (int d = 0; d < D; ++d) qt[d * R + r] = r < rows ? q0[r * D + d] * float(scale) : 0.f;
      const int64_t p0 = std::max<int64_t>(0, r0 - w + 1), p1 = r0 + rows;  // keys [p0, p1)
      const int64_t L = p1 - p0;
      const float* kb = K + (bh * N + p0) * D;
      const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      const __m512i lane = _mm512_setr_epi32(0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15);
      __m512 mx = ninf;
      int64_t j = 0;
      for (; j + 4 <= L; j += 4) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        const float* k0 = kb + j * D;
        for (int d = 0; d < D; ++d) {
          const __m512 qd = _mm512_load_ps(qt + d * R);
          a0 = _mm512_fmadd_ps(qd, _mm512_set1_ps(k0[d]), a0);
          a1 = _mm512_fmadd_ps(qd, _mm512_set1_ps(k0[D + d]), a1);
          a2 = _mm512_fmadd_ps(qd, _mm512_set1_ps(k0[2 * D + d]), a2);
          a3 = _mm512_fmadd_ps(qd, _mm512_set1_ps(k0[3 * D + d]), a3);
        }
        __m512 acc[4] = {a0, a1, a2, a3};
        for (int t = 0; t < 4; ++t) {
          const int64_t p = p0 + j + t;  // row r sees p iff r0+r-w+1 <= p <= r0+r
          const __m512i rr = _mm512_add_epi32(lane, _mm512_set1_epi32(int(r0)));
          const __mmask16 ok = _mm512_cmple_epi32_mask(_mm512_set1_epi32(int(p)), rr) &
                               _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(int(p + w)), rr);
          const __m512 s = _mm512_mask_blend_ps(ok, ninf, acc[t]);
          _mm512_storeu_ps(S.data() + (j + t) * R, s);
          mx = _mm512_max_ps(mx, s);
        }
      }
      for (; j < L; ++j) {
        __m512 a0 = _mm512_setzero_ps();
        const float* k0 = kb + j * D;
        for (int d = 0; d < D; ++d)
          a0 = _mm512_fmadd_ps(_mm512_load_ps(qt + d * R), _mm512_set1_ps(k0[d]), a0);
        const int64_t p = p0 + j;
        const __m512i rr = _mm512_add_epi32(lane, _mm512_set1_epi32(int(r0)));
        const __mmask16 ok = _mm512_cmple_epi32_mask(_mm512_set1_epi32(int(p)), rr) &
                             _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(int(p + w)), rr);
        const __m512 s = _mm512_mask_blend_ps(ok, ninf, a0);
        _mm512_storeu_ps(S.data() + j * R, s);
        mx = _mm512_max_ps(mx, s);
      }
      __m512 sum = _mm512_setzero_ps();
      for (j = 0; j < L; ++j) {
        __m512 e = Vec(_mm512_sub_ps(_mm512_loadu_ps(S.data() + j * R), mx)).exp_u20();
        _mm512_storeu_ps(S.data() + j * R, e);
        sum = _mm512_add_ps(sum, e);
      }
      alignas(64) float inv[R];
      _mm512_store_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.f), sum));
      const float* vb = V + (bh * N + p0) * D;
      float* o0 = O + (bh * N + r0) * D;
      for (int rg = 0; rg < R; rg += 4) {
        if (rg >= rows) break;
        __m512 acc[4][4];
        for (int a = 0; a < 4; ++a) for (int c = 0; c < 4; ++c) acc[a][c] = _mm512_setzero_ps();
        for (j = 0; j < L; ++j) {
          const float* vj = vb + j * D;
          const __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16);
          const __m512 v2 = _mm512_loadu_ps(vj + 32), v3 = _mm512_loadu_ps(vj + 48);
          const float* pj = S.data() + j * R + rg;
          for (int a = 0; a < 4; ++a) {
            const __m512 pa = _mm512_set1_ps(pj[a]);
            acc[a][0] = _mm512_fmadd_ps(pa, v0, acc[a][0]);
            acc[a][1] = _mm512_fmadd_ps(pa, v1, acc[a][1]);
            acc[a][2] = _mm512_fmadd_ps(pa, v2, acc[a][2]);
            acc[a][3] = _mm512_fmadd_ps(pa, v3, acc[a][3]);
          }
        }
        for (int a = 0; a < 4 && rg + a < rows; ++a) {
          const __m512 s = _mm512_set1_ps(inv[rg + a]);
          for (int c = 0; c < 4; ++c)
            _mm512_storeu_ps(o0 + (rg + a) * D + 16 * c, _mm512_mul_ps(acc[a][c], s));
        }
      }
    }
  }
}
at::Tensor window_attention(at::Tensor q, at::Tensor k, at::Tensor v, int64_t w) {
  auto out = at::empty_like(q);
  window_fwd(q, k, v, out, w, 1.0 / std::sqrt(double(q.size(-1))));
  return out;
}
}
TORCH_LIBRARY(attnbench_window_experiment, m) {
  m.def("window_attention(Tensor q, Tensor k, Tensor v, int w) -> Tensor");
  m.impl("window_attention", c10::DispatchKey::CPU, TORCH_FN(window_attention));
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


def main(window: int = 64, n: int = 8192, heads: int = 4) -> None:
    load_inline(
        name="attnbench_window_experiment",
        cpp_sources=[KERNEL_SOURCE],
        extra_cflags=FLAGS,
        extra_ldflags=["-fopenmp"],
        is_python_module=False,
    )
    op = torch.ops.attnbench_window_experiment.window_attention
    load_plugins()
    reuse_freed_memory()
    torch.set_num_threads(2)

    # correctness: against float64 SDPA with the band as a boolean mask
    m = 300
    q, k, v = (torch.randn(1, 2, m, 64) for _ in range(3))
    i = torch.arange(m)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=band)
    got = op(*(t.reshape(2, m, 64).contiguous() for t in (q, k, v)), window).view(1, 2, m, 64)
    print(f"max error against float64: {(got.double() - ref).abs().max().item():.2g}")

    q, k, v = (torch.randn(1, heads, n, 64) for _ in range(3))
    flat = [t.reshape(heads, n, 64).contiguous() for t in (q, k, v)]
    variant = build_variant("window", {"window": window})
    density = variant.density(n, n, True)

    def median(stmt: str, **names) -> float:
        timer = benchmark.Timer(stmt, globals=names, num_threads=2)
        return timer.blocked_autorange(min_run_time=1).median

    with torch.no_grad():
        for _ in range(3):
            sdpa = median(
                "F.scaled_dot_product_attention(q, k, v, is_causal=True)", F=F, q=q, k=k, v=v
            )
            ours = median("op(*flat, w)", op=op, flat=flat, w=window)
            now = median("variant(q, k, v, causal=True)", variant=variant, q=q, k=k, v=v)
            print(
                f"SDPA {sdpa * 1e3:.1f} ms | kernel {ours * 1e3:.2f} ms, "
                f"{density * sdpa / ours:.2f} of the ideal | window now {now * 1e3:.2f} ms, "
                f"{density * sdpa / now:.2f} of the ideal"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 64)
