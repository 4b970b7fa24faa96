// The compiled pointwise-attention kernel of attnbench.variants.kernels.pointwise (its docstring
// says what and why), built on first use by attnbench.variants.kernels.compiled.build.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

// BLAS's single-precision GEMM (column-major, 32-bit sizes), which torch's CPU library exports
// where it links MKL; weak, so that a torch without it loads this file and says so (`has_gemm`)
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc) __attribute__((weak));

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t W = Vec::size();

enum Kind : int64_t { RELU2 = 0, SIGMOID = 1 };

// row-major C (m x n, ld ldc) = A (m x k, ld lda) times B, where B is (k x n, ld ldb) or, with
// b_rows_are_columns, given as its transpose (n x k, ld ldb); C += when accumulate
void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, bool b_rows_are_columns, float* c, int64_t ldc, bool accumulate) {
  // column-major view: C^T (n x m) = op(B)^T (n x k) A^T (k x m)
  const int mm = int(n), nn = int(m), kk = int(k), la = int(ldb), lb = int(lda), lc = int(ldc);
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const char ta = b_rows_are_columns ? 'T' : 'N', tb = 'N';
  sgemm_(&ta, &tb, &mm, &nn, &kk, &one, b, &la, a, &lb, &beta, c, &lc);
}

// x[0, len) = f(scale * x + shift) for the first `seen` entries, 0 after them
template <int64_t KIND>
inline void weigh(float* x, int64_t len, int64_t seen, float scale, float shift) {
  const Vec vs(scale), vb(shift), zero(0.0f), one(1.0f);
  int64_t j = 0;
  for (; j + W <= seen; j += W) {
    const Vec s = at::vec::fmadd(Vec::loadu(x + j), vs, vb);
    Vec w;
    if constexpr (KIND == RELU2) {
      const Vec r = at::vec::maximum(s, zero);
      w = r * r;
    } else {
      w = (one + s.neg().exp_u20()).reciprocal();
    }
    w.store(x + j);
  }
  for (; j < seen; ++j) {
    const float s = x[j] * scale + shift;
    if constexpr (KIND == RELU2) {
      const float r = s > 0.0f ? s : 0.0f;
      x[j] = r * r;
    } else {
      x[j] = 1.0f / (1.0f + std::exp(-s));
    }
  }
  std::fill(x + std::max<int64_t>(seen, 0), x + len, 0.0f);
}

// out (BH, N, Dv) = sum over keys j of f(scale * q_i . k_j + shift) v_j; causal: j <= i
template <int64_t KIND>
void run(const float* q, const float* k, const float* v, float* out, int64_t bh, int64_t n,
         int64_t m, int64_t d, int64_t dv, float scale, float shift, bool causal, int64_t qb,
         int64_t kb) {
  const int64_t blocks = (n + qb - 1) / qb;
  at::parallel_for(0, bh * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(qb * kb);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t h = task / blocks, s = (task % blocks) * qb;
      const int64_t rows = std::min(qb, n - s);
      const int64_t keys = causal ? std::min(m, s + rows) : m;
      const float* qh = q + (h * n + s) * d;
      const float* kh = k + h * m * d;
      const float* vh = v + h * m * dv;
      float* o = out + (h * n + s) * dv;
      if (keys == 0) std::fill(o, o + rows * dv, 0.0f);
      for (int64_t ks = 0; ks < keys; ks += kb) {
        const int64_t cols = std::min(kb, keys - ks);
        float* sc = scores.data();
        gemm_rows(rows, cols, d, qh, d, kh + ks * d, d, true, sc, cols, false);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t seen = causal ? std::min(cols, s + r + 1 - ks) : cols;
          weigh<KIND>(sc + r * cols, cols, seen, scale, shift);
        }
        gemm_rows(rows, dv, cols, sc, cols, vh + ks * dv, dv, false, o, dv, ks > 0);
      }
    }
  });
}

bool has_gemm() { return sgemm_ != nullptr; }

at::Tensor pointwise_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             int64_t kind, double scale, double shift, bool causal, int64_t qb,
                             int64_t kb) {
  TORCH_CHECK(has_gemm(), "pointwise_forward: this torch exports no sgemm_");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  v.scalar_type() == at::kFloat,
              "pointwise_forward takes float32");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "pointwise_forward: (BH, N, D)");
  TORCH_CHECK(qb >= 1 && kb >= 1, "pointwise_forward: tiles of at least one row");
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const int64_t bh = q.size(0), n = q.size(1), d = q.size(2), m = k.size(1), dv = v.size(2);
  auto out = at::empty({bh, n, dv}, q.options());
  const auto body = kind == RELU2 ? run<RELU2> : run<SIGMOID>;
  body(qc.data_ptr<float>(), kc.data_ptr<float>(), vc.data_ptr<float>(), out.data_ptr<float>(),
       bh, n, m, d, dv, float(scale), float(shift), causal, qb, kb);
  return out;
}

}  // namespace

TORCH_LIBRARY(attnbench_pointwise, m) {
  m.def("has_gemm() -> bool", TORCH_FN(has_gemm));
  m.def(
      "pointwise_forward(Tensor q, Tensor k, Tensor v, int kind, float scale, float shift, "
      "bool causal, int qb, int kb) -> Tensor");
  m.impl("pointwise_forward", c10::DispatchKey::CPU, TORCH_FN(pointwise_forward));
}
