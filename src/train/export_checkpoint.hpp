// `superoffload export`'s work: the fp32 master weights of a checkpoint (written at any world
// size) as a HuggingFace directory — sharded safetensors, index, config.json and the
// tokenizer files of the model the run trained — read one layer at a time from the rank
// files, so memory holds at most one layer.
#pragma once

#include <mpi.h>

#include <filesystem>
#include <string>

namespace superoffload::train {

struct ExportRequest {
  std::string checkpoint;  // a step_XXXXXXXX directory, or a run's output directory (see `which`)
  std::string which = "latest";  // of a run's output directory: "latest" or "best" ([checkpoint] keep_best)
  std::string to;          // the HF directory to write
  std::string dtype = "bf16";  // "bf16" or "fp32"
  std::string max_shard_size = "5GB";
  std::string model;       // the HF model directory the run trained; "" = the manifest's
};

// Collective: the checkpoint is found and verified by every rank of `comm`. `which` ("latest"
// or "best") picks among a run's checkpoints; a step directory is taken as given.
std::filesystem::path find_checkpoint_to_export(const std::string& given, const std::string& which, MPI_Comm comm);
struct ExportedCheckpoint {
  int64_t step = 0;        // of the checkpoint
  int64_t world_size = 0;  // ranks that wrote it
};
// On one process.
ExportedCheckpoint export_checkpoint(const std::filesystem::path& directory, const ExportRequest& request);

}  // namespace superoffload::train
