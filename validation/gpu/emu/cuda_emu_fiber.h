// cuda_emu_fiber — the fibers of the CPU emulator (cuda_emu.h): one per CUDA thread, the
// context switch, and the scheduler that runs a block's threads to their next sync point.
// Not a header of its own: cuda_emu.h includes it inside namespace emu, after the
// block context and the device memory registry.
#ifndef NEBULA_CUDA_EMU_FIBER_H
#define NEBULA_CUDA_EMU_FIBER_H

// ---- fibers ------------------------------------------------------------------
#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in
// *save, loads `load` and pops the other context's registers (System V ABI).
inline __attribute__((naked, noinline)) void ctx_switch(void ** /*save*/, void * /*load*/)
{
    __asm__ volatile(
        "pushq %rbp\n\t"
        "pushq %rbx\n\t"
        "pushq %r12\n\t"
        "pushq %r13\n\t"
        "pushq %r14\n\t"
        "pushq %r15\n\t"
        "movq %rsp, (%rdi)\n\t"
        "movq %rsi, %rsp\n\t"
        "popq %r15\n\t"
        "popq %r14\n\t"
        "popq %r13\n\t"
        "popq %r12\n\t"
        "popq %rbx\n\t"
        "popq %rbp\n\t"
        "ret\n\t");
}
struct context { void *sp = nullptr; };
inline void ctx_init(context &c, char *stack, size_t bytes, void (*entry)())
{
    uintptr_t top = ((uintptr_t)(stack + bytes)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;         // entry's return address slot: rsp = 8 mod 16 at entry
    *--sp = (void *)entry;   // ctx_switch's ret jumps here
    for (int i = 0; i < 6; i++) *--sp = nullptr;  // rbp rbx r12-r15
    c.sp = sp;
}
inline void ctx_swap(context &from, context &to) { ctx_switch(&from.sp, to.sp); }
#else
struct context { ucontext_t uc; };
inline void ctx_init(context &c, char *stack, size_t bytes, void (*entry)())
{
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = bytes;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
inline void ctx_swap(context &from, context &to) { swapcontext(&from.uc, &to.uc); }
#endif

enum fiber_state { FIBER_READY, FIBER_WAIT_BAR, FIBER_WAIT_WARP, FIBER_DONE };
enum warp_op { WARP_NONE, WARP_SHFL, WARP_BALLOT, WARP_SYNC };
inline const char *warp_op_name(int op)
{
    return op == WARP_SHFL ? "__shfl_*_sync" : op == WARP_BALLOT ? "__ballot/any/all_sync" : "__syncwarp";
}

struct fiber {
    context ctx;
    int state;
    unsigned wait_gen;
    uint3 tid;
};

struct warp_state {
    unsigned exist;    // lanes that exist (partial last warp)
    unsigned live;     // lanes that have not exited
    unsigned arrived;  // lanes in the pending operation
    unsigned mask;     // its mask
    int op;
    unsigned gen;      // completed operations
    uint64_t slot[2][32];  // values of operation gen (slot[gen & 1])
};

// One worker's block: its fibers, barrier, warps and shared memory.
struct block_ctx {
    std::vector<char *> stacks;
    std::vector<fiber> fibers;
    std::vector<warp_state> warps;
    context sched;
    int current = 0;
    unsigned alive = 0;
    unsigned bar_arrived = 0, bar_gen = 0;
    const char *bar_file = nullptr;
    int bar_line = 0;
    void (*thunk)(const void *) = nullptr;  // runs the kernel for the current thread
    const void *thunk_arg = nullptr;
    const char *kernel = "";
    // Shared memory: [dynamic | guard | static 1 | guard | static 2 | guard ...].
    alignas(64) unsigned char smem[kSmemOptinMax + 64 * kGuard];
    size_t dyn_bytes = 0, used = 0, static_bytes = 0;
    struct static_array { int key; size_t offset, bytes; };
    std::vector<static_array> statics;  // in placement order

    ~block_ctx()
    {
        for (char *s : stacks) munmap(s - 4096, kStackBytes + 4096);
    }
    void ensure_stacks(size_t n)
    {
        while (stacks.size() < n) {
            void *m = mmap(nullptr, kStackBytes + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) fatal("mmap of a fiber stack failed");
            mprotect(m, 4096, PROT_NONE);  // overflow faults instead of corrupting a neighbour
            stacks.push_back((char *)m + 4096);
        }
    }
    void guard(size_t off)
    {
        memset(smem + off, kGuardByte, kGuard);
    }
    void check_guards()
    {
        auto bad = [&](size_t off) {
            for (size_t i = 0; i < kGuard; i++)
                if (smem[off + i] != kGuardByte) return true;
            return false;
        };
        if (bad(dyn_bytes))
            fatal("kernel %s block (%u,%u,%u) wrote outside its shared arrays: the guard after the dynamic shared "
                  "memory (%zu bytes) changed", kernel, blockIdx.x, blockIdx.y, blockIdx.z, dyn_bytes);
        for (const static_array &s : statics)
            if (bad(s.offset + s.bytes))
                fatal("kernel %s block (%u,%u,%u) wrote outside its shared arrays: the guard after static "
                      "__shared__ array #%d (%zu bytes) changed", kernel,
                      blockIdx.x, blockIdx.y, blockIdx.z, s.key, s.bytes);
    }
};
inline thread_local block_ctx *cur = nullptr;

// Worker contexts are pooled: their stacks stay mapped and touched across launches.
struct ctx_pool {
    std::mutex mu;
    std::vector<std::unique_ptr<block_ctx>> free;
};
inline ctx_pool &pool()
{
    static ctx_pool p;
    return p;
}
inline std::unique_ptr<block_ctx> ctx_take()
{
    ctx_pool &p = pool();
    std::lock_guard<std::mutex> g(p.mu);
    if (p.free.empty()) return std::make_unique<block_ctx>();
    std::unique_ptr<block_ctx> c = std::move(p.free.back());
    p.free.pop_back();
    return c;
}
inline void ctx_give(std::unique_ptr<block_ctx> c)
{
    ctx_pool &p = pool();
    std::lock_guard<std::mutex> g(p.mu);
    p.free.push_back(std::move(c));
}

inline void yield_to_scheduler()
{
    block_ctx *b = cur;
    ctx_swap(b->fibers[b->current].ctx, b->sched);
}

inline void release_barrier_if_complete(block_ctx *b)
{
    if (b->bar_arrived > 0 && b->bar_arrived == b->alive) {
        b->bar_arrived = 0;
        b->bar_gen++;
    }
}

inline void fiber_main()
{
    block_ctx *b = cur;
    b->thunk(b->thunk_arg);
    b = cur;
    int t = b->current;
    b->fibers[t].state = FIBER_DONE;
    b->alive--;
    b->warps[t / 32].live &= ~(1u << (t % 32));
    // An exited thread counts as arrived at the block's barrier (PTX `exit`).
    release_barrier_if_complete(b);
    ctx_swap(b->fibers[t].ctx, b->sched);
    fatal("a finished CUDA thread was resumed");
}

[[noreturn]] inline void deadlock(block_ctx *b)
{
    fprintf(stderr, "cuda_emu: kernel %s block (%u,%u,%u) deadlocked:\n", b->kernel, blockIdx.x, blockIdx.y,
            blockIdx.z);
    size_t shown = 0;
    for (size_t t = 0; t < b->fibers.size() && shown < 8; t++) {
        const fiber &f = b->fibers[t];
        if (f.state == FIBER_WAIT_BAR) {
            fprintf(stderr, "  thread %zu waits in __syncthreads (%s:%d); %u of %u live threads arrived\n", t,
                    b->bar_file, b->bar_line, b->bar_arrived, b->alive);
            shown++;
        } else if (f.state == FIBER_WAIT_WARP) {
            const warp_state &w = b->warps[t / 32];
            fprintf(stderr, "  thread %zu waits in %s, mask 0x%08x: lanes 0x%08x arrived, 0x%08x live\n", t,
                    warp_op_name(w.op), w.mask, w.arrived, w.live);
            shown++;
        }
    }
    fatal("deadlock (a barrier or warp operation not reached by every thread it waits for)");
}

// Runs one block: every thread from its start to its end, switching at sync points.
inline void run_block(block_ctx *b, uint3 bid, dim3 bdim)
{
    unsigned n = bdim.x * bdim.y * bdim.z;
    blockIdx = bid;
    b->ensure_stacks(n);
    b->fibers.resize(n);
    b->warps.assign((n + 31) / 32, warp_state{});
    for (unsigned w = 0; w < b->warps.size(); w++) {
        unsigned lanes = std::min(32u, n - 32 * w);
        b->warps[w].exist = b->warps[w].live = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    }
    for (unsigned t = 0; t < n; t++) {
        fiber &f = b->fibers[t];
        ctx_init(f.ctx, b->stacks[t], kStackBytes, fiber_main);
        f.state = FIBER_READY;
        f.tid = uint3{ t % bdim.x, (t / bdim.x) % bdim.y, t / (bdim.x * bdim.y) };
    }
    b->alive = n;
    b->bar_arrived = 0;
    memset(b->smem, 0xff, b->dyn_bytes);
    b->guard(b->dyn_bytes);
    b->used = b->dyn_bytes + kGuard;
    b->static_bytes = 0;
    b->statics.clear();
    // Threads run in order 0..n-1 or n-1..0, alternating per pass (each pass runs every
    // thread to its next sync point) and starting reversed in odd blocks: a read of
    // another thread's write with no barrier between sees stale data in some pass.
    bool odd_block = ((bid.z * gridDim.y + bid.y) * gridDim.x + bid.x) & 1;
    for (unsigned pass = 0; b->alive > 0; pass++) {
        bool progressed = false, reverse = odd_block ^ (pass & 1);
        for (unsigned k = 0; k < n; k++) {
            unsigned t = reverse ? n - 1 - k : k;
            fiber &f = b->fibers[t];
            if (f.state == FIBER_DONE) continue;
            if (f.state == FIBER_WAIT_BAR && f.wait_gen == b->bar_gen) continue;
            if (f.state == FIBER_WAIT_WARP && f.wait_gen == b->warps[t / 32].gen) continue;
            f.state = FIBER_READY;
            b->current = (int)t;
            threadIdx = f.tid;
            ctx_swap(b->sched, f.ctx);
            progressed = true;
        }
        if (!progressed) deadlock(b);
    }
    b->check_guards();
}

#endif
