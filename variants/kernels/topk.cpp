// topk's compiled CPU kernel, of attnbench.variants.kernels.topk (its docstring says what and
// why), built on first use by attnbench.variants.kernels.compiled.build.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
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
constexpr int64_t SAMPLE = 64;       // sample size of each bracket
constexpr int64_t DIRECT_BELOW = 64; // smaller sets: select_by_counting
constexpr double SPREAD = 3.0;        // bracket half-width, in sample-rank standard deviations
constexpr double INTERPOLATION_HALF_WIDTH = 0.125;  // of [lo, hi]: a quarter kept if uniform
constexpr int64_t SPARSE_PICKS = 4 * W;  // rows keeping at most 1 / this skip exp of empty vectors

float row_max(const float* x, int64_t len) {
  Vec acc(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + W <= len; i += W) acc = at::vec::maximum(acc, Vec::loadu(x + i));  // NaN propagates
  float lanes[W];
  acc.store(lanes);
  float best = lanes[0];
  for (int64_t j = 1; j < W; ++j)
    best = (std::isnan(lanes[j]) || lanes[j] > best) ? lanes[j] : best;
  for (; i < len; ++i) best = (std::isnan(x[i]) || x[i] > best) ? x[i] : best;
  return best;
}

// Scratch of one thread: two candidate buffers (ping-pong) and a sample.
struct Scratch {
  std::vector<float> a, b, sample;
  void fit(int64_t len) {
    if (int64_t(a.size()) < len + W) { a.resize(len + W); b.resize(len + W); }
  }
};

float nth_from_top(float* first, int64_t n, int64_t rank) {  // rank 0 = highest
  std::nth_element(first, first + rank, first + n, std::greater<float>());
  return first[rank];
}

// The rank-th highest (1 = highest) of a small set x[0, n), no NaN, by counting for each entry
// how many are greater and how many at least as great: about n^2 / (2 W) vector compares,
// branch-free, where nth_element on a few dozen floats mispredicts most of its branches.
float select_by_counting(const float* x, int64_t n, int64_t rank) {
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    int32_t above = 0, from = 0;  // plain loops: the compiler vectorises these counts
    for (int64_t j = 0; j < n; ++j) above += x[j] > xi;
    for (int64_t j = 0; j < n; ++j) from += x[j] >= xi;
    if (above < rank && rank <= from) return xi;
  }
  return x[0];  // not reached: some entry holds every rank
}

constexpr int ALL_LANES = (1 << W) - 1;

// the lanes of a comparison's result that hold true, as bits (at::vec's zero_mask: a portable
// movemask)
inline int lanes_of(const Vec& mask) { return ~mask.zero_mask() & ALL_LANES; }

#if defined(CPU_CAPABILITY_AVX2) && !defined(CPU_CAPABILITY_AVX512)
// AVX2 has no compress instruction: for each 8-bit lane mask, the permutation that moves the
// chosen lanes to the front, in order
struct CompressTable {
  alignas(32) int32_t index[256][8];
  constexpr CompressTable() : index{} {
    for (int bits = 0; bits < 256; ++bits) {
      int k = 0;
      for (int lane = 0; lane < 8; ++lane)
        if (bits >> lane & 1) index[bits][k++] = lane;
      for (; k < 8; ++k) index[bits][k] = 0;
    }
  }
};
constexpr CompressTable COMPRESS{};
#endif

// the lanes `bits` of v written to out[0, popcount) in order (out has W writable slots: the
// lanes past them may be overwritten with junk); returns how many. The one primitive at::vec
// lacks: AVX-512's compress, AVX2's permutation by a table of the 256 masks, elsewhere a
// branch-free copy of the W lanes
inline int64_t compress_store(const Vec& v, int bits, float* out) {
#if defined(CPU_CAPABILITY_AVX512)
  _mm512_storeu_ps(out, _mm512_maskz_compress_ps(__mmask16(bits), v));
  return __builtin_popcount(bits);
#elif defined(CPU_CAPABILITY_AVX2)
  const __m256i order = _mm256_load_si256(
      reinterpret_cast<const __m256i*>(COMPRESS.index[bits]));
  _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(v, order));
  return __builtin_popcount(bits);
#else
  float lanes[W];
  v.store(lanes);
  int64_t kept = 0;
  for (int64_t lane = 0; lane < W; ++lane) {
    out[kept] = lanes[lane];
    kept += (bits >> lane) & 1;
  }
  return kept;
#endif
}

// out <- the entries of x[0, n) in [lo, hi], packed; returns how many; *above <- how many > hi
int64_t bracket(const float* x, int64_t n, float lo, float hi, float* out, int64_t* above) {
  int64_t kept = 0, over = 0, i = 0;
  const Vec vlo(lo), vhi(hi);
  for (; i + W <= n; i += W) {
    const Vec v = Vec::loadu(x + i);
    const int gt = lanes_of(v > vhi);
    const int in = lanes_of(v >= vlo) & ~gt;
    over += __builtin_popcount(gt);
#if !defined(CPU_CAPABILITY_AVX512) && !defined(CPU_CAPABILITY_AVX2)
    if (in == 0) continue;  // the lane-by-lane copy: skip the vectors with nothing inside
#endif
    kept += compress_store(v, in, out + kept);  // out has W spare slots
  }
  for (; i < n; ++i) {  // branch-free: write always, advance when inside
    const float v = x[i];
    over += v > hi;
    out[kept] = v;
    kept += (v >= lo) & !(v > hi);
  }
  *above = over;
  return kept;
}

// The rank-th highest (1 = highest) of x[0, n), with no NaN in x, 1 <= rank <= n, and every
// entry within [lo, hi] (infinite where not known). Each level brackets the answer, packs the
// entries inside the bracket into the spare buffer (counting those above it) and recurses on
// them with the rank shifted. The bracket comes from interpolation when [lo, hi] is finite (a
// narrow range is nearly uniform: the answer sits near hi - (rank / n)(hi - lo)), else from a
// strided sample's order statistics about SPREAD standard deviations of the sample rank apart.
// A bracket that missed (the counts show it) is retried from the sample; a sample that missed
// ends in nth_element over the current set: exact either way.
float kth_highest(const float* x, int64_t n, int64_t rank, float lo, float hi, Scratch& s,
                  bool x_is_a) {
  float* spare = x_is_a ? s.b.data() : s.a.data();
  if (lo == hi) return lo;  // every entry equals it
  if (n <= DIRECT_BELOW) return select_by_counting(x, n, rank);
  int64_t above = 0, kept = 0;
  if (std::isfinite(lo) && std::isfinite(hi)) {
    const double width = double(hi) - double(lo);
    const double guess = double(hi) - width * (double(rank) - 0.5) / double(n);
    const float top = float(std::min<double>(hi, guess + INTERPOLATION_HALF_WIDTH * width));
    const float low = float(std::max<double>(lo, guess - INTERPOLATION_HALF_WIDTH * width));
    kept = bracket(x, n, low, top, spare, &above);
    if (above < rank && rank <= above + kept && kept < n)
      return kth_highest(spare, kept, rank - above, low, top, s, !x_is_a);
  }
  s.sample.resize(SAMPLE);
  const int64_t step = n / SAMPLE;  // n > DIRECT_BELOW >= SAMPLE: step >= 1
  for (int64_t j = 0; j < SAMPLE; ++j) s.sample[j] = x[j * step];
  const double p = double(rank) / double(n);
  const double expected = p * SAMPLE, spread = SPREAD * std::sqrt(SAMPLE * p * (1 - p)) + 1;
  const int64_t top_rank = int64_t(std::floor(expected - spread));
  const int64_t low_rank = int64_t(std::ceil(expected + spread));
  float* sample = s.sample.data();
  const float top = top_rank < 0 ? hi : select_by_counting(sample, SAMPLE, top_rank + 1);
  const float low = low_rank >= SAMPLE ? lo : select_by_counting(sample, SAMPLE, low_rank + 1);
  kept = bracket(x, n, low, top, spare, &above);
  if (above < rank && rank <= above + kept && kept < n)
    return kth_highest(spare, kept, rank - above, low, top, s, !x_is_a);
  std::copy(x, x + n, spare);  // the sample misled (or did not narrow): select over the set
  return nth_from_top(spare, n, rank - 1);
}

// row <- exp(scale * (row - max)) over its entries >= its picks-th highest, 0 elsewhere;
// returns their sum (NaN for a row with a NaN, then all NaN): the softmax once divided by it
float exp_of_top(float* x, int64_t len, int64_t picks, float scale, Scratch& scratch) {
  const float mx = row_max(x, len);
  if (std::isnan(mx)) {
    std::fill(x, x + len, std::numeric_limits<float>::quiet_NaN());
    return mx;
  }
  scratch.fit(len);
  const float inf = std::numeric_limits<float>::infinity();
  const float threshold = picks < len ? kth_highest(x, len, picks, -inf, mx, scratch, false)
                                      : -inf;
  const Vec vmx(mx), vscale(scale), vthreshold(threshold), zero(0.0f);
  // few picks (at most one a SPARSE_PICKS-th of the row): most vectors keep no lane and skip
  // their exp; otherwise the test would cost more than it saves (a mispredicted branch)
  const bool sparse = picks * SPARSE_PICKS <= len;
  Vec acc(0.0f);
  int64_t i = 0;
  for (; i + W <= len; i += W) {
    const Vec v = Vec::loadu(x + i);
    const Vec keep = v >= vthreshold;
    if (sparse && lanes_of(keep) == 0) {
      zero.store(x + i);
      continue;
    }
    const Vec e = Vec::blendv(zero, ((v - vmx) * vscale).exp_u20(), keep);
    e.store(x + i);
    acc += e;
  }
  float lanes[W];
  acc.store(lanes);
  float total = 0.0f;
  for (int64_t j = 0; j < W; ++j) total += lanes[j];
  for (; i < len; ++i) {
    x[i] = x[i] >= threshold ? std::exp((x[i] - mx) * scale) : 0.0f;
    total += x[i];
  }
  return total;
}

// row <- softmax(scale * row) over its entries >= its picks-th highest, 0 elsewhere
void softmax_of_top(float* x, int64_t len, int64_t picks, float scale, Scratch& scratch) {
  const float total = exp_of_top(x, len, picks, scale, scratch);
  if (std::isnan(total)) return;
  const Vec inverse(1.0f / total);
  int64_t i = 0;
  for (; i + W <= len; i += W) (Vec::loadu(x + i) * inverse).store(x + i);
  for (; i < len; ++i) x[i] /= total;
}

// x[0, len) *= factor
void scale_row(float* x, int64_t len, float factor) {
  const Vec f(factor);
  int64_t i = 0;
  for (; i + W <= len; i += W) (Vec::loadu(x + i) * f).store(x + i);
  for (; i < len; ++i) x[i] *= factor;
}

void topk_softmax_(at::Tensor scores, int64_t picks, double scale, int64_t first_query) {
  TORCH_CHECK(scores.device().is_cpu() && scores.scalar_type() == at::kFloat,
              "topk_softmax_ takes float32 CPU scores, got ", scores.scalar_type());
  TORCH_CHECK(scores.is_contiguous(), "topk_softmax_ takes contiguous scores");
  TORCH_CHECK(scores.dim() >= 2 && picks >= 1, "topk_softmax_: bad shape or picks");
  TORCH_CHECK(scores.size(-1) < (int64_t(1) << 24), "topk_softmax_: rows of 2^24 scores or more");
  const int64_t len = scores.size(-1), rows_per_matrix = scores.size(-2);
  const int64_t rows = scores.numel() / std::max<int64_t>(len, 1);
  float* data = scores.data_ptr<float>();
  // one row per task; at::get_num_threads() so that torch.set_num_threads governs this loop
  // whichever OpenMP runtime it links
#pragma omp parallel num_threads(at::get_num_threads())
  {
    Scratch scratch;
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      float* x = data + r * len;
      const int64_t seen = first_query < 0
          ? len : std::min(len, first_query + r % rows_per_matrix + 1);
      std::fill(x + seen, x + len, 0.0f);
      softmax_of_top(x, seen, std::min(picks, seen), float(scale), scratch);
    }
  }
}

bool has_gemm() { return sgemm_ != nullptr; }

// row-major C (m x n) = A (m x k, ld lda) times B^T, B given as (n x k, ld ldb) when b_transposed,
// else B (k x n, ld ldb); C += when accumulate
void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, bool b_transposed, float* c, int64_t ldc, bool accumulate) {
  // column-major view: C^T (n x m) = op(B)^T (n x k) A^T (k x m)
  const int mm = int(n), nn = int(m), kk = int(k), la = int(ldb), lb = int(lda), lc = int(ldc);
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const char ta = b_transposed ? 'T' : 'N', tb = 'N';
  sgemm_(&ta, &tb, &mm, &nn, &kk, &one, b, &la, a, &lb, &beta, c, &lc);
}

// out[0, dv) = sum over the nonzero weights w[j] (j < len) of w[j] * v[j * dv, (j + 1) * dv)
void gather_mix(const float* w, int64_t len, const float* v, int64_t dv, float* out) {
  std::fill(out, out + dv, 0.0f);
  const Vec zero(0.0f);
  int64_t j = 0;
  auto add = [&](int64_t p) {
    const Vec wp(w[p]);
    const float* row = v + p * dv;
    int64_t c = 0;
    for (; c + W <= dv; c += W)
      at::vec::fmadd(wp, Vec::loadu(row + c), Vec::loadu(out + c)).store(out + c);
    for (; c < dv; ++c) out[c] += w[p] * row[c];
  };
  for (; j + W <= len; j += W) {
    int bits = lanes_of(Vec::loadu(w + j) != zero);
    while (bits) {
      add(j + __builtin_ctz(bits));
      bits &= bits - 1;
    }
  }
  for (; j < len; ++j)
    if (w[j] != 0.0f) add(j);
}

// Top-k attention without autograd: out (BH, N, Dv) = for each query, the softmax over its
// `picks` highest scores scale * q . k (of keys j <= offset + i when causal) mixed with their
// values. A thread takes one (head, block of qb queries) at a time: one GEMM scores the block
// against every key it may see into a buffer of its own, each row becomes its weights
// (softmax_of_top), and the values are mixed by a second GEMM (dense) or, for rows that keep few
// keys, by adding only the kept value rows (gather).
at::Tensor topk_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          int64_t picks, double scale, bool causal, int64_t offset, int64_t qb,
                          bool dense) {
  TORCH_CHECK(has_gemm(), "topk_attention: this torch exports no sgemm_");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  v.scalar_type() == at::kFloat,
              "topk_attention takes float32");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "topk_attention: (BH, N, D)");
  TORCH_CHECK(picks >= 1 && qb >= 1 && offset >= 0, "topk_attention: bad picks, block or offset");
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const int64_t bh = q.size(0), n = q.size(1), d = q.size(2), m = k.size(1), dv = v.size(2);
  TORCH_CHECK(m < (int64_t(1) << 24), "topk_attention: rows of 2^24 keys or more");
  auto out = at::empty({bh, n, dv}, q.options());
  const float* qp = qc.data_ptr<float>();
  const float* kp = kc.data_ptr<float>();
  const float* vp = vc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t blocks = (n + qb - 1) / qb;
  at::parallel_for(0, bh * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(qb * m), totals(qb);
    Scratch scratch;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t h = task / blocks, s = (task % blocks) * qb;
      const int64_t rows = std::min(qb, n - s);
      const int64_t keys = causal ? std::min(m, offset + s + rows) : m;
      float* o = op + (h * n + s) * dv;
      if (keys == 0) {
        std::fill(o, o + rows * dv, 0.0f);
        continue;
      }
      const float* vh = vp + h * m * dv;
      float* sc = scores.data();
      gemm_rows(rows, keys, d, qp + (h * n + s) * d, d, kp + h * m * d, d, true, sc, keys, false);
      // each row's weights before the softmax's division, which is applied to its output row
      // instead (Dv entries, not the row's keys)
      for (int64_t r = 0; r < rows; ++r) {
        float* x = sc + r * keys;
        const int64_t seen = causal ? std::min(keys, offset + s + r + 1) : keys;
        std::fill(x + seen, x + keys, 0.0f);
        totals[r] = seen == 0 ? 0.0f : exp_of_top(x, seen, std::min(picks, seen), float(scale), scratch);
        if (!dense) gather_mix(x, seen, vh, dv, o + r * dv);
      }
      if (dense) gemm_rows(rows, dv, keys, sc, keys, vh, dv, false, o, dv, false);
      for (int64_t r = 0; r < rows; ++r)  // a row without keys: 0 (its total is 0)
        scale_row(o + r * dv, dv, totals[r] > 0.0f || std::isnan(totals[r]) ? 1.0f / totals[r] : 0.0f);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(attnbench_topk, m) {
  m.def("topk_softmax_(Tensor(a!) scores, int picks, float scale, int first_query) -> ()");
  m.impl("topk_softmax_", c10::DispatchKey::CPU, TORCH_FN(topk_softmax_));
  m.def("has_gemm() -> bool", TORCH_FN(has_gemm));
  m.def(
      "topk_attention(Tensor q, Tensor k, Tensor v, int picks, float scale, bool causal, "
      "int offset, int qb, bool dense) -> Tensor");
  m.impl("topk_attention", c10::DispatchKey::CPU, TORCH_FN(topk_attention));
}
