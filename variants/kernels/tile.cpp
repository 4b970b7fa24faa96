// The compiled tile kernel of attnbench.variants.kernels.tile (its docstring says what and
// why), built on first use by attnbench.variants.kernels.compiled.build.
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
constexpr int64_t R = 16;        // queries per tile: one per lane
constexpr int64_t MAX_D = 256;   // head dimension held transposed on the stack
constexpr int64_t FAR = int64_t(1) << 30;  // |lo|, |hi| beyond any position: no limit

struct Span {  // keys [start, start + len) of one head, each logit shifted by bias; within
  int64_t start;  // them key p is seen by query i when lo <= p - i <= hi
  int64_t len;
  float bias;
  int64_t lo;
  int64_t hi;
};

inline int32_t clamp32(int64_t x) { return int32_t(std::max(-FAR, std::min(FAR, x))); }

// lanes (rows r0 + lane, the first `rows` of them) that see key p: p - hi <= row <= p - lo
inline __mmask16 seen_by(int64_t p, int64_t r0, int64_t rows, int64_t lo, int64_t hi) {
  const __m512i row = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                         12, 13, 14, 15),
                                       _mm512_set1_epi32(int(r0)));
  const __mmask16 live = rows >= R ? __mmask16(0xFFFF) : __mmask16((1u << rows) - 1);
  return live & _mm512_cmpge_epi32_mask(row, _mm512_set1_epi32(clamp32(p - hi))) &
         _mm512_cmple_epi32_mask(row, _mm512_set1_epi32(clamp32(p - lo)));
}

// out rows [0, rows) (G 16-column groups from column c0) = inverse-scaled sum over the spans'
// keys of weight (key-major, R lanes a key) times value row
template <int G>
void mix_values(const float* P, const Span* spans, int64_t nspans, const float* V, int64_t c0,
                float* o, int64_t rows, int64_t dv, const float* inverse) {
  for (int64_t rg = 0; rg < rows; rg += 4) {
    __m512 acc[4][G];
    for (int a = 0; a < 4; ++a)
      for (int c = 0; c < G; ++c) acc[a][c] = _mm512_setzero_ps();
    const float* pj = P + rg;
    for (int64_t s = 0; s < nspans; ++s) {
      const float* v = V + spans[s].start * dv + c0;
      for (int64_t j = 0; j < spans[s].len; ++j, pj += R) {
        __m512 vv[G];
        for (int c = 0; c < G; ++c) vv[c] = _mm512_loadu_ps(v + j * dv + 16 * c);
        for (int a = 0; a < 4; ++a) {
          const __m512 pa = _mm512_set1_ps(pj[a]);
          for (int c = 0; c < G; ++c) acc[a][c] = _mm512_fmadd_ps(pa, vv[c], acc[a][c]);
        }
      }
    }
    for (int64_t a = 0; a < 4 && rg + a < rows; ++a) {
      const __m512 s = _mm512_set1_ps(inverse[rg + a]);
      for (int c = 0; c < G; ++c)
        _mm512_storeu_ps(o + (rg + a) * dv + c0 + 16 * c, _mm512_mul_ps(acc[a][c], s));
    }
  }
}

// per-thread scratch: the tile's queries transposed and scaled, its scores, its spans
struct Scratch {
  alignas(64) float qt[MAX_D * R];
  std::vector<float> S;
  std::vector<Span> spans;
};

// softmax attention of query rows r0 .. r0 + rows - 1 (rows <= R) of one head over `spans`
// of its keys (w.spans); writes the rows of O and LSE
void attend_tile(const float* Q, const float* K, const float* V, int64_t D, int64_t DV,
                 int64_t r0, int64_t rows, float scale, Scratch& w, float* O, float* LSE) {
  // keep the parts of spans some row can see: p in [r0 + lo, r0 + rows - 1 + hi]
  int64_t total = 0, kept = 0;
  for (const Span& s : w.spans) {
    const int64_t a = std::max(s.start, r0 + s.lo);
    const int64_t b = std::min(s.start + s.len, r0 + rows - 1 + s.hi + 1);
    if (b > a) {
      w.spans[kept++] = Span{a, b - a, s.bias, s.lo, s.hi};
      total += b - a;
    }
  }
  if (int64_t(w.S.size()) < total * R) w.S.resize(total * R);
  float* S = w.S.data();
  const float* q0 = Q + r0 * D;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d = 0; d < D; ++d) w.qt[d * R + r] = r < rows ? q0[r * D + d] * scale : 0.f;
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mx = ninf;
  int64_t at = 0;  // keys scored so far
  for (int64_t s = 0; s < kept; ++s) {
    const Span sp = w.spans[s];
    const __m512 bias = _mm512_set1_ps(sp.bias);
    const float* kb = K + sp.start * D;
    int64_t j = 0;
    for (; j + 4 <= sp.len; j += 4) {  // four keys at a time: one load of q per four FMAs
      __m512 a[4] = {bias, bias, bias, bias};
      const float* k0 = kb + j * D;
      for (int64_t d = 0; d < D; ++d) {
        const __m512 qd = _mm512_load_ps(w.qt + d * R);
        for (int t = 0; t < 4; ++t)
          a[t] = _mm512_fmadd_ps(qd, _mm512_set1_ps(k0[t * D + d]), a[t]);
      }
      for (int t = 0; t < 4; ++t) {
        const __mmask16 m = seen_by(sp.start + j + t, r0, rows, sp.lo, sp.hi);
        const __m512 sc = _mm512_mask_blend_ps(m, ninf, a[t]);
        _mm512_storeu_ps(S + (at + j + t) * R, sc);
        mx = _mm512_max_ps(mx, sc);
      }
    }
    for (; j < sp.len; ++j) {
      __m512 a = bias;
      const float* k0 = kb + j * D;
      for (int64_t d = 0; d < D; ++d)
        a = _mm512_fmadd_ps(_mm512_load_ps(w.qt + d * R), _mm512_set1_ps(k0[d]), a);
      const __m512 sc =
          _mm512_mask_blend_ps(seen_by(sp.start + j, r0, rows, sp.lo, sp.hi), ninf, a);
      _mm512_storeu_ps(S + (at + j) * R, sc);
      mx = _mm512_max_ps(mx, sc);
    }
    at += sp.len;
  }
  // lanes without a key: a finite maximum, so exp(-inf - max) = 0 and the sum stays 0
  mx = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ), mx, _mm512_setzero_ps());
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < total; ++j) {
    const __m512 e = Vec(_mm512_sub_ps(_mm512_loadu_ps(S + j * R), mx)).exp_u20();
    _mm512_storeu_ps(S + j * R, e);
    sum = _mm512_add_ps(sum, e);
  }
  alignas(64) float inverse[R], row_max[R], row_sum[R];
  const __mmask16 some = _mm512_cmp_ps_mask(sum, _mm512_setzero_ps(), _CMP_GT_OQ);
  _mm512_store_ps(inverse, _mm512_maskz_div_ps(some, _mm512_set1_ps(1.f), sum));
  _mm512_store_ps(row_max, mx);
  _mm512_store_ps(row_sum, sum);
  for (int64_t r = 0; r < rows; ++r)
    LSE[r0 + r] = row_sum[r] > 0.f ? row_max[r] + std::log(row_sum[r])
                                   : -std::numeric_limits<float>::infinity();
  for (int64_t c0 = 0; c0 < DV; c0 += 64) {
    float* o = O + r0 * DV;
    const Span* sp = w.spans.data();
    switch (std::min<int64_t>(4, (DV - c0) / 16)) {  // compile-time widths: registers
      case 4: mix_values<4>(S, sp, kept, V, c0, o, rows, DV, inverse); break;
      case 3: mix_values<3>(S, sp, kept, V, c0, o, rows, DV, inverse); break;
      case 2: mix_values<2>(S, sp, kept, V, c0, o, rows, DV, inverse); break;
      default: mix_values<1>(S, sp, kept, V, c0, o, rows, DV, inverse); break;
    }
  }
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
              v.scalar_type() == at::kFloat, "the tile kernel takes float32");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && k.size(0) == q.size(0) &&
              k.size(2) == q.size(2) && v.size(0) == q.size(0) && v.size(1) == k.size(1),
              "the tile kernel takes q (BH, N, D), k (BH, M, D), v (BH, M, Dv)");
  TORCH_CHECK(q.size(2) <= MAX_D && v.size(2) % 16 == 0, "the tile kernel: D <= 256, Dv % 16 == 0");
}

// query i sees the band [i - before, i + after] and, for stride > 0, the keys i - t * stride
// (and i + t * stride unless causal) for t >= first (Sparse Transformer's strided pattern with
// few dilated keys): each dilated offset is one span whose lane rule is that single diagonal
std::tuple<at::Tensor, at::Tensor> banded_forward(at::Tensor q, at::Tensor k, at::Tensor v,
                                                  int64_t before, int64_t after, int64_t stride,
                                                  int64_t first, bool causal, double scale) {
  check_inputs(q, k, v);
  TORCH_CHECK(k.size(1) == q.size(1) && stride >= 0 && first > 0, "banded_forward: N = M");
  q = q.contiguous(); k = k.contiguous(); v = v.contiguous();
  const int64_t BH = q.size(0), N = q.size(1), D = q.size(2), DV = v.size(2);
  auto out = at::empty({BH, N, DV}, q.options());
  auto lse = at::empty({BH, N}, q.options());
  const int64_t tiles = (N + R - 1) / R;
#pragma omp parallel num_threads(at::get_num_threads())
  {
    Scratch w;
#pragma omp for schedule(static)
    for (int64_t task = 0; task < BH * tiles; ++task) {
      const int64_t bh = task / tiles, r0 = (task % tiles) * R;
      const int64_t rows = std::min<int64_t>(R, N - r0);
      const int64_t p0 = std::max<int64_t>(0, r0 - before);
      const int64_t p1 = std::min<int64_t>(N, r0 + rows + after);
      w.spans.assign(1, Span{p0, p1 - p0, 0.f, -before, after});
      for (int64_t o = first * stride; stride > 0 && o < N; o += stride) {  // keys i - o, i + o
        for (const int64_t shift : {-o, o}) {
          if (causal && shift > 0) continue;
          const int64_t a = std::max<int64_t>(0, r0 + shift);
          const int64_t b = std::min<int64_t>(N, r0 + rows + shift);
          if (b > a) w.spans.push_back(Span{a, b - a, 0.f, shift, shift});
        }
      }
      attend_tile(q.data_ptr<float>() + bh * N * D, k.data_ptr<float>() + bh * N * D,
                  v.data_ptr<float>() + bh * N * DV, D, DV, r0, rows, float(scale), w,
                  out.data_ptr<float>() + bh * N * DV, lse.data_ptr<float>() + bh * N);
    }
  }
  return {out, lse};
}

// query block c (rows [c * block, (c + 1) * block)) of head bh sees the key blocks
// key_blocks[bh % Hk][c] (-1: none), each shifted by bias[bh % Hk][c] (if bias is not empty),
// key p seen by query i when lo <= p - i <= hi
std::tuple<at::Tensor, at::Tensor> blocks_forward(at::Tensor q, at::Tensor k, at::Tensor v,
                                                  at::Tensor key_blocks, at::Tensor bias,
                                                  int64_t block, int64_t lo, int64_t hi,
                                                  double scale) {
  check_inputs(q, k, v);
  const int64_t BH = q.size(0), N = q.size(1), M = k.size(1), D = q.size(2), DV = v.size(2);
  const int64_t nbq = (N + block - 1) / block;
  TORCH_CHECK(key_blocks.dim() == 3 && key_blocks.size(1) == nbq &&
              key_blocks.scalar_type() == at::kLong && BH % key_blocks.size(0) == 0,
              "blocks_forward: key_blocks (Hk, ceil(N / block), K) int64, Hk dividing BH");
  const bool has_bias = bias.numel() > 0;
  TORCH_CHECK(!has_bias || (bias.sizes() == key_blocks.sizes() &&
                            bias.scalar_type() == at::kFloat),
              "blocks_forward: bias float32 of key_blocks' shape, or empty");
  q = q.contiguous(); k = k.contiguous(); v = v.contiguous();
  key_blocks = key_blocks.contiguous();
  if (has_bias) bias = bias.contiguous();
  const int64_t HK = key_blocks.size(0), KB = key_blocks.size(2);
  const int64_t* lists = key_blocks.data_ptr<int64_t>();
  const float* shifts = has_bias ? bias.data_ptr<float>() : nullptr;
  auto out = at::empty({BH, N, DV}, q.options());
  auto lse = at::empty({BH, N}, q.options());
  const int64_t per_block = (block + R - 1) / R;  // tiles of a query block (the last may be short)
  const int64_t tasks = BH * nbq * per_block;
#pragma omp parallel num_threads(at::get_num_threads())
  {
    Scratch w;
#pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t bh = task / (nbq * per_block);
      const int64_t c = (task / per_block) % nbq, t = task % per_block;
      const int64_t r0 = c * block + t * R;
      const int64_t rows = std::min(std::min<int64_t>(R, (c + 1) * block - r0), N - r0);
      if (rows <= 0) continue;
      const int64_t row = ((bh % HK) * nbq + c) * KB;
      w.spans.clear();
      for (int64_t j = 0; j < KB; ++j) {
        const int64_t kb = lists[row + j];
        if (kb < 0 || kb * block >= M) continue;
        w.spans.push_back(Span{kb * block, std::min(block, M - kb * block),
                               has_bias ? shifts[row + j] : 0.f, lo, hi});
      }
      attend_tile(q.data_ptr<float>() + bh * N * D, k.data_ptr<float>() + bh * M * D,
                  v.data_ptr<float>() + bh * M * DV, D, DV, r0, rows, float(scale), w,
                  out.data_ptr<float>() + bh * N * DV, lse.data_ptr<float>() + bh * N);
    }
  }
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY(attnbench_tiles, m) {
  m.def("banded_forward(Tensor q, Tensor k, Tensor v, int before, int after, int stride,"
        " int first, bool causal, float scale) -> (Tensor, Tensor)");
  m.def("blocks_forward(Tensor q, Tensor k, Tensor v, Tensor key_blocks, Tensor bias,"
        " int block, int lo, int hi, float scale) -> (Tensor, Tensor)");
  m.impl("banded_forward", c10::DispatchKey::CPU, TORCH_FN(banded_forward));
  m.impl("blocks_forward", c10::DispatchKey::CPU, TORCH_FN(blocks_forward));
}
