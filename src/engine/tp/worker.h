// The process of a tensor-parallel worker rank (1..N-1), started by rank 0's TpGroup
// with its socket on `fd`. It learns its rank and configuration from rank 0, loads its
// shard, then does what each command says, in order, until rank 0 says shut down or
// goes away. Any error ends the process: rank 0 sees the EOF and the group is lost
// (rank 0 validates every batch before sending it, so no valid step fails here alone).
#pragma once

namespace keel::tp {

// Returns the process exit status (0: shut down by rank 0).
int run_tp_worker(int fd);

}  // namespace keel::tp
