# Device call 3 (benchmarks/gpu_bundle.py): reassemble the SmolLM2 GGUF from .gpu/p1 (call 2) and .gpu/p2, import it, time a phase
R=$PWD; export PYTHONPATH=/tmp/dev/site:$R PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p /tmp/dev/store /tmp/gpu && cp .gpu/p2/* /tmp/dev/store/ && ls -la /tmp/dev/store && cd /tmp/gpu
cat /tmp/dev/store/g.00 /tmp/dev/store/g.01 > SmolLM2-135M-Instruct.Q4_1.gguf && grep gguf /tmp/dev/store/sums | sha256sum -c || exit 3
python3 -c "from pathlib import Path; from evotrainer.policy.gguf import import_gguf; import_gguf(Path('/tmp/gpu/SmolLM2-135M-Instruct.Q4_1.gguf'), Path('/tmp/gpu/smollm2'), log=print)" 2>&1 | grep -v "it/s"
[ "${TIME_PHASE:-1}" = 0 ] && exit 0  # TIME_PHASE=0: import only, leave the device time to the fault run
cd $R && timeout 150 python3 benchmarks/gpu_phase.py --models "" --smollm2 /tmp/gpu/smollm2 --steps 8 --prompts 16 --completion-length 24 --out $OUT/gpu_phase.json > /tmp/gpu/phase.log 2>&1; echo "exit $?"; grep -v "it/s" /tmp/gpu/phase.log | tail -40
