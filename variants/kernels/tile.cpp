// The compiled tile kernel of attnbench.variants.kernels.tile (its docstring says what and
// why), built on first use by attnbench.variants.kernels.compiled.build.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace {

// at::vec's float vector for the capability this file is built for (compiled.capability_flags):
// 16 lanes on AVX-512, 8 on AVX2, 4 on NEON, an 8-float array the compiler vectorises elsewhere
using Vec = at::vec::Vectorized<float>;
constexpr int64_t W = Vec::size();
constexpr int64_t R = 16;        // queries per tile: one per lane, NV vectors of W lanes
constexpr int64_t NV = R / W;
static_assert(R % W == 0, "a tile is a whole number of vectors");
constexpr int KEYS = 4;          // keys scored together: one load of the queries per KEYS FMAs
// value columns mixed per pass: G vectors of W columns for each of 4 query rows, 4 * G
// accumulators (16 of AVX-512's or NEON's 32 registers, 8 of AVX2's 16)
constexpr int G_MAX = W == 8 ? 2 : 4;
constexpr int64_t MAX_D = 256;   // head dimension held transposed on the stack
constexpr int64_t FAR = int64_t(1) << 30;  // |lo|, |hi| beyond any position: no limit

struct Span {  // keys [start, start + len) of one head, each logit shifted by bias; within
  int64_t start;  // them key p is seen by query i when lo <= p - i <= hi
  int64_t len;
  float bias;
  int64_t lo;
  int64_t hi;
  // where given, key p's logit in lane r is shifted instead by the float-float pair
  // (hi[p - start] + row_hi[r]) + (lo[p - start] + row_lo[r]) (Scratch): a per-pair bias
  // whose two halves nearly cancel, summed without losing the low half (forget_forward)
  const float* key_hi = nullptr;
  const float* key_lo = nullptr;
};

// store the scores `acc` of key p for the tile's lanes (rows r0 + lane), -inf in the lanes that
// do not see it (p - hi <= row <= p - lo, row < r0 + rows), and fold them into the row maxima
inline void keep_seen(const Vec* acc, int64_t p, int64_t r0, int64_t rows, int64_t lo,
                      int64_t hi, const Vec* lane, float* dst, Vec* mx) {
  const int64_t a = std::max<int64_t>(0, p - hi - r0);          // first lane that sees p
  const int64_t b = std::min<int64_t>(rows - 1, p - lo - r0);   // last lane that sees p
  if (a == 0 && b == R - 1) {  // every lane (inside a band): no mask
    for (int64_t v = 0; v < NV; ++v) {
      acc[v].store(dst + v * W);
      mx[v] = at::vec::maximum(mx[v], acc[v]);
    }
    return;
  }
  const Vec ninf(-std::numeric_limits<float>::infinity());
  const Vec first(float(std::min<int64_t>(a, R))), last(float(std::max<int64_t>(b, -1)));
  for (int64_t v = 0; v < NV; ++v) {
    const Vec sc = Vec::blendv(ninf, acc[v], (lane[v] >= first) & (lane[v] <= last));
    sc.store(dst + v * W);
    mx[v] = at::vec::maximum(mx[v], sc);
  }
}

// out rows [0, rows) (G W-column groups from column c0) = inverse-scaled sum over the spans'
// keys of weight (key-major, R lanes a key) times value row
template <int G>
void mix_values(const float* P, const Span* spans, int64_t nspans, const float* V, int64_t vs,
                int64_t c0, float* o, int64_t os, int64_t rows, const float* inverse) {
  for (int64_t rg = 0; rg < rows; rg += 4) {
    Vec acc[4][G];
    for (int a = 0; a < 4; ++a)
      for (int c = 0; c < G; ++c) acc[a][c] = Vec(0.f);
    const float* pj = P + rg;
    for (int64_t s = 0; s < nspans; ++s) {
      const float* v = V + spans[s].start * vs + c0;
      for (int64_t j = 0; j < spans[s].len; ++j, pj += R) {
        Vec vv[G];
        for (int c = 0; c < G; ++c) vv[c] = Vec::loadu(v + j * vs + W * c);
        for (int a = 0; a < 4; ++a) {
          const Vec pa(pj[a]);
          for (int c = 0; c < G; ++c) acc[a][c] = at::vec::fmadd(pa, vv[c], acc[a][c]);
        }
      }
    }
    for (int64_t a = 0; a < 4 && rg + a < rows; ++a) {
      const Vec s(inverse[rg + a]);
      for (int c = 0; c < G; ++c) (acc[a][c] * s).store(o + (rg + a) * os + c0 + W * c);
    }
  }
}

// per-thread scratch: the tile's queries transposed and scaled, its scores, its spans
struct Scratch {
  alignas(64) float qt[MAX_D * R];
  std::vector<float> S;
  std::vector<Span> spans;
  Vec lane[NV];  // lane indices 0 .. R - 1 as floats, NV vectors
  Vec row_hi[NV], row_lo[NV];  // the lanes' halves of a per-pair bias (Span::key_hi)
  Scratch() {
    alignas(64) float idx[R];
    for (int64_t r = 0; r < R; ++r) idx[r] = float(r);
    for (int64_t v = 0; v < NV; ++v) lane[v] = Vec::loadu(idx + v * W);
  }
};

// One head's rows, each `stride` floats after the previous (a head's rows are contiguous, a
// residue class's rows `s` positions apart)
struct Rows {
  const float* base;
  int64_t stride;
  const float* row(int64_t p) const { return base + p * stride; }
};

// softmax attention of query rows r0 .. r0 + rows - 1 (rows <= R) of one head over `spans`
// of its keys (w.spans); writes the tile's rows of O (row r at O + r * os) and LSE (LSE[r])
void attend_tile(Rows Q, Rows K, Rows V, int64_t D, int64_t DV, int64_t r0, int64_t rows,
                 float scale, Scratch& w, float* O, int64_t os, float* LSE) {
  // keep the parts of spans some row can see: p in [r0 + lo, r0 + rows - 1 + hi]
  int64_t total = 0, kept = 0;
  for (const Span& s : w.spans) {
    const int64_t a = std::max(s.start, r0 + s.lo);
    const int64_t b = std::min(s.start + s.len, r0 + rows - 1 + s.hi + 1);
    if (b > a) {
      const int64_t skip = a - s.start;
      w.spans[kept++] = Span{a, b - a, s.bias, s.lo, s.hi, s.key_hi ? s.key_hi + skip : nullptr,
                             s.key_lo ? s.key_lo + skip : nullptr};
      total += b - a;
    }
  }
  if (int64_t(w.S.size()) < total * R) w.S.resize(total * R);
  float* S = w.S.data();
  for (int64_t r = 0; r < R; ++r) {
    const float* qr = r < rows ? Q.row(r0 + r) : nullptr;
    for (int64_t d = 0; d < D; ++d) w.qt[d * R + r] = qr ? qr[d] * scale : 0.f;
  }
  const float inf = std::numeric_limits<float>::infinity();
  Vec mx[NV];
  for (int64_t v = 0; v < NV; ++v) mx[v] = Vec(-inf);
  int64_t at = 0;  // keys scored so far
  for (int64_t s = 0; s < kept; ++s) {
    const Span sp = w.spans[s];
    const Vec bias(sp.bias);
    const float* kb = K.row(sp.start);
    const int64_t ks = K.stride;
    int64_t j = 0;
    for (; j + KEYS <= sp.len; j += KEYS) {  // KEYS keys at a time: one load of q per KEYS FMAs
      Vec a[KEYS][NV];
      for (int t = 0; t < KEYS; ++t)
        for (int64_t v = 0; v < NV; ++v) a[t][v] = bias;
      if (sp.key_hi)
        for (int t = 0; t < KEYS; ++t)
          for (int64_t v = 0; v < NV; ++v)
            a[t][v] = (Vec(sp.key_hi[j + t]) + w.row_hi[v]) + (Vec(sp.key_lo[j + t]) + w.row_lo[v]);
      const float* k0 = kb + j * ks;
      for (int64_t d = 0; d < D; ++d) {
        Vec qd[NV];
        for (int64_t v = 0; v < NV; ++v) qd[v] = Vec::loadu(w.qt + d * R + v * W);
        for (int t = 0; t < KEYS; ++t) {
          const Vec kd(k0[t * ks + d]);
          for (int64_t v = 0; v < NV; ++v) a[t][v] = at::vec::fmadd(qd[v], kd, a[t][v]);
        }
      }
      for (int t = 0; t < KEYS; ++t)
        keep_seen(a[t], sp.start + j + t, r0, rows, sp.lo, sp.hi, w.lane, S + (at + j + t) * R,
                  mx);
    }
    for (; j < sp.len; ++j) {
      Vec a[NV];
      for (int64_t v = 0; v < NV; ++v)
        a[v] = sp.key_hi ? (Vec(sp.key_hi[j]) + w.row_hi[v]) + (Vec(sp.key_lo[j]) + w.row_lo[v])
                         : bias;
      const float* k0 = kb + j * ks;
      for (int64_t d = 0; d < D; ++d) {
        const Vec kd(k0[d]);
        for (int64_t v = 0; v < NV; ++v)
          a[v] = at::vec::fmadd(Vec::loadu(w.qt + d * R + v * W), kd, a[v]);
      }
      keep_seen(a, sp.start + j, r0, rows, sp.lo, sp.hi, w.lane, S + (at + j) * R, mx);
    }
    at += sp.len;
  }
  // lanes without a key: a finite maximum, so exp(-inf - max) = 0 and the sum stays 0
  Vec sum[NV];
  for (int64_t v = 0; v < NV; ++v) {
    mx[v] = Vec::blendv(mx[v], Vec(0.f), mx[v] == Vec(-inf));
    sum[v] = Vec(0.f);
  }
  for (int64_t j = 0; j < total; ++j) {
    for (int64_t v = 0; v < NV; ++v) {
      float* x = S + j * R + v * W;
      const Vec e = (Vec::loadu(x) - mx[v]).exp_u20();
      e.store(x);
      sum[v] = sum[v] + e;
    }
  }
  alignas(64) float inverse[R], row_max[R], row_sum[R];
  for (int64_t v = 0; v < NV; ++v) {
    mx[v].store(row_max + v * W);
    sum[v].store(row_sum + v * W);
  }
  for (int64_t r = 0; r < R; ++r) inverse[r] = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
  for (int64_t r = 0; r < rows; ++r)
    LSE[r] = row_sum[r] > 0.f ? row_max[r] + std::log(row_sum[r]) : -inf;
  constexpr int64_t PASS = G_MAX * W;  // value columns per pass
  for (int64_t c0 = 0; c0 < DV; c0 += PASS) {
    const Span* sp = w.spans.data();
    const float* v = V.base;
    const int64_t vs = V.stride;
    switch (std::min<int64_t>(G_MAX, (DV - c0) / W)) {  // compile-time widths: registers
      case 4: mix_values<4>(S, sp, kept, v, vs, c0, O, os, rows, inverse); break;
      case 3: mix_values<3>(S, sp, kept, v, vs, c0, O, os, rows, inverse); break;
      case 2: mix_values<2>(S, sp, kept, v, vs, c0, O, os, rows, inverse); break;
      default: mix_values<1>(S, sp, kept, v, vs, c0, O, os, rows, inverse); break;
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
      attend_tile(Rows{q.data_ptr<float>() + bh * N * D, D},
                  Rows{k.data_ptr<float>() + bh * N * D, D},
                  Rows{v.data_ptr<float>() + bh * N * DV, DV}, D, DV, r0, rows, float(scale), w,
                  out.data_ptr<float>() + (bh * N + r0) * DV, DV,
                  lse.data_ptr<float>() + bh * N + r0);
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
      attend_tile(Rows{q.data_ptr<float>() + bh * N * D, D},
                  Rows{k.data_ptr<float>() + bh * M * D, D},
                  Rows{v.data_ptr<float>() + bh * M * DV, DV}, D, DV, r0, rows, float(scale), w,
                  out.data_ptr<float>() + (bh * N + r0) * DV, DV,
                  lse.data_ptr<float>() + bh * N + r0);
    }
  }
  return {out, lse};
}

// x as a float-float pair: hi = x rounded, lo = what rounding lost (x = hi + lo to ~2^-48)
inline void split(double x, float& hi, float& lo) {
  hi = float(x);
  lo = float(x - double(hi));
}

// Forgetting attention (FoX): query i sees key p with its logit shifted by c_i - c_p, c (BH, M)
// the float64 cumulative log forget gates; causal: keys p <= min(i, M - 1), with c_{min(i, M-1)};
// else every key, with c_{M-1} for every query. A tile's keys carry c_ref - c_p and its lanes
// c_i - c_ref (ref: its last row), each as a float-float pair summed by halves: every pair's
// shift is c_i - c_p to float32 rounding of its own size, small for the keys that carry
// weight, however far c has fallen
at::Tensor forget_forward(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor cum, bool causal,
                          double scale) {
  check_inputs(q, k, v);
  TORCH_CHECK(cum.scalar_type() == at::kDouble && cum.dim() == 2 && cum.size(0) == q.size(0) &&
              cum.size(1) == k.size(1), "forget_forward: cum (BH, M) float64");
  q = q.contiguous(); k = k.contiguous(); v = v.contiguous(); cum = cum.contiguous();
  const int64_t BH = q.size(0), N = q.size(1), M = k.size(1), D = q.size(2), DV = v.size(2);
  auto out = at::empty({BH, N, DV}, q.options());
  const int64_t tiles = (N + R - 1) / R;
  const double* C = cum.data_ptr<double>();
#pragma omp parallel num_threads(at::get_num_threads())
  {
    Scratch w;
    std::vector<float> key_hi(M), key_lo(M);
    alignas(64) float lse[R], rh[R], rl[R];
#pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < BH * tiles; ++task) {
      const int64_t bh = task / tiles, r0 = (task % tiles) * R;
      const int64_t rows = std::min<int64_t>(R, N - r0);
      const int64_t len = causal ? std::min<int64_t>(M, r0 + rows) : M;
      const double* c = C + bh * M;
      const double ref = c[len - 1];
      for (int64_t p = 0; p < len; ++p) split(ref - c[p], key_hi[p], key_lo[p]);
      for (int64_t r = 0; r < R; ++r) {
        const int64_t row = std::min<int64_t>(r0 + std::min<int64_t>(r, rows - 1), M - 1);
        split(causal ? c[row] - ref : 0.0, rh[r], rl[r]);
      }
      for (int64_t u = 0; u < NV; ++u) {
        w.row_hi[u] = Vec::loadu(rh + u * W);
        w.row_lo[u] = Vec::loadu(rl + u * W);
      }
      w.spans.assign(1, Span{0, len, 0.f, -FAR, causal ? 0 : FAR, key_hi.data(), key_lo.data()});
      attend_tile(Rows{q.data_ptr<float>() + bh * N * D, D},
                  Rows{k.data_ptr<float>() + bh * M * D, D},
                  Rows{v.data_ptr<float>() + bh * M * DV, DV}, D, DV, r0, rows, float(scale), w,
                  out.data_ptr<float>() + (bh * N + r0) * DV, DV, lse);
    }
  }
  return out;
}

// Sparse Transformer's dilated keys, merged into a result over other keys: query i also sees
// the keys i - t * s for t >= gap (and i + t * s unless causal). `out` and `lse` (BH, N, Dv)
// and (BH, N) hold softmax attention over the other keys (the local band: `banded_forward`)
// with its row log-sum-exp, and become attention over both. The dilated keys of a query are its
// residue class modulo s, so a tile is R queries of one class (rows s positions apart, read in
// place: no regrouping copy) over a span of the class's rows, and each tile's rows are merged
// into out and lse by their log-sum-exps as they are computed (no merge pass over the sequence)
void dilated_merge_(at::Tensor out, at::Tensor lse, at::Tensor q, at::Tensor k, at::Tensor v,
                    int64_t s, int64_t gap, bool causal, double scale) {
  check_inputs(q, k, v);
  TORCH_CHECK(k.size(1) == q.size(1) && s >= 1 && gap >= 1, "dilated_merge_: N = M, s, gap >= 1");
  TORCH_CHECK(out.is_contiguous() && lse.is_contiguous() && out.scalar_type() == at::kFloat &&
                  lse.scalar_type() == at::kFloat && out.size(0) == q.size(0) &&
                  out.size(1) == q.size(1) && out.size(2) == v.size(2) &&
                  lse.numel() == q.size(0) * q.size(1),
              "dilated_merge_: out (BH, N, Dv) and lse (BH, N), contiguous float32");
  TORCH_CHECK(v.size(2) <= 256, "dilated_merge_: Dv <= 256");
  q = q.contiguous(); k = k.contiguous(); v = v.contiguous();
  const int64_t BH = q.size(0), N = q.size(1), D = q.size(2), DV = v.size(2);
  const int64_t classes = std::min(s, N), per_class = (N + s - 1) / s;  // class 0 is longest
  const int64_t tiles = (per_class + R - 1) / R;
  const float inf = std::numeric_limits<float>::infinity();
  float* O = out.data_ptr<float>();
  float* L = lse.data_ptr<float>();
#pragma omp parallel num_threads(at::get_num_threads())
  {
    Scratch w;
    alignas(64) float part[R * 256 + R];  // the tile's own rows (Dv <= 256) and log-sum-exps
#pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < BH * classes * tiles; ++task) {
      const int64_t bh = task / (classes * tiles), r = (task / tiles) % classes;
      const int64_t r0 = (task % tiles) * R, rows_r = (N - r + s - 1) / s;
      const int64_t rows = std::min<int64_t>(R, rows_r - r0);
      if (rows <= 0) continue;
      w.spans.assign(1, Span{0, rows_r, 0.f, -FAR, -gap});  // class rows a' <= a - gap
      if (!causal) w.spans.push_back(Span{0, rows_r, 0.f, gap, FAR});  // and a' >= a + gap
      attend_tile(Rows{q.data_ptr<float>() + bh * N * D + r * D, s * D},
                  Rows{k.data_ptr<float>() + bh * N * D + r * D, s * D},
                  Rows{v.data_ptr<float>() + bh * N * DV + r * DV, s * DV}, D, DV, r0, rows,
                  float(scale), w, part, DV, part + R * 256);
      for (int64_t i = 0; i < rows; ++i) {
        const float mine = part[R * 256 + i];
        if (mine == -inf) continue;  // no dilated key: the other keys' result stands
        const int64_t p = bh * N + (r0 + i) * s + r;
        const float theirs = L[p];
        const float top = std::max(theirs, mine);
        const float a = theirs == -inf ? 0.f : std::exp(theirs - top), b = std::exp(mine - top);
        const float total = a + b;
        const Vec va(a / total), vb(b / total);
        float* o = O + p * DV;
        const float* m = part + i * DV;
        int64_t c = 0;
        for (; c + W <= DV; c += W)
          at::vec::fmadd(Vec::loadu(o + c), va, Vec::loadu(m + c) * vb).store(o + c);
        for (; c < DV; ++c) o[c] = o[c] * (a / total) + m[c] * (b / total);
        L[p] = top + std::log(total);
      }
    }
  }
}

}  // namespace

TORCH_LIBRARY(attnbench_tiles, m) {
  m.def("banded_forward(Tensor q, Tensor k, Tensor v, int before, int after, int stride,"
        " int first, bool causal, float scale) -> (Tensor, Tensor)");
  m.def("blocks_forward(Tensor q, Tensor k, Tensor v, Tensor key_blocks, Tensor bias,"
        " int block, int lo, int hi, float scale) -> (Tensor, Tensor)");
  m.impl("banded_forward", c10::DispatchKey::CPU, TORCH_FN(banded_forward));
  m.impl("blocks_forward", c10::DispatchKey::CPU, TORCH_FN(blocks_forward));
  m.def("dilated_merge_(Tensor(a!) out, Tensor(b!) lse, Tensor q, Tensor k, Tensor v, int s,"
        " int gap, bool causal, float scale) -> ()");
  m.impl("dilated_merge_", c10::DispatchKey::CPU, TORCH_FN(dilated_merge_));
  m.def("forget_forward(Tensor q, Tensor k, Tensor v, Tensor cum, bool causal, float scale)"
        " -> Tensor");
  m.impl("forget_forward", c10::DispatchKey::CPU, TORCH_FN(forget_forward));
}
