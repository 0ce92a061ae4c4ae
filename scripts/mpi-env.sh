# Sourced by the quick-start scripts: the environment mpirun needs on a workstation or CI
# container (not on a Slurm cluster, where srun --mpi=pmix launches the ranks).
if [[ $(id -u) == 0 ]]; then
  # Open MPI refuses to run as root unless told twice.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Containers often forbid the cross-memory-attach path of Open MPI's shared-memory transport.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
