// reward_layout.cuh — the reward-component buffer contract (DESIGN §4).
//
// rc[b * RC_STRIDE + c], RC_STRIDE a compile-time constant (6 or 7, set with -DRC_STRIDE):
//   c=0 pnl_close  c=1 mtm  c=2 cost  c=3 opp_cost  c=4 inventory  c=5 drawdown
//   c=6 aux_align (stride 7 only)
// Components 0..5 are the "core" components every diagnostic iterates; aux_align is kept out of
// the core EMAs and ratios on purpose and has its own EMA slot.
#pragma once

#include "common.cuh"

#ifndef RC_STRIDE
#error "reward_layout.cuh needs -DRC_STRIDE=6 or -DRC_STRIDE=7"
#endif
#if RC_STRIDE != 6 && RC_STRIDE != 7
#error "RC_STRIDE must be 6 or 7"
#endif
ALPHA_RL_AXIS(RC_STRIDE);

#define RC_PNL_CLOSE 0
#define RC_MTM 1
#define RC_COST 2
#define RC_OPP_COST 3
#define RC_INVENTORY 4
#define RC_DRAWDOWN 5
#define RC_AUX_ALIGN 6
#define RC_CORE 6  // components 0..5

ALPHA_RL_EXPORT(RC_CORE);
ALPHA_RL_EXPORT(RC_AUX_ALIGN);

__device__ __forceinline__ int rc_offset(int b, int c) { return b * RC_STRIDE + c; }
