// per_push.cuh — the replay's push, shared by every kernel that writes transitions into it
// (per_push for real transitions, the hindsight kernels for synthetic ones).
//
// Slots are assigned deterministically, in row order, with one atomic per block:
//   1. each block takes a ticket (atomicAdd on state[PER_TICKET]); the ticket, not blockIdx,
//      says which rows [ticket * blockDim, ...) the block handles, so tickets follow launch order;
//   2. a block-wide exclusive prefix sum of the rows' flags (warp ballots);
//   3. a decoupled look-back across blocks: block k publishes its own count in lookback[k] as
//      ((tag | PER_TAG_PARTIAL) << 32) | count, then its first warp reads the words of blocks
//      k-1 .. k-32 together (then k-33 .. k-64, ...) and adds them up to the nearest inclusive
//      one, (tag << 32) | count of blocks 0..j, and block k publishes its inclusive count. The tag (31 bits) is unique to this launch. Blocks only wait on
//      lower tickets, which are already running, so this cannot deadlock, and as every block
//      publishes its count before it waits, no block waits for a chain of the blocks before it;
//   4. slot = (head + flagged rows before this one) mod N. The block with the last ticket
//      advances head by the launch's total, bumps the tag and resets the ticket.
// So the slot of every pushed row equals what a sequential push in row order gives, on any
// grid, and the NumPy oracle reproduces it exactly. Launches on one stream run one after
// another, which is what lets the tag, ticket and head live in plain device memory.
#pragma once

#include <stdint.h>

// state[] (uint64): the replay's device-side counters.
#define PER_HEAD 0          // transitions ever pushed; slot of the next = head mod N
#define PER_TAG 1           // push launches so far (tags the look-back words of one launch)
#define PER_TICKET 2        // tickets taken in the running push launch (0 between launches)
#define PER_SAMPLE_EPOCH 3  // sample launches so far: RNG counter base and β schedule clock
#define PER_SAMPLE_DONE 4   // blocks finished in the running sample launch (0 between)
#define PER_STATUS 5        // bit 0: a sample was drawn from an empty buffer
#define PER_STATE_WORDS 8

#define PER_STATUS_EMPTY_SAMPLE 1ull

#define PER_TAG_MASK 0x7fffffffull     // look-back tags: the push launch's number, 31 bits
#define PER_TAG_PARTIAL 0x80000000ull  // tag bit of a word holding one block's count only

struct PerClaim {
    int ticket;        // which block of rows this block handles
    long long slot;    // slot of this thread's row, -1 when not pushed
    unsigned count;    // rows pushed by the whole block
};

// Every thread of the block must call this, with the flag of its row. blockDim.x <= 1024.
// `ticket` comes from per_push_ticket, called first by every thread of the block. The claim may
// be made more than once per kernel on different (state, lookback) pairs with the same ticket
// (a second counter over the same rows). When `total` is not NULL the block with the last
// ticket stores the launch's number of flagged rows there.
__device__ __forceinline__ long long per_push_claim(unsigned long long* __restrict__ state,
                                                    unsigned long long* __restrict__ lookback,
                                                    int ticket, int nblocks, bool flag,
                                                    unsigned long long mask,
                                                    unsigned long long* total = nullptr) {
    __shared__ unsigned warp_offset[33];
    __shared__ unsigned long long block_base;
    __syncthreads();  // a previous claim in this kernel may still be reading warp_offset
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    const unsigned ballot = __ballot_sync(0xffffffffu, flag);
    const unsigned before_in_warp = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0) warp_offset[warp] = __popc(ballot);
    __syncthreads();
    if (warp == 0) {
        if (lane == 0) {
            const int warps = (static_cast<int>(blockDim.x) + 31) >> 5;
            unsigned running = 0;
            for (int w = 0; w < warps; ++w) {
                const unsigned c = warp_offset[w];
                warp_offset[w] = running;
                running += c;
            }
            warp_offset[32] = running;  // the block's count
        }
        __syncwarp();
        const unsigned long long running = warp_offset[32];
        volatile unsigned long long* vstate = state;
        unsigned long long tag = 0, head = 0;
        if (lane == 0) {
            tag = (vstate[PER_TAG] + 1ull) & PER_TAG_MASK;
            head = vstate[PER_HEAD];
        }
        tag = __shfl_sync(0xffffffffu, tag, 0);
        const unsigned long long partial_tag = tag | PER_TAG_PARTIAL;
        if (ticket > 0 && lane == 0) atomicExch(lookback + ticket, (partial_tag << 32) | running);
        // decoupled look-back, 32 predecessors at a time: lane l reads block j - l's word once it
        // carries this launch's tag; counts are added up to the nearest inclusive word
        unsigned long long before = 0;
        for (int j = ticket - 1; j >= 0; j -= 32) {
            const int at = j - lane;
            unsigned long long word = 0;
            if (at >= 0) {
                const volatile unsigned long long* prev = lookback + at;
                do {
                    word = *prev;
                } while ((word >> 32) != tag && (word >> 32) != partial_tag);
            }
            const bool inclusive_word = at >= 0 && (word >> 32) == tag;
            const unsigned inclusive_lanes = __ballot_sync(0xffffffffu, inclusive_word);
            const int stop = inclusive_lanes != 0u ? __ffs(inclusive_lanes) - 1 : 31;
            unsigned long long count = at >= 0 && lane <= stop ? (word & 0xffffffffull) : 0ull;
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) {
                count += __shfl_xor_sync(0xffffffffu, count, offset);
            }
            before += count;
            if (inclusive_lanes != 0u) break;
        }
        if (lane == 0) {
            const unsigned long long inclusive = before + running;
            __threadfence();
            atomicExch(lookback + ticket, (tag << 32) | inclusive);
            block_base = head + before;
            if (ticket == nblocks - 1) {  // every other block has read head and tag by now
                if (total != nullptr) *total = inclusive;
                vstate[PER_HEAD] = head + inclusive;
                vstate[PER_TAG] = vstate[PER_TAG] + 1ull;
                vstate[PER_TICKET] = 0ull;
                __threadfence();
            }
        }
    }
    __syncthreads();
    if (!flag) return -1;
    return static_cast<long long>((block_base + warp_offset[warp] + before_in_warp) & mask);
}

// The block's ticket (block-uniform). Every thread of the block must call it.
__device__ __forceinline__ int per_push_ticket(unsigned long long* __restrict__ state) {
    __shared__ int ticket;
    if (threadIdx.x == 0) ticket = static_cast<int>(atomicAdd(state + PER_TICKET, 1ull));
    __syncthreads();
    return ticket;
}

// Leaf value (priority^alpha) of a new transition: the buffer's current maximum (1 while the
// buffer holds no positive priority), times `boost`^alpha (boost 1 for real transitions).
__device__ __forceinline__ float per_new_leaf(const float* __restrict__ max_leaf, float boost,
                                              float alpha) {
    const float m = *max_leaf;
    const float base = m > 0.0f ? m : 1.0f;
    return boost == 1.0f ? base : __fmul_rn(powf(boost, alpha), base);
}
