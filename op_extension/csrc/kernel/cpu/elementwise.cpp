// add with broadcasting, and its backward: the sum of the incoming gradient over
// the broadcast dims (reduce_to).
//
// add walks the output densely and the operands through their strides (0 on
// broadcast dims). The innermost dim is vectorised when both operands are dense
// or broadcast along it, which covers same-shape, row-vector and scalar operands.
#include <vector>

#include "register_kernel.h"
#include "vec_utils.h"
#include "add.h"

namespace op_ext::cpu {
namespace {

// out[i] = a[i] + alpha * b[i] over one run of the innermost dim, with each
// operand either dense (kDenseA/kDenseB) or one broadcast scalar. One
// instantiation per combination keeps the hot loop free of branches and of
// vectors that live in memory. stream: the whole steps from out's first
// stream-aligned element on are written with streaming stores.
template <typename T, bool kDenseA, bool kDenseB>
void add_run(const T* a, const T* b, T* out, int64_t len, acc_t<T> alpha, bool stream) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  using V = Vec2<T>;
  const AVec alpha_v(alpha);
  AVec a_lo(static_cast<Acc>(a[0])), a_hi = a_lo;
  AVec b_lo(static_cast<Acc>(b[0])), b_hi = b_lo;
  const int64_t head = stream ? stream_head(out, len) : 0;
  stream = stream && head < len;
  int64_t i = 0;
  while (i < len) {
    const int64_t count = i == 0 && head > 0 ? head : std::min(V::kStep, len - i);
    if (count == V::kStep) {
      if constexpr (kDenseA) V::load(a + i, a_lo, a_hi);
      if constexpr (kDenseB) V::load(b + i, b_lo, b_hi);
    } else {
      if constexpr (kDenseA) V::load_partial(a + i, count, a_lo, a_hi);
      if constexpr (kDenseB) V::load_partial(b + i, count, b_lo, b_hi);
    }
    store_slice(out + i, count, at::vec::fmadd(b_lo, alpha_v, a_lo), at::vec::fmadd(b_hi, alpha_v, a_hi), stream);
    i += count;
  }
}

template <typename T>
void add_inner(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t len, acc_t<T> alpha,
               bool stream) {
  using Acc = acc_t<T>;
  if (sa == 1 && sb == 1) return add_run<T, true, true>(a, b, out, len, alpha, stream);
  if (sa == 1 && sb == 0) return add_run<T, true, false>(a, b, out, len, alpha, stream);
  if (sa == 0 && sb == 1) return add_run<T, false, true>(a, b, out, len, alpha, stream);
  if (sa == 0 && sb == 0) return add_run<T, false, false>(a, b, out, len, alpha, stream);
  for (int64_t i = 0; i < len; ++i) {
    out[i] = static_cast<T>(static_cast<Acc>(a[i * sa]) + alpha * static_cast<Acc>(b[i * sb]));
  }
}

template <typename T>
void add_typed(const AddArgs& args) {
  const T* a = static_cast<const T*>(args.a);
  const T* b = static_cast<const T*>(args.b);
  T* out = static_cast<T*>(args.out);
  const int nd = args.ndim;
  const int64_t inner = args.sizes[nd - 1];
  int64_t numel = 1;
  for (int d = 0; d < nd; ++d) numel *= args.sizes[d];
  if (numel == 0) return;
  const acc_t<T> alpha = static_cast<acc_t<T>>(args.alpha);
  int64_t a_numel = 1, b_numel = 1;  // the elements each operand holds (broadcast dims not counted)
  for (int d = 0; d < nd; ++d) {
    if (args.a_strides[d] != 0) a_numel *= args.sizes[d];
    if (args.b_strides[d] != 0) b_numel *= args.sizes[d];
  }
  const bool stream = streams_outputs((numel + a_numel + b_numel) * static_cast<int64_t>(sizeof(T)));
  parallel_range(numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    int64_t idx = begin;
    while (idx < end) {
      const int64_t col = idx % inner;
      const int64_t len = std::min(inner - col, end - idx);
      int64_t rem = idx / inner, off_a = 0, off_b = 0;
      for (int d = nd - 2; d >= 0; --d) {
        const int64_t i_d = rem % args.sizes[d];
        rem /= args.sizes[d];
        off_a += i_d * args.a_strides[d];
        off_b += i_d * args.b_strides[d];
      }
      const int64_t sa = args.a_strides[nd - 1], sb = args.b_strides[nd - 1];
      add_inner(a + off_a + col * sa, sa, b + off_b + col * sb, sb, out + idx, len, alpha, stream);
      idx += len;
    }
  });
}

// Sums grad [rows, cols] over rows: each task owns a range of columns and walks
// the rows in order, so the result does not depend on the thread count.
template <typename T>
void sum_rows(const T* grad, T* out, int64_t rows, int64_t cols, acc_t<T> alpha) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  constexpr int64_t kStep = Vec2<T>::kStep;
  const int64_t grain = std::max<int64_t>(kStep, 32768 / std::max<int64_t>(rows, 1));
  parallel_range(cols, grain, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; c += kStep) {
      const int64_t count = std::min(kStep, c_end - c);
      AVec s_lo(Acc(0)), s_hi(Acc(0));
      for (int64_t r = 0; r < rows; ++r) {
        AVec lo, hi;
        load_slice(grad + r * cols + c, count, lo, hi);
        s_lo = s_lo + lo;
        s_hi = s_hi + hi;
      }
      store_slice(out + c, count, s_lo * AVec(alpha), s_hi * AVec(alpha));
    }
  });
}

// Sums each row of grad [rows, cols].
template <typename T>
void sum_cols(const T* grad, T* out, int64_t rows, int64_t cols, acc_t<T> alpha) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  parallel_range(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      AVec s_lo(Acc(0)), s_hi(Acc(0));
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec lo, hi;
        load_slice(grad + r * cols + i, count, lo, hi);
        s_lo = s_lo + lo;
        s_hi = s_hi + hi;
      });
      out[r] = static_cast<T>(reduce_add(s_lo + s_hi) * alpha);
    }
  });
}

// Any other pattern of kept and reduced dims: every output element sums its
// own sub-space with an odometer over the reduced dims.
template <typename T>
void sum_general(const ReduceToArgs& args, const T* grad, T* out, acc_t<T> alpha) {
  using Acc = acc_t<T>;
  const int nd = args.ndim;
  int64_t strides[kMaxDims];
  int64_t stride = 1;
  for (int d = nd - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= args.sizes[d];
  }
  std::vector<int> kept, reduced;
  int64_t out_numel = 1;
  for (int d = 0; d < nd; ++d) {
    (args.reduced[d] ? reduced : kept).push_back(d);
    if (!args.reduced[d]) out_numel *= args.sizes[d];
  }
  parallel_range(out_numel, 64, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      int64_t rem = o, base = 0;
      for (int k = static_cast<int>(kept.size()) - 1; k >= 0; --k) {
        const int d = kept[k];
        base += (rem % args.sizes[d]) * strides[d];
        rem /= args.sizes[d];
      }
      int64_t idx[kMaxDims] = {};
      Acc sum = Acc(0);
      while (true) {
        int64_t off = base;
        for (size_t k = 0; k < reduced.size(); ++k) off += idx[k] * strides[reduced[k]];
        sum += static_cast<Acc>(grad[off]);
        int k = static_cast<int>(reduced.size()) - 1;
        for (; k >= 0; --k) {
          if (++idx[k] < args.sizes[reduced[k]]) break;
          idx[k] = 0;
        }
        if (k < 0) break;
      }
      out[o] = static_cast<T>(sum * alpha);
    }
  });
}

template <typename T>
void reduce_to_typed(const ReduceToArgs& args) {
  using Acc = acc_t<T>;
  const T* grad = static_cast<const T*>(args.grad);
  T* out = static_cast<T*>(args.out);
  const Acc alpha = static_cast<Acc>(args.alpha);
  const int nd = args.ndim;
  int64_t numel = 1;
  bool any_reduced = false;
  for (int d = 0; d < nd; ++d) {
    numel *= args.sizes[d];
    any_reduced = any_reduced || args.reduced[d];
  }
  if (!any_reduced) {  // out = alpha * grad
    using AVec = Vectorized<Acc>;
    const AVec alpha_v(alpha);
    vec_map<T, 1, 1>(numel, {grad}, {out},
                     [&](const std::array<AVec, 1>& g, std::array<AVec, 1>& y) { y[0] = g[0] * alpha_v; });
    return;
  }
  if (numel == 0) {  // the reduced output still has its elements: zeros
    int64_t out_numel = 1;
    for (int d = 0; d < nd; ++d) out_numel *= args.reduced[d] ? 1 : args.sizes[d];
    std::fill(out, out + out_numel, static_cast<T>(0));
    return;
  }
  if (nd == 1) {  // everything reduced to one element
    sum_cols(grad, out, 1, args.sizes[0], alpha);
  } else if (nd == 2 && args.reduced[0] && !args.reduced[1]) {
    sum_rows(grad, out, args.sizes[0], args.sizes[1], alpha);
  } else if (nd == 2 && !args.reduced[0] && args.reduced[1]) {
    sum_cols(grad, out, args.sizes[0], args.sizes[1], alpha);
  } else {
    sum_general(args, grad, out, alpha);
  }
}

void add_forward_impl(DType dtype, const AddArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) { add_typed<typename decltype(tag)::type>(a); });
}

void reduce_to_impl(DType dtype, const ReduceToArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) { reduce_to_typed<typename decltype(tag)::type>(a); });
}

}  // namespace

OP_EXT_REGISTER_KERNEL(add_forward, add_forward_impl);
OP_EXT_REGISTER_KERNEL(reduce_to, reduce_to_impl);

}  // namespace op_ext::cpu
