#include "kernels/reference/attention_ref.hpp"

#include "kernels/reference/entry.hpp"

namespace qkv::kernels::reference {

template <class T, class ScoreMod, class MaskMod>
void forward(const FwdParams<T, ScoreMod, MaskMod>& params, T* weights) {
  attention_fwd_ref(params, weights);
}

template <class T, class ScoreMod, class MaskMod>
void backward(const BwdParams<T, ScoreMod, MaskMod>& params) {
  attention_bwd_ref(params);
}

template void forward(const FwdParams<float>&, float*);
template void forward(const FwdParams<double>&, double*);
template void forward(const FlexFwdParams<float>&, float*);
template void forward(const FlexFwdParams<double>&, double*);
template void backward(const BwdParams<float>&);
template void backward(const BwdParams<double>&);
template void backward(const FlexBwdParams<float>&);
template void backward(const FlexBwdParams<double>&);

}  // namespace qkv::kernels::reference
