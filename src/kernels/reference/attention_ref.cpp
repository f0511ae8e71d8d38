#include "kernels/reference/attention_ref.hpp"

#include "kernels/reference/entry.hpp"

namespace qkv::kernels::reference {

template <class T, class ScoreMod, class MaskMod>
void forward(const Problem<T, ScoreMod, MaskMod>& problem, T* out, T* lse, T* weights) {
  attention_fwd_ref(problem.dims, problem.q, problem.k, problem.v, problem.scale, problem.score_mod,
                    problem.mask_mod, problem.dropout, out, lse, weights);
}

template <class T, class ScoreMod, class MaskMod>
void backward(const Problem<T, ScoreMod, MaskMod>& problem, const T* out, const T* lse,
              const T* dout, T* dq, T* dk, T* dv, T* dbias, const Broadcast4<T>& dbias_index) {
  attention_bwd_ref(problem.dims, problem.q, problem.k, problem.v, out, lse, dout, problem.scale,
                    problem.score_mod, problem.mask_mod, problem.dropout, dq, dk, dv, dbias,
                    dbias_index);
}

template void forward(const Problem<float>&, float*, float*, float*);
template void forward(const Problem<double>&, double*, double*, double*);
template void forward(const FlexProblem<float>&, float*, float*, float*);
template void forward(const FlexProblem<double>&, double*, double*, double*);
template void backward(const Problem<float>&, const float*, const float*, const float*, float*,
                       float*, float*, float*, const Broadcast4<float>&);
template void backward(const Problem<double>&, const double*, const double*, const double*, double*,
                       double*, double*, double*, const Broadcast4<double>&);
template void backward(const FlexProblem<float>&, const float*, const float*, const float*, float*,
                       float*, float*, float*, const Broadcast4<float>&);
template void backward(const FlexProblem<double>&, const double*, const double*, const double*,
                       double*, double*, double*, double*, const Broadcast4<double>&);

}  // namespace qkv::kernels::reference
