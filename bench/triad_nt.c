// A probe beside the DRAM comparison (not part of rooflab, x86 with AVX-512 only): STREAM's
// triad a = b + q*c over the same arrays twice, with ordinary stores (what gcc makes of the
// loop) and with streaming (non-temporal) stores, which skip reading each destination line
// before writing it (the write-allocate). Bytes counted as STREAM counts them, 24 per element;
// best of 20 passes after the first. Where the two differ, a triad's rate says how many of its
// stores paid a write-allocate, not only what the DRAM delivers (docs/benchmarks.md).
//   gcc -O3 -march=native -fopenmp [-DN=doubles] bench/triad_nt.c -o triad_nt
//   OMP_NUM_THREADS=<cores> OMP_PLACES=cores OMP_PROC_BIND=spread ./triad_nt
// N: doubles per array; the default is the node's STREAM size (8x its 300 MiB LLC, rounded).
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#ifndef N
#define N 320000000L
#endif
#define NTIMES 20
_Static_assert(N % 8 == 0, "N: a multiple of 8 doubles (one 512-bit store each)");

int main(void) {
  double *a = aligned_alloc(64, N * 8), *b = aligned_alloc(64, N * 8), *c = aligned_alloc(64, N * 8);
  if (!a || !b || !c) { fprintf(stderr, "cannot allocate 3 x %ld doubles\n", (long)N); return 1; }
  #pragma omp parallel for schedule(static)
  for (long i = 0; i < N; i++) { a[i] = 1.0; b[i] = 2.0 + i % 7; c[i] = 0.5 * (i % 5); }
  const double q = 3.0;
  for (int streaming = 0; streaming < 2; streaming++) {
    double best = 1e30;
    for (int t = 0; t < NTIMES; t++) {
      double t0 = omp_get_wtime();
      if (!streaming) {
        #pragma omp parallel for schedule(static)
        for (long i = 0; i < N; i++) a[i] = b[i] + q * c[i];
      } else {
        #pragma omp parallel for schedule(static)
        for (long i = 0; i < N; i += 8)
          _mm512_stream_pd(a + i, _mm512_fmadd_pd(_mm512_set1_pd(q), _mm512_load_pd(c + i),
                                                  _mm512_load_pd(b + i)));
        _mm_sfence();
      }
      double dt = omp_get_wtime() - t0;
      if (t > 0 && dt < best) best = dt;
    }
    // what was written is checked, so neither loop can be dropped: every a[i] = b[i] + q*c[i]
    long bad = 0;
    #pragma omp parallel for reduction(+ : bad)
    for (long i = 0; i < N; i++) bad += a[i] != b[i] + q * c[i];
    printf("%s triad: %.1f GB/s%s\n", streaming ? "streaming-store" : "ordinary-store",
           24.0 * N / best / 1e9, bad ? " (WRONG RESULT)" : "");
  }
  return 0;
}
