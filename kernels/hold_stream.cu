// One thread that keeps its stream busy for `ns` nanoseconds of the GPU's global timer
// (spartan_py.timing.hold_stream): launches queued behind it start back to back, so events
// recorded between them time the GPU's work and not the host's time to issue each launch.
extern "C" __global__ void hold_stream(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
