/*
 * The grid of tiles that the CPU backend cuts a big OpenBLAS product into
 * (backend_cpu.c, cpu_gemm): each tile one single-threaded cblas_sgemm
 * owned by one part of the pool. The grid depends on the shape alone,
 * never on the number of parts, so every element of C comes from the same
 * call whatever the thread count. Here apart so that tests see it.
 */
#ifndef COHORT_GEMM_GRID_H
#define COHORT_GEMM_GRID_H

#define GEMM_SPLIT_WORK 4e6 /* multiply-adds of a product worth cutting into tiles */
#define GEMM_TILES 64       /* the most tiles of one product: enough for the pool */
#define GEMM_MIN_EDGE 32    /* rows or columns of a tile at least: packing stays small */
#define GEMM_EDGE_UNIT 16   /* tile edges on multiples of OpenBLAS's register blocks */

static inline int gemm_ceil_div(int a, int b) { return (a + b - 1) / b; }

/* The tiles of an M x N x Kd product: as many as the rows give with the
 * columns (at most GEMM_TILES), and of those grids the one that packs the
 * least. Each tile's sgemm packs its rows of A (Kd each) and its columns of
 * B: mb row blocks pack all of B mb times, nb column blocks all of A nb
 * times. Row blocks first (32 x 2 blocks of a 1024 x 1000 x 3072 forward,
 * a batch of 1024 through Dense(1000) on 3072 inputs) packed the 12 MiB
 * of weights 32 times a step: 22% of the epoch in OpenBLAS's copy, on a
 * Zen 5, against 8 x 8 blocks. */
static inline void gemm_grid_of(int M, int N, int Kd, int *mb_out, int *nb_out, int *tile_m,
                                int *tile_n)
{
    *mb_out = *nb_out = 1;
    *tile_m = M;
    *tile_n = N;
    if ((double)M * N * Kd <= GEMM_SPLIT_WORK)
        return;
    int m_max = gemm_ceil_div(M, GEMM_MIN_EDGE), n_max = gemm_ceil_div(N, GEMM_MIN_EDGE);
    m_max = m_max < GEMM_TILES ? m_max : GEMM_TILES;
    int mb = m_max, nb = 1, best = 0;
    double cost = 0.0;
    for (int m = 1; m <= m_max; m++) {
        int n = GEMM_TILES / m < n_max ? GEMM_TILES / m : n_max;
        double c = (double)m * N + (double)n * M;
        if (m * n > best || (m * n == best && c < cost)) {
            mb = m;
            nb = n;
            best = m * n;
            cost = c;
        }
    }
    *tile_m = gemm_ceil_div(gemm_ceil_div(M, mb), GEMM_EDGE_UNIT) * GEMM_EDGE_UNIT;
    *tile_n = gemm_ceil_div(gemm_ceil_div(N, nb), GEMM_EDGE_UNIT) * GEMM_EDGE_UNIT;
    *mb_out = gemm_ceil_div(M, *tile_m);
    *nb_out = gemm_ceil_div(N, *tile_n);
}

#endif
