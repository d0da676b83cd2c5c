"""Thread-block clusters (sm_90) on the CPU harness (op_extension.cuda_sim): a
cluster's blocks run together, each with its own shared memory, read by its
peers through distributed shared memory; planted mistakes with clusters
(csrc/cuda_sim/misuse) are reported as a GPU would hang, race or read garbage.
"""

from __future__ import annotations

import pytest

from op_extension import cuda_sim

CLUSTER_BLOCKS, GRID = 4, 8


def _expected_cluster_clean(threads: int) -> tuple[list[float], list[float]]:
    """What cluster_clean_kernel computes: block b writes b * 1000 + t into its
    slot t; thread t of every block of a cluster adds slot (t + rank) % threads of
    each rank to its own. Integers below 2^24: exact in float whatever the order."""
    sums = []
    for block in range(GRID):
        first = block - block % CLUSTER_BLOCKS
        for t in range(threads):
            peers = sum((first + rank) * 1000 + (t + rank) % threads for rank in range(CLUSTER_BLOCKS))
            sums.append(float(block * 1000 + t + peers))
    totals = [sum(sums[b * threads:(b + 1) * threads]) for b in range(GRID)]
    return sums, totals


# 48: the second warp of each block is partial (its shuffles name 16 lanes).
@pytest.mark.parametrize("threads", [64, 48])
@pytest.mark.parametrize("block_order", cuda_sim.BLOCK_ORDERS)
def test_clean_cluster_kernel_reads_every_block_of_its_cluster(threads, block_order):
    sums, totals = cuda_sim._cluster_clean(threads, block_order)
    assert (sums, totals) == _expected_cluster_clean(threads)


def test_clean_cluster_kernel_passes():
    cuda_sim._run_misuse("cluster_clean", arch="sm_90")


def test_each_block_of_a_cluster_has_its_own_static_shared_arrays():
    """Every block writes its rank into the same static __shared__ array and
    reads it back after a cluster_sync (the host checks each block read its own
    rank); nor do the blocks' writes race with each other."""
    cuda_sim._run_misuse("cluster_static_shared_per_block", arch="sm_90")


def test_global_accesses_ordered_by_a_cluster_sync_pass():
    """Rank 1 of each cluster reads what rank 0 wrote to global memory after a
    cluster_sync (its arrive releases, its wait acquires); the host checks the
    values."""
    cuda_sim._run_misuse("cluster_global_exchange", arch="sm_90")


MISUSE = {
    "cluster_global_exchange_without_sync": r"global_cluster_exchange_kernel<false>.*: block \(1,0,0\) thread "
                                            r"\(0,0,0\): global memory race \(read after write\) at 0x[0-9a-f]+ with "
                                            r"block \(0,0,0\) thread \(0,0,0\), another block of the cluster, no "
                                            r"cluster_sync between",
    "cluster_remote_read_without_sync": r"cluster_remote_read_without_sync_kernel: block \(1,0,0\) thread \(0,0,0\): "
                                        r"shared memory race \(write after read\) at byte offset 0 of dynamic shared "
                                        r"memory of block rank 1 with block \(0,0,0\) thread \(0,0,0\), no cluster_sync "
                                        r"between",
    "cluster_helper_remote_read_without_sync": r"cluster_helper_remote_read_without_sync_kernel: block \(1,0,0\) "
                                               r"thread \(0,0,0\): shared memory race \(write after read\) at byte "
                                               r"offset 0 of dynamic shared memory of block rank 1 with block "
                                               r"\(0,0,0\) thread \(0,0,0\), no cluster_sync between",
    "cluster_peer_exited": r"cluster_peer_exited_kernel: block \(0,0,0\) thread \(0,0,0\): read at byte offset 0 of "
                           r"dynamic shared memory of block rank 1: block rank 1 of the cluster has exited: its shared "
                           r"memory is gone \(cluster_sync before a block exits\)",
    "cluster_sync_skipped_by_a_block": r"cluster_sync_skipped_by_a_block_kernel: block \(0,0,0\) thread \(0,0,0\): "
                                       r"cluster_sync at .*misuse_kernels.cpp:(\d+) is not reached by block \(1,0,0\) "
                                       r"thread \(0,0,0\), which waits at cluster_sync at .*misuse_kernels.cpp:(?!\1)\d+",
    "cluster_sync_after_exit": r"cluster_sync_after_exit_kernel: block \(0,0,0\) thread \(0,0,0\): cluster_sync at "
                               r".*misuse_kernels.cpp:\d+ is not reached by block \(1,0,0\) thread \(5,0,0\), which has "
                               r"exited",
    "cluster_rank_out_of_range": r"cluster_rank_out_of_range_kernel: block \(0,0,0\) thread \(0,0,0\): map_shared_rank "
                                 r"to block rank 2 of a cluster of 2 blocks",
    "cluster_map_outside_dynamic": r"cluster_map_static_shared_kernel: block \(0,0,0\) thread \(0,0,0\): map_shared_rank "
                                   r"of an address outside dynamic shared memory \(in static __shared__ "
                                   r"op_ext::cuda::misuse::cluster_map_static_shared_kernel\(float\*\)::cache\): the "
                                   r"harness models distributed shared memory for the dynamic window only",
    "cluster_map_local_variable": r"cluster_map_local_variable_kernel: block \(0,0,0\) thread \(0,0,0\): "
                                  r"map_shared_rank of an address outside dynamic shared memory: the harness models "
                                  r"distributed shared memory for the dynamic window only",
    "cluster_on_sm80": r"empty_kernel: invalid launch: a cluster of 2 blocks on sm_80: thread-block clusters need "
                       r"sm_90 \(grid \(4,1,1\)",
    # A launch without clusters is a cluster of one on sm_90; before, the GPU traps.
    "cluster_sync_on_sm80": r"cluster_sync_skipped_by_a_block_kernel: block \(0,0,0\) thread \(0,0,0\): cluster_sync "
                            r"on sm_80: thread-block clusters need sm_90",
    "cluster_of_16": r"empty_kernel: invalid launch: a cluster of 16 blocks, beyond the portable maximum of 8",
    "cluster_grid_not_multiple": r"empty_kernel: invalid launch: grid.x of 6 is not a multiple of the cluster size 4",
}


@pytest.mark.parametrize("name", MISUSE)
def test_cluster_misuse_is_reported(name):
    with pytest.raises(RuntimeError, match=MISUSE[name]):
        cuda_sim._run_misuse(name, arch="sm_80" if name.endswith("_sm80") else "sm_90")
    cuda_sim._run_misuse("clean")  # a report leaves the harness usable
    cuda_sim._run_misuse("cluster_clean", arch="sm_90")
