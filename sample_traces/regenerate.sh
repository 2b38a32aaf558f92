#!/usr/bin/env bash
# Remake every sample trace folder in sample_traces/ with the harness.
# Usage: sample_traces/regenerate.sh [NAME ...]   (no names: all of them)
# Tiny model (one block per stage, hidden 256, seq 64, microbatch size 4), one warm-up
# step and two profiled steps, gloo on CPU, one thread per rank.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
only=("$@")

run() {
  local name=$1; shift
  if ((${#only[@]})) && [[ ! " ${only[*]} " == *" $name "* ]]; then return; fi
  rm -rf "sample_traces/$name"
  echo "== $name: pipeaudit profile $* --out sample_traces/$name" >&2
  python -m pipeaudit profile "$@" --out "sample_traces/$name"
}

run gpipe_p2_m4              --schedule gpipe            -P 2 -M 4 --layers 2
run gpipe_p4_m8              --schedule gpipe            -P 4 -M 8 --layers 4
run 1f1b_p2_m4               --schedule 1f1b             -P 2 -M 4 --layers 2
run 1f1b_p4_m8               --schedule 1f1b             -P 4 -M 8 --layers 4
run 1f1b_p2_m4_noannot       --schedule 1f1b             -P 2 -M 4 --layers 2 --no-annotate
run 1f1b_p4_m8_noannot       --schedule 1f1b             -P 4 -M 8 --layers 4 --no-annotate
run 1f1b_p2_m4_imb_s1x3      --schedule 1f1b             -P 2 -M 4 --layers 2 --imbalance 1=3
run 1f1b_p4_m8_imb_s1x3      --schedule 1f1b             -P 4 -M 8 --layers 4 --imbalance 1=3
run 1f1b_p2_m4_memory        --schedule 1f1b             -P 2 -M 4 --layers 2 --profile-memory
run interleaved-1f1b_p2_m4_v2 --schedule interleaved-1f1b -P 2 -M 4 --layers 4
run interleaved-1f1b_p4_m8_v2 --schedule interleaved-1f1b -P 4 -M 8 --layers 8
run looped-bfs_p2_m4_v2      --schedule looped-bfs       -P 2 -M 4 --layers 4
run interleaved-zb_p2_m4_v2  --schedule interleaved-zb   -P 2 -M 4 --layers 4
run zbv_p2_m4                --schedule zbv              -P 2 -M 4 --layers 4
run zbv_p4_m8                --schedule zbv              -P 4 -M 8 --layers 8
run dualpipev_p2_m4          --schedule dualpipev        -P 2 -M 4 --layers 4
run dualpipev_p4_m8          --schedule dualpipev        -P 4 -M 8 --layers 8
run naive_p2_m4              --schedule naive            -P 2 -M 4 --layers 2
run naive_p4_m4              --schedule naive            -P 4 -M 4 --layers 4
run gpipe_p2_m4_shapes       --schedule gpipe            -P 2 -M 4 --layers 2 --record-shapes
# Data-parallel replicas (8 ranks: 2 pipelines of 4 on a pp x dp_shard DeviceMesh, FSDP2)
run 1f1b_p4_dp2_m8           --schedule 1f1b             -P 4 -M 8 --layers 4 --dp 2
run 1f1b_p4_dp2_m8_slow_r5x3 --schedule 1f1b             -P 4 -M 8 --layers 4 --dp 2 --slow-rank 5=3
# As users often profile: torch's own schedules, no PP: spans, no ProfilerStep marks
run 1f1b_p4_m8_noannot_nosteps  --schedule 1f1b          -P 4 -M 8 --layers 4 --no-annotate --no-step-marks
run gpipe_p4_m8_noannot_nosteps --schedule gpipe         -P 4 -M 8 --layers 4 --no-annotate --no-step-marks
# One process runs both stages (on the CPU: one after another)
run single_gpipe_p2_m4       --schedule gpipe            -P 2 -M 4 --layers 2 --single-process
# One process, every stage on one GPU (stages take turns on it). Needs a CUDA device: made on
# an H100 with torch 2.11.0+cu130; on a machine without one these lines are skipped.
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
run single_cuda_gpipe_p2_m4        --schedule gpipe -P 2 -M 4 --layers 2 --single-process --device cuda
run single_cuda_1f1b_p4_m8         --schedule 1f1b  -P 4 -M 8 --layers 4 --single-process --device cuda
run single_cuda_naive_p2_m4        --schedule naive -P 2 -M 4 --layers 2 --single-process --device cuda
run single_cuda_1f1b_p2_m4_memory  --schedule 1f1b  -P 2 -M 4 --layers 2 --single-process --device cuda --profile-memory
run single_cuda_gpipe_p2_m4_big    --schedule gpipe -P 2 -M 4 --layers 2 --single-process --device cuda --hidden 2048 --seq-len 1024
# four processes sharing the one GPU, P2P over gloo through host memory
gpu4="-P 4 -M 8 --layers 8 --hidden 1024 --seq-len 128 --device cuda --backend gloo"
run cuda_shared_1f1b_noannot_p4_m8 --schedule 1f1b $gpu4 --no-annotate
run cuda_shared_gpipe_p4_m8        --schedule gpipe $gpu4
run cuda_shared_interleaved-1f1b_p4_m8_v2 --schedule interleaved-1f1b $gpu4
run cuda_shared_1f1b_p4_m8_imb_s1x3_nosteps --schedule 1f1b $gpu4 --imbalance 1=3 --no-step-marks
# two processes, a model large enough for the kernels to count, the device's memory events
gpu2="-P 2 -M 4 --layers 8 --hidden 2048 --seq-len 512 --batch-size 16 --device cuda --backend gloo --steps 3 --profile-memory"
run cuda_shared_1f1b_p2_m4_memory --schedule 1f1b $gpu2
run cuda_shared_zbv_p2_m4_memory  --schedule zbv $gpu2
fi
# DeepSpeed's PipelineEngine, the default model (8 blocks) (its TrainSchedule, 1F1B's order; M = gradient_accumulation_steps),
# with the harness's PP: spans around its forward and backward passes: the tests strip them and
# hold the un-annotated reading to the annotated one (pip install 'pipeaudit[deepspeed]')
run deepspeed_p2_m8          --framework deepspeed       -P 2 -M 8
run deepspeed_p4_m8          --framework deepspeed       -P 4 -M 8
run deepspeed_p4_m4_imb_s2x3_nosteps --framework deepspeed -P 4 -M 4 --imbalance 2=3 --no-step-marks
run deepspeed_p4_m2_imb_s1x3 --framework deepspeed       -P 4 -M 2 --imbalance 1=3
run deepspeed_p2_dp2_m8      --framework deepspeed       -P 2 -M 8 --dp 2
# Megatron-core 0.16's own schedules (get_forward_backward_func: 1F1B, interleaved with virtual
# stages), with the harness's PP: spans around its forward_step / backward_step; on CPU its six
# CUDA-only lines are redirected at run time (pip install 'pipeaudit[megatron]')
run megatron_1f1b_p4_m8                  --framework megatron -P 4 -M 8
run megatron_1f1b_p4_m4_imb_s1x3         --framework megatron -P 4 -M 4 --imbalance 1=3
run megatron_interleaved-1f1b_p4_m8_v2   --framework megatron --schedule interleaved-1f1b --chunks 2 -P 4 -M 8
run megatron_interleaved-1f1b_p4_m4_v2_imb_s2x3 --framework megatron --schedule interleaved-1f1b --chunks 2 -P 4 -M 4 --imbalance 2=3
