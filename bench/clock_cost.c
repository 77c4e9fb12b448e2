/* What one read of the wall clock costs here, in ns: the read next_shard_id makes for every id
 * (clock_gettime(CLOCK_REALTIME), through the vDSO). Prints the mean over 10 million reads.
 * Built and run by bench/bench.py. */
#include <stdio.h>
#include <time.h>

int main(void)
{
    const long reads = 10000000;
    struct timespec start, end, now;
    long sink = 0;

    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < reads; i++) {
        clock_gettime(CLOCK_REALTIME, &now);
        sink += now.tv_nsec;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("%.2f\n", ns / reads + (sink == 42 ? 1e-9 : 0));
    return 0;
}
